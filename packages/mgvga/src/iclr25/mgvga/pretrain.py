"""Pre-training loop (spec Sec. 1.5): PyG batches, AdamW + cosine schedule, checkpoints, resume."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from .graph import mask_nodes_batched
from .model import MGVGAConfig, MGVGAEncoder, MGVGAPretrainer, cosine_schedule, param_groups
from .storage import safe_torch_load

__all__ = ["pretrain", "save_checkpoint", "load_checkpoint", "save_encoder", "load_encoder"]

log = logging.getLogger("iclr25.mgvga")


CHECKPOINT_FORMAT = "iclr25-mgvga-checkpoint/1"
ENCODER_FORMAT = "iclr25-mgvga-encoder/1"


def save_checkpoint(path: str | Path, model: MGVGAPretrainer, optimizer=None, scheduler=None, step: int = 0,
                    generator: torch.Generator | None = None, history: list | None = None,
                    training: dict | None = None) -> None:
    """Write the training state atomically with ``torch.save``: tensors (model, optimiser, RNG
    states) and plain containers only, metadata (config, step, history, the training settings a
    resume must match) as one JSON string — so :func:`load_checkpoint` can read it with
    ``weights_only=True``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": CHECKPOINT_FORMAT, "config": model.cfg.to_dict(), "step": int(step), "history": history or []}
    if training is not None:
        meta["training"] = training
    state = {"format": CHECKPOINT_FORMAT, "meta": json.dumps(meta, allow_nan=False), "model": model.state_dict()}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    if generator is not None:
        state["rng"] = generator.get_state()
    state["torch_rng"] = torch.get_rng_state()  # dropout draws from the global generator
    tmp = p.with_name(p.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(p)


def _read_checkpoint(path: str | Path) -> tuple[dict, dict]:
    """``(raw_state, meta)`` of a checkpoint, loaded with ``weights_only=True``.

    Raises:
        FileNotFoundError: missing file. ValueError: refused pickle, corrupt file, or not an
        iclr25-mgvga checkpoint (naming the file).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint {p} does not exist")
    state = safe_torch_load(p)
    if not isinstance(state, dict) or "model" not in state or ("meta" not in state and "config" not in state):
        keys = list(state)[:5] if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"{p} is not an iclr25-mgvga checkpoint (found {keys}); pass the checkpoint.pt written "
                         "by 'iclr25-mgvga pretrain' or an encoder.safetensors")
    if "meta" in state:
        try:
            meta = json.loads(state["meta"])
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{p}: checkpoint metadata is not JSON ({e})") from None
    else:  # checkpoints of 0.1.0 development builds: plain dicts, still weights_only-loadable
        meta = {"config": state["config"], "step": int(state.get("step", 0)), "history": state.get("history", [])}
    return state, meta


def _config_from(meta_cfg, where) -> MGVGAConfig:
    try:
        return MGVGAConfig(**meta_cfg)
    except TypeError as e:
        raise ValueError(f"{where}: the stored model config does not fit this version ({e})") from None


def load_checkpoint(path: str | Path) -> tuple[MGVGAPretrainer, dict]:
    """Rebuild the pre-training model from a checkpoint; returns ``(model, state)`` where
    ``state`` holds the raw tensors plus ``config``, ``step`` and ``history`` from the metadata.

    Raises:
        FileNotFoundError: missing file. ValueError: refused (non-tensor pickle), corrupt, or not
        an MGVGA checkpoint; weights that do not fit the stored config.
    """
    state, meta = _read_checkpoint(path)
    model = MGVGAPretrainer(_config_from(meta["config"], path))
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as e:
        raise ValueError(f"{path}: weights do not match the stored config: {str(e)[:300]}") from None
    return model, {**state, **meta}


def save_encoder(path: str | Path, encoder: MGVGAEncoder) -> Path:
    """Write an encoder (type embedding + GNN) as safetensors, the config as JSON metadata."""
    from safetensors.torch import save_file

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in encoder.state_dict().items()}, str(tmp),
              metadata={"format": ENCODER_FORMAT, "config": json.dumps(encoder.cfg.to_dict())})
    tmp.replace(p)
    return p


def load_encoder(path: str | Path) -> MGVGAEncoder:
    """The encoder of a training checkpoint (``.pt``) or of an ``encoder.safetensors``, in eval mode.

    Raises:
        FileNotFoundError: missing file. ValueError: unreadable / refused / foreign file.
    """
    p = Path(path)
    if p.suffix == ".safetensors":
        from .storage import read_safetensors

        tensors, meta = read_safetensors(p, ENCODER_FORMAT)
        enc = MGVGAEncoder(_config_from(meta["config"], p))
        try:
            enc.load_state_dict(tensors)
        except RuntimeError as e:
            raise ValueError(f"{p}: weights do not match the stored config: {str(e)[:300]}") from None
        return enc.eval()
    m, _ = load_checkpoint(p)
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
    vga_text_mask: torch.Tensor | None = None,
    device: str | torch.device = "cpu",
    should_stop: Callable[[], bool] | None = None,
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
        vga_text_mask: Bool[P, T] valid tokens when ``vga_text`` is token-level (Float[P, T, d_v]);
            a graph whose text has no valid token is excluded from the VGA loss (counted, logged).
        device: where the model trains (batches are assembled on the CPU and moved; masks are drawn
            on a CPU generator, so runs on different devices see the same masks). The model stays there.
        progress: show a progress bar (core rules: off with ``--quiet``, a line a minute off a terminal).
        should_stop: polled after every step; when it returns True before the last step, the
            state is checkpointed at that step and :class:`KeyboardInterrupt` is raised (a clean
            stop on SIGTERM / Ctrl-C that ``resume=True`` continues exactly).

    Writes (with ``checkpoint``): the checkpoint (``weights_only``-loadable), ``<stem>.history.json``
    and ``<stem>.encoder.safetensors`` (the encoder alone, for :func:`load_encoder`).

    Raises:
        ValueError: missing pools, text of the wrong shape or with NaN/inf, a non-finite or
            non-positive ``lr``, ``steps``/``batch_size`` < 1, a resume checkpoint of another model
            config or other training settings (steps, batch size, lr, weight decay, schedule floor,
            seed, pool sizes).

    Returns:
        history: one dict of logged scalars every ``log_every`` steps (and the last step).
    """
    for name, v in (("lr", lr), ("weight_decay", weight_decay), ("min_lr_ratio", min_lr_ratio)):
        if not np.isfinite(v) or v < 0 or (name == "lr" and v == 0) or (name == "min_lr_ratio" and v > 1):
            raise ValueError(f"{name}={v} is out of range (lr > 0, weight_decay >= 0, 0 <= min_lr_ratio <= 1)")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps={steps} and batch_size={batch_size} must be >= 1")
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
        if not torch.isfinite(vga_text).all():
            bad = torch.nonzero(~torch.isfinite(vga_text.reshape(len(vga_graphs), -1)).all(1)).flatten().tolist()
            raise ValueError(f"vga_text rows {bad[:10]} contain NaN/inf; re-embed those texts")
        if vga_text_mask is not None:
            vga_text_mask = torch.as_tensor(vga_text_mask, dtype=torch.bool)
            if vga_text.dim() != 3 or vga_text_mask.shape != vga_text.shape[:2]:
                raise ValueError(f"vga_text_mask has shape {tuple(vga_text_mask.shape)}; expected "
                                 f"{tuple(vga_text.shape[:2])} (token-level text [P, T, d_v])")
    txt_mask = vga_text_mask if need_vga else None
    training = {"steps": int(steps), "batch_size": int(batch_size), "lr": float(lr), "weight_decay": float(weight_decay),
                "min_lr_ratio": float(min_lr_ratio), "seed": int(seed), "n_mgm_graphs": len(mgm_graphs or []),
                "n_vga_graphs": len(vga_graphs or [])}
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr)
    sched = cosine_schedule(opt, steps, min_lr_ratio)
    start, history = 0, []
    if resume:
        if checkpoint is None or not Path(checkpoint).is_file():
            raise FileNotFoundError(f"--resume given but checkpoint {checkpoint} does not exist")
        state, meta = _read_checkpoint(checkpoint)
        if meta["config"] != model.cfg.to_dict():
            raise ValueError(f"--resume: {checkpoint} was written with a different model config; use a new --out "
                             "or the same settings")
        saved = meta.get("training")
        if saved is None:
            log.warning("--resume: %s predates stored training settings; cannot check that steps/lr/batch/seed/"
                        "data match the run that wrote it", checkpoint)
        else:
            from iclr25.core.config import changed_settings

            what = changed_settings(saved, training)
            if what:
                raise ValueError(f"--resume: {checkpoint} was written with other training settings ({what}); "
                                 "resume with the same settings, or start a new run with another --out")
        model.load_state_dict(state["model"])
        opt = torch.optim.AdamW(param_groups(model.to(device), weight_decay), lr=lr)
        sched = cosine_schedule(opt, steps, min_lr_ratio)
        if "optimizer" in state:
            opt.load_state_dict(state["optimizer"])
        if "scheduler" in state:
            sched.load_state_dict(state["scheduler"])
        if "rng" in state:
            gen.set_state(state["rng"])
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])
        start, history = int(meta["step"]), list(meta.get("history", []))
        log.info("resumed from %s at step %d", checkpoint, start)
    dev = torch.device(device)
    model.to(dev)
    model.train()
    from iclr25.core.progress import progress as _bar

    it = _bar(range(start, steps), desc=f"pretrain[{obj}]", initial=start, total=steps, unit="step",
              quiet=None if progress else True)
    n_empty = 0
    for step in it:
        mgm_b = vga_b = txt = idx = None
        if need_mgm:
            idx = torch.randint(len(mgm_graphs), (batch_size,), generator=gen).tolist()
            mgm_b = Batch.from_data_list([mgm_graphs[i] for i in idx])
        if need_vga:
            idx = torch.randint(len(vga_graphs), (batch_size,), generator=gen).tolist()
            vga_b = Batch.from_data_list([vga_graphs[i] for i in idx])
            txt = vga_text[idx]
        # masks are drawn on the CPU generator (same draws on every device), then moved
        mm = mask_nodes_batched(mgm_b.batch, model.cfg.mgm_mask_ratio, gen).to(dev) if mgm_b is not None else None
        vm = mask_nodes_batched(vga_b.batch, model.cfg.vga_mask_ratio, gen).to(dev) if vga_b is not None else None
        tm = None if txt_mask is None else txt_mask[idx].to(dev)
        out = model(mgm_b.to(dev) if mgm_b is not None else None, vga_b.to(dev) if vga_b is not None else None,
                    txt.to(dev) if txt is not None else None, text_mask=tm, mgm_mask=mm, vga_mask=vm)
        if "vga_empty_text" in out:
            n_empty += int(out["vga_empty_text"])
        if not torch.isfinite(out["loss"]):
            raise FloatingPointError(f"pretrain[{obj}]: the loss became {float(out['loss'])} at step {step + 1} "
                                     f"({ {k: float(v) for k, v in out.items()} }); lower --lr")
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()
        sched.step()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            rec = {"step": step + 1, "lr": opt.param_groups[0]["lr"], **{k: float(v.detach()) for k, v in out.items()}}
            history.append(rec)
            it.set_postfix(loss=f"{rec['loss']:.3f}")
        stop = step + 1 < steps and should_stop is not None and bool(should_stop())
        last = step + 1 == steps or (stop_after is not None and step + 1 >= stop_after) or stop
        if checkpoint is not None and ((step + 1) % checkpoint_every == 0 or last):
            save_checkpoint(checkpoint, model, opt, sched, step + 1, gen, history, training)
        if stop:
            it.close()
            where = f"; checkpoint {checkpoint} holds it (continue with resume=True)" if checkpoint else ""
            raise KeyboardInterrupt(f"pretrain[{obj}] stopped at step {step + 1}/{steps}{where}")
        if last:
            break
    it.close()
    if n_empty:
        log.warning("pretrain[%s]: %d VGA graph draws had a text with no valid token and were excluded from the "
                    "VGA loss", obj, n_empty)
    if checkpoint is not None:
        ck = Path(checkpoint)
        ck.with_suffix(".history.json").write_text(json.dumps(history, indent=1, allow_nan=False))
        save_encoder(ck.with_suffix(".encoder.safetensors"), model.encoder)
    model.eval()
    return history
