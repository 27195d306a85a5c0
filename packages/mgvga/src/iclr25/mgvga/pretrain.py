"""Pre-training loop (spec Sec. 1.5): PyG batches, AdamW + cosine schedule, checkpoints, resume."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from .model import MGVGAConfig, MGVGAPretrainer, cosine_schedule, param_groups

__all__ = ["pretrain", "save_checkpoint", "load_checkpoint", "load_encoder"]

log = logging.getLogger("iclr25.mgvga")


def save_checkpoint(path: str | Path, model: MGVGAPretrainer, optimizer=None, scheduler=None, step: int = 0,
                    generator: torch.Generator | None = None, history: list | None = None) -> None:
    """Write ``{config, model, optimizer, scheduler, step, rng, history}`` atomically with ``torch.save``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    state = {"config": model.cfg.to_dict(), "model": model.state_dict(), "step": step, "history": history or []}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    if generator is not None:
        state["rng"] = generator.get_state()
    state["torch_rng"] = torch.get_rng_state()  # dropout draws from the global generator
    tmp = p.with_suffix(p.suffix + ".tmp")
    torch.save(state, tmp)
    tmp.replace(p)


def load_checkpoint(path: str | Path) -> tuple[MGVGAPretrainer, dict]:
    """Rebuild the pre-training model from a checkpoint; returns ``(model, raw_state)``.

    Raises:
        FileNotFoundError: missing file. ValueError: not an MGVGA checkpoint.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint {p} does not exist")
    state = torch.load(p, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or "config" not in state or "model" not in state:
        raise ValueError(f"{p} is not an iclr25-mgvga checkpoint (keys: {list(state)[:5]})")
    model = MGVGAPretrainer(MGVGAConfig(**state["config"]))
    model.load_state_dict(state["model"])
    return model, state


def load_encoder(path: str | Path):
    """The encoder (type embedding + GNN) of a checkpoint, in eval mode."""
    m, _ = load_checkpoint(path)
    return m.encoder.eval()


def pretrain(
    model: MGVGAPretrainer,
    mgm_graphs: Sequence[Data],
    vga_graphs: Sequence[Data] = (),
    vga_text: torch.Tensor | np.ndarray | None = None,
    *,
    steps: int = 200,
    batch_size: int = 4,
    lr: float = 1e-3,
    weight_decay: float = 0.01,
    min_lr_ratio: float = 0.1,
    seed: int = 42,
    checkpoint: str | Path | None = None,
    checkpoint_every: int = 100,
    resume: bool = False,
    progress: bool = True,
    log_every: int = 10,
    stop_after: int | None = None,
) -> list[dict]:
    """Optimise ``model`` for ``steps`` AdamW steps; each step draws ``batch_size`` graphs from the
    MGM pool and ``batch_size`` (graph, text) pairs from the VGA pool uniformly with replacement.

    Args:
        mgm_graphs: ``Data`` from :func:`~iclr25.mgvga.graph.to_graph` (needed for mgm/graphmae/mgvga).
        vga_graphs, vga_text: index-aligned graphs and Float[P, text_dim] embeddings (vga/mgvga).
        checkpoint: file written every ``checkpoint_every`` steps and at the end.
        resume: continue from ``checkpoint`` (model, optimiser, schedule, RNG, step, history).
        stop_after: stop (and checkpoint) once this global step is reached, keeping the schedule
            of ``steps`` — for time-sliced runs continued later with ``resume=True``.

    Returns:
        history: one dict of logged scalars every ``log_every`` steps (and the last step).
    """
    obj = model.cfg.objective
    need_mgm = obj in ("mgvga", "mgm", "graphmae")
    need_vga = obj in ("mgvga", "vga")
    if need_mgm and not mgm_graphs:
        raise ValueError(f"objective {obj!r} needs MGM graphs")
    if need_vga:
        if vga_text is None or len(vga_graphs) == 0:
            raise ValueError(f"objective {obj!r} needs VGA graphs and their text embeddings")
        vga_text = torch.as_tensor(np.asarray(vga_text), dtype=torch.float32)
        if vga_text.shape[0] != len(vga_graphs) or vga_text.shape[-1] != model.cfg.text_dim:
            raise ValueError(f"vga_text has shape {tuple(vga_text.shape)}; expected ({len(vga_graphs)}, "
                             f"{model.cfg.text_dim})")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr)
    sched = cosine_schedule(opt, steps, min_lr_ratio)
    start, history = 0, []
    if resume:
        if checkpoint is None or not Path(checkpoint).is_file():
            raise FileNotFoundError(f"--resume given but checkpoint {checkpoint} does not exist")
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        if "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
        if "scheduler" in state:
            sched.load_state_dict(state["scheduler"])
        if "rng" in state:
            gen.set_state(state["rng"])
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])
        start, history = int(state["step"]), list(state.get("history", []))
        log.info("resumed from %s at step %d", checkpoint, start)
    model.train()
    it = range(start, steps)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"pretrain[{obj}]", initial=start, total=steps, leave=False)
    for step in it:
        mgm_b = vga_b = txt = None
        if need_mgm:
            idx = torch.randint(len(mgm_graphs), (batch_size,), generator=gen).tolist()
            mgm_b = Batch.from_data_list([mgm_graphs[i] for i in idx])
        if need_vga:
            idx = torch.randint(len(vga_graphs), (batch_size,), generator=gen).tolist()
            vga_b = Batch.from_data_list([vga_graphs[i] for i in idx])
            txt = vga_text[idx]
        out = model(mgm_b, vga_b, txt, generator=gen)
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()
        sched.step()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            rec = {"step": step + 1, "lr": opt.param_groups[0]["lr"], **{k: float(v.detach()) for k, v in out.items()}}
            history.append(rec)
            if progress and hasattr(it, "set_postfix"):
                it.set_postfix(loss=f"{rec['loss']:.3f}")
        last = step + 1 == steps or (stop_after is not None and step + 1 >= stop_after)
        if checkpoint is not None and ((step + 1) % checkpoint_every == 0 or last):
            save_checkpoint(checkpoint, model, opt, sched, step + 1, gen, history)
        if last:
            break
    if checkpoint is not None:
        Path(checkpoint).with_suffix(".history.json").write_text(json.dumps(history, indent=1))
    model.eval()
    return history
