"""SEAL's selector training: the released code's memory-efficient penalty method (spec §1.2, §1.4).

Each optimiser step pairs a safe batch B_s with a fine-tuning batch B_f and takes

1. the **model step** on ``σ·L_s + (1−σ)·(1/|B_f|) Σ_{i∈B_f} w_i ℓ_i`` with ``w = w(ω)`` detached
   (``L_s`` = batch mean of per-sample mean losses on B_s, the upper-level objective f(θ));
2. the **selector step** on ``(1/|B_f|) Σ_{i∈B_f} w_i(ω) · stopgrad(ℓ_i)``, the losses being those of
   step 1, i.e. computed at the θ *before* the model update.

σ_e = σ₀ − e·δ in epoch e. Unlike the released loop, which ``zip``s the two loaders (an epoch stops at
the shorter one, so with |D_safe| < |D_ft| some fine-tuning samples are never pushed down and end up
top-ranked), every epoch here covers **all of D_ft exactly once** and D_safe is cycled as a stream of
reshuffled passes; the official behaviour is the named variant ``ft_coverage="zip"``. The per-index
update counts of every epoch are recorded.

The data order is a pure function of (seed, epoch, D_safe pass), so a resumed run continues exactly;
under data parallelism each process takes its slice of the same global batch, and ω — replicated
on every process — is updated with the process-mean gradient at the end of the same gradient
accumulation window as the model (the released code puts ω in a DeepSpeed engine of its own).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .config import BilevelConfig
from .data import LMDataset
from .losses import per_sample_lm_loss, use_reference
from .runtime import PlainRuntime, Runtime, load_checkpoint_file, resolve_micro_batch
from .selector import Selector, selector_loss

__all__ = ["SelectorResult", "train_selector", "epoch_plan", "safe_positions", "load_selector", "SELECTOR_FORMAT"]

log = logging.getLogger("iclr25.seal")
SELECTOR_FORMAT = "iclr25-seal-selector-v1"
_RESUME_FREE = ("epochs", "checkpoint_every", "log_every")


def _perm(n: int, seed: int, stream: int, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed((seed * 1_000_003 + stream * 7_919 + k * 104_729) % (2**63 - 1))
    return torch.randperm(n, generator=g)


def safe_positions(start: int, count: int, m: int, seed: int) -> torch.Tensor:
    """D_safe indices at stream positions ``start … start+count−1``: pass ``c`` over D_safe is its own
    permutation (seeded by ``seed`` and ``c``), so the stream is cycled and reshuffled every pass.

    Returns:
        ``(count,)`` long tensor of indices in ``[0, m)``.
    """
    out, pos = [], start
    while pos < start + count:
        c, off = divmod(pos, m)
        take = min(m - off, start + count - pos)
        out.append(_perm(m, seed, 2, c)[off:off + take])
        pos += take
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)


def epoch_plan(n_ft: int, n_safe: int, cfg: BilevelConfig, epoch: int) -> tuple[torch.Tensor, int]:
    """The fine-tuning slots of one epoch and the number of D_safe samples it draws.

    Args:
        n_ft, n_safe: |D_ft| and |D_safe|.
        cfg: ``batch_size`` (global batch G), ``ft_coverage``, ``seed``.
        epoch: the epoch (its permutation of D_ft).

    Returns:
        ``(slots, n_safe_drawn)``: ``slots`` is ``(steps, G)`` long — the D_ft indices of each global step,
        ``-1`` marking empty slots of the last step; ``cycle``: every index exactly once
        (``steps = ceil(N/G)``); ``zip``: ``steps = min(ceil(N/G), ceil(M/G))`` as the official zipped
        loaders (the rest of D_ft is not visited). ``n_safe_drawn = steps·G`` safe samples.
    """
    g = cfg.batch_size
    perm = _perm(n_ft, cfg.seed, 1, epoch)
    steps = math.ceil(n_ft / g)
    if cfg.ft_coverage == "zip":
        steps = min(steps, math.ceil(n_safe / g))
    slots = torch.full((steps * g,), -1, dtype=torch.long)
    take = min(n_ft, steps * g)
    slots[:take] = perm[:take]
    return slots.view(steps, g), steps * g


@dataclass
class SelectorResult:
    """A trained selector and its training record.

    Attributes:
        logits: ``(N,)`` float32 — ω after the last epoch (rank by it: :func:`select_top`).
        kind: ``"softmax"`` or ``"sigmoid"``.
        epoch_logits: ``(E, N)`` float32 — ω after each epoch (the code saves ω every epoch).
        update_counts: ``(E, N)`` int32 — in-batch selector updates of each D_ft index per epoch.
        history: one dict per epoch (σ, mean losses, D_safe passes, coverage, seconds).
        config: the :class:`BilevelConfig` used.
        metadata: free-form strings stored with the selector (e.g. the D_ft file hash).
    """

    logits: torch.Tensor
    kind: str
    epoch_logits: torch.Tensor
    update_counts: torch.Tensor
    history: list[dict[str, Any]] = field(default_factory=list)
    config: BilevelConfig | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.logits.numel())

    def fraction_updated_every_epoch(self) -> float:
        """Share of D_ft indices with at least one in-batch selector update in every epoch."""
        if self.update_counts.numel() == 0:
            return float("nan")
        return float((self.update_counts > 0).all(0).float().mean())

    def save(self, path: str | Path) -> Path:
        """Write a safetensors file: ``logits``, ``epoch_logits``, ``update_counts``, and metadata
        (format, kind, N, config, history, ``metadata``)."""
        from safetensors.torch import save_file

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": SELECTOR_FORMAT, "kind": self.kind, "n": str(self.n),
                "history": json.dumps(self.history),
                "config": json.dumps(asdict(self.config) if self.config is not None else {}), **self.metadata}
        save_file({"logits": self.logits.contiguous(), "epoch_logits": self.epoch_logits.contiguous(),
                   "update_counts": self.update_counts.contiguous()}, str(p), metadata=meta)
        return p


def load_selector(path: str | Path) -> SelectorResult:
    """Read a selector: our safetensors file, or an official ``*.pt`` logits tensor (``torch.save(p.logits)``,
    loaded with ``weights_only=True``; kind recorded as ``"unknown"``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a selector (no ``logits`` tensor / not 1-D / non-finite values).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"selector {p} does not exist (write one with 'iclr25-seal train-selector')")
    if p.suffix == ".pt":
        try:
            t = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises many types for a damaged file
            raise ValueError(f"selector {p} cannot be read as a weights-only torch file ({type(e).__name__}); "
                             "give selector.safetensors from train-selector or an official logits .pt") from None
        if isinstance(t, dict):
            t = t.get("logits")
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"selector {p}: expected a logits tensor, got {type(t).__name__}")
        logits = t.detach().float().flatten()
        res = SelectorResult(logits, "unknown", logits[None].clone(), torch.zeros(0, logits.numel(), dtype=torch.int32))
    else:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(p), framework="pt") as f:
                meta = dict(f.metadata() or {})
                keys = set(f.keys())
                if "logits" not in keys:
                    raise ValueError(f"selector {p} has no 'logits' tensor (keys {sorted(keys)})")
                logits = f.get_tensor("logits").float()
                ep = f.get_tensor("epoch_logits") if "epoch_logits" in keys else logits[None].clone()
                uc = f.get_tensor("update_counts") if "update_counts" in keys else torch.zeros(0, logits.numel())
        except SafetensorError as e:
            raise ValueError(f"selector {p} is not a safetensors file: {e}") from None
        hist = json.loads(meta.pop("history", "[]"))
        cfg = json.loads(meta.pop("config", "{}"))
        kind = meta.pop("kind", "unknown")
        res = SelectorResult(logits, kind, ep, uc, hist, BilevelConfig(**cfg) if cfg else None, meta)
    if res.logits.dim() != 1 or res.n == 0:
        raise ValueError(f"selector {p}: logits must be a non-empty 1-D tensor, got shape {tuple(res.logits.shape)}")
    if not bool(torch.isfinite(res.logits).all()):
        raise ValueError(f"selector {p}: logits contain NaN or inf")
    return res



def data_fingerprint(data: LMDataset) -> str:
    """sha256 of a tokenised set's token ids and loss mask (order-sensitive), stored in a checkpoint so that
    ``--resume`` refuses a different file of the same length."""
    import hashlib

    h = hashlib.sha256()
    for t in (data.input_ids, data.response_mask, data.lengths):
        h.update(t.detach().cpu().to(torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()


def _cfg_key(cfg: BilevelConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(cfg).items() if k not in _RESUME_FREE}


def _ckpt_write(folder: Path, runtime: Runtime, model: Any, model_opt: Any, own: dict[str, Any]) -> None:
    """Write a checkpoint with :func:`iclr25.core.checkpoint.atomic_folder`: every rank writes its model state
    into the temporary sibling ``<folder>.tmp`` (DeepSpeed saves shards from every rank), the main process adds
    ``loop_state.pt`` and swaps the folder in once all ranks are done; a kill at any moment leaves the previous
    checkpoint or this one whole."""
    import contextlib

    from iclr25.core.checkpoint import atomic_folder

    tmp_path = folder.with_name(folder.name + ".tmp")  # atomic_folder's temporary folder, known to every rank
    with (atomic_folder(folder) if runtime.is_main else contextlib.nullcontext(tmp_path)) as tmp:
        runtime.barrier()  # the main process has created tmp
        runtime.save_model_state(tmp, model, model_opt)
        if runtime.is_main:
            torch.save(own, tmp / "loop_state.pt")
        runtime.barrier()  # every rank has written before the swap
    runtime.barrier()


def _rng_state() -> str:
    """Every global generator's state (Python, NumPy, torch CPU and CUDA) as JSON text, for ``loop_state.pt``."""
    from iclr25.core.checkpoint import capture_rng_state

    return json.dumps(capture_rng_state(torch_state=True))


def _restore_rng(own: dict[str, Any], path: Path) -> None:
    """Put back the generators :func:`_rng_state` saved (``torch_rng``/``cuda_rng`` of older checkpoints too)."""
    from iclr25.core.checkpoint import restore_rng_state

    if "rng" in own:
        restore_rng_state(json.loads(own["rng"]))
        return
    if "torch_rng" not in own:
        raise ValueError(f"checkpoint {path} holds no RNG state; delete the checkpoint folder and run without --resume")
    torch.set_rng_state(own["torch_rng"])  # a checkpoint of an earlier version: torch's generators only
    if torch.cuda.is_available() and "cuda_rng" in own:
        torch.cuda.set_rng_state_all(list(own["cuda_rng"]))


def _prepare_resume(ckpt: Path | None, resume: bool, is_main: bool) -> None:
    """Before a run: put back a checkpoint a kill left half-swapped; ``resume`` without one is an error."""
    from iclr25.core.checkpoint import recover_folder

    if ckpt is not None and is_main:
        recover_folder(ckpt)
    if resume and (ckpt is None or not (ckpt / "loop_state.pt").is_file()):
        raise FileNotFoundError(f"--resume: no checkpoint in {ckpt} (loop_state.pt missing); run without --resume")


def _trim_metrics(metrics_path: str | Path | None, step: int, is_main: bool) -> None:
    """On resume, cut ``metrics.jsonl`` back to the checkpoint's step (a kill between two checkpoints left
    later records, which the resumed run logs again)."""
    from iclr25.core.checkpoint import trim_jsonl

    if metrics_path is not None and is_main:
        trim_jsonl(metrics_path, step)


def _stack_batches(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Rows of two ``(input_ids, attention_mask, response_mask)`` batches in one batch, right-padded to
    the wider one (right padding under a causal mask leaves every real position's output unchanged)."""
    width = max(a[0].shape[1], b[0].shape[1])

    def pad(t: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

    return tuple(torch.cat([pad(x, v), pad(y, v)]) for x, y, v in zip(a, b, (pad_id, 0, 0)))


def _make_selector_opt(sel: Selector, cfg: BilevelConfig) -> torch.optim.Optimizer:
    if cfg.selector_optimizer == "adam":
        return torch.optim.AdamW(sel.parameters(), lr=cfg.lr_selector, betas=cfg.betas,
                                 weight_decay=cfg.selector_weight_decay)
    return torch.optim.SGD(sel.parameters(), lr=cfg.lr_selector, weight_decay=cfg.selector_weight_decay)


def train_selector(model: Any, safe: LMDataset, ft: LMDataset, cfg: BilevelConfig | None = None, *,
                   runtime: Runtime | None = None, checkpoint_dir: str | Path | None = None, resume: bool = False,
                   stop_after_steps: int | None = None, progress: bool = True,
                   metrics_path: str | Path | None = None) -> SelectorResult:
    """Train SEAL's selector ω (one logit per D_ft sample) together with the model (spec §1.4).

    Args:
        model: the aligned causal LM θ₀ (trained in place: full weights, or the LoRA weights of a peft
            model — whatever ``requires_grad``).
        safe: D_safe, tokenised (:func:`encode_pairs`).
        ft: D_ft, tokenised; its order defines the selector's indices.
        cfg: :class:`BilevelConfig` (default: the official Llama-3 values).
        runtime: :class:`PlainRuntime` on the model's device (default) or an ``AccelerateRuntime``.
        checkpoint_dir: write a checkpoint there at every epoch end (and every ``cfg.checkpoint_every`` steps).
        resume: continue from ``checkpoint_dir`` (ω, both optimisers, epoch, step, σ, D_safe stream
            position, RNG, history). The config must match except ``epochs``/``checkpoint_every``/``log_every``.
        stop_after_steps: stop (after checkpointing) once this many optimiser steps have run in total —
            an interruption on purpose.
        progress: show a progress bar (off under ``--quiet`` anyway).
        metrics_path: append a JSONL record every ``cfg.log_every`` steps.

    Returns:
        :class:`SelectorResult` (on every process).

    Raises:
        ValueError: an empty D_safe or D_ft; a batch size that does not split over the processes; a
            checkpoint of another run; a non-finite loss.
        FileNotFoundError: ``resume`` without a checkpoint.
    """
    from iclr25.core.jsonl import append_jsonl
    from iclr25.core.progress import progress as bar_of

    cfg = cfg or BilevelConfig()
    if len(safe) == 0:
        raise ValueError("train_selector: the safety set D_safe is empty; give at least one safe sample")
    if len(ft) == 0:
        raise ValueError("train_selector: the fine-tuning set D_ft is empty")
    if runtime is None:
        runtime = PlainRuntime(next(model.parameters()).device)
    n, m, g = len(ft), len(safe), cfg.batch_size
    world = runtime.world_size
    micro, ga = resolve_micro_batch(g, cfg.micro_batch_size, world)
    runtime.configure(micro, ga)
    sigmas = cfg.sigmas()
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    _prepare_resume(ckpt, resume, runtime.is_main)

    torch.manual_seed(cfg.seed)
    dev = runtime.device
    sel = Selector(n, cfg.selector).to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("train_selector: the model has no trainable parameters")
    model_opt = torch.optim.AdamW(params, lr=cfg.lr_model, betas=cfg.betas, weight_decay=cfg.model_weight_decay)
    sel_opt = _make_selector_opt(sel, cfg)
    model, model_opt = runtime.prepare(model, model_opt)

    E = cfg.epochs
    counts = torch.zeros(E, n, dtype=torch.int32)
    epoch_logits = torch.zeros(E, n, dtype=torch.float32)
    history: list[dict[str, Any]] = []
    st: dict[str, Any] = {"epoch": 0, "step": 0, "global_step": 0, "safe_pos": 0, "safe_pos_epoch": 0,
                          "acc": [0.0, 0.0, 0.0, 0], "seconds": 0.0}
    fingerprints = {"ft_fingerprint": data_fingerprint(ft), "safe_fingerprint": data_fingerprint(safe)}
    if resume:
        assert ckpt is not None
        own = load_checkpoint_file(ckpt / "loop_state.pt")
        meta = json.loads(own["meta"])
        if meta["n_ft"] != n or meta["n_safe"] != m:
            raise ValueError(f"checkpoint {ckpt} is for |D_ft|={meta['n_ft']}, |D_safe|={meta['n_safe']}, not "
                             f"{n}, {m}: resume with the same --safe and --ft files")
        for key in ("ft_fingerprint", "safe_fingerprint"):
            if meta.get(key) is not None and meta[key] != fingerprints[key]:
                which = "--ft" if key == "ft_fingerprint" else "--safe"
                raise ValueError(f"checkpoint {ckpt} was written for another {which} file (same length, other "
                                 f"content or order): ω is indexed by line; resume with the same {which} file")
        diff = sorted(k for k, v in _cfg_key(cfg).items()
                      if json.dumps(v) != json.dumps(meta["config"].get(k)))
        if diff:
            raise ValueError(f"checkpoint {ckpt} was written with other settings ({', '.join(diff)}); resume "
                             "with the same flags (only --epochs, --checkpoint-every and --log-every may change)")
        if meta["state"]["epoch"] > E:
            raise ValueError(f"checkpoint {ckpt} has already run {meta['state']['epoch']} epochs > --epochs {E}")
        runtime.load_model_state(ckpt, model, model_opt)
        with torch.no_grad():
            sel.logits.copy_(own["logits"].to(dev))
        sel_opt.load_state_dict(own["selector_opt"])
        st = meta["state"]
        e0 = own["update_counts"].shape[0]
        counts[:min(e0, E)] = own["update_counts"][:E]
        epoch_logits[:min(e0, E)] = own["epoch_logits"][:E]
        history = meta["history"]
        _restore_rng(own, ckpt)
        _trim_metrics(metrics_path, st["global_step"], runtime.is_main)
        log.info("resumed selector training at epoch %d, step %d (σ = %.4g)", st["epoch"], st["step"],
                 sigmas[min(st["epoch"], E - 1)])

    def own_state() -> dict[str, Any]:
        d = {"logits": sel.logits.detach().cpu().clone(), "selector_opt": sel_opt.state_dict(),
             "update_counts": counts.clone(), "epoch_logits": epoch_logits.clone(), "rng": _rng_state(),
             "meta": json.dumps({"n_ft": n, "n_safe": m, **fingerprints, "config": _cfg_key(cfg), "state": st, "history": history})}
        return d

    plans = [epoch_plan(n, m, cfg, e) for e in range(E)]
    remaining = sum(p[0].shape[0] for p in plans[st["epoch"]:]) - st["step"]
    bar = bar_of(total=max(0, remaining), desc="train selector", unit="step", quiet=None if progress else True)
    model.train()
    t_start = time.perf_counter() - st["seconds"]
    stopped = False
    for epoch in range(st["epoch"], E):
        sigma = sigmas[epoch]
        slots, n_safe_drawn = plans[epoch]
        if st["step"] == 0:
            st["safe_pos_epoch"] = epoch * m if cfg.ft_coverage == "zip" else st["safe_pos"]
            st["acc"] = [0.0, 0.0, 0.0, 0]
        for s in range(st["step"], slots.shape[0]):
            step_slots = slots[s]
            n_real = int((step_slots >= 0).sum())
            safe_idx = safe_positions(st["safe_pos_epoch"] + s * g, g, m, cfg.seed)
            ls_sum = ft_sum = wft_sum = 0.0
            for a in range(ga):
                lo = (a * world + runtime.rank) * micro
                f_idx, s_idx = step_slots[lo:lo + micro], safe_idx[lo:lo + micro]
                real = f_idx[f_idx >= 0]
                with runtime.accumulate(model):
                    joint = sigma < 1.0 and bool(real.numel()) and not use_reference()
                    if joint:  # one forward over D_safe's and D_ft's rows (the same losses as two forwards)
                        both = per_sample_lm_loss(model, *_stack_batches(safe.batch(s_idx, dev), ft.batch(real, dev),
                                                                         safe.pad_id))
                        l_s, ell_joint = both[:s_idx.numel()].mean(), both[s_idx.numel():]
                    else:
                        l_s = per_sample_lm_loss(model, *safe.batch(s_idx, dev)).mean()
                    loss = sigma * l_s
                    ell = None
                    if real.numel():
                        batch = ft.batch(real, dev)
                        if sigma < 1.0:
                            ell = ell_joint if joint else per_sample_lm_loss(model, *batch)
                            w = sel(real.to(dev)).detach()
                            loss = loss + (1.0 - sigma) * (world * ga / n_real) * (w * ell).sum()
                        else:  # σ = 1: D_ft does not enter the model step; its losses are only scored
                            with torch.no_grad():
                                ell = per_sample_lm_loss(model, *batch)
                    if not bool(torch.isfinite(loss)):
                        raise ValueError(f"train_selector: the loss became {loss.item()} at epoch {epoch}, step {s}; "
                                         f"lower lr_model (now {cfg.lr_model})")
                    runtime.backward(loss)
                    if runtime.sync:
                        runtime.clip(model, cfg.max_grad_norm)
                        model_opt.step()
                        model_opt.zero_grad(set_to_none=True)
                    # selector step: losses of the pre-update θ, detached
                    if ell is not None:
                        selector_loss(sel, real.to(dev), ell, scale=world / n_real).backward()
                        counts[epoch, real] += 1
                        ft_sum += float(ell.detach().sum())
                        wft_sum += float((sel(real.to(dev)).detach() * ell.detach()).sum())
                    if runtime.sync:
                        if sel.logits.grad is None:
                            sel.logits.grad = torch.zeros_like(sel.logits)
                        if world > 1:
                            sel.logits.grad = runtime.mean(sel.logits.grad)
                        sel_opt.step()
                        sel_opt.zero_grad(set_to_none=True)
                ls_sum += float(l_s.detach()) / ga
            st["acc"][0] += ls_sum
            st["acc"][1] += ft_sum
            st["acc"][2] += wft_sum
            st["acc"][3] += n_real
            st["step"] = s + 1
            st["global_step"] += 1
            bar.update(1)
            if st["global_step"] % 5 == 0:
                bar.set_postfix(epoch=epoch, sigma=f"{sigma:.3f}", upper=f"{ls_sum:.3f}")
            if metrics_path is not None and runtime.is_main and st["global_step"] % cfg.log_every == 0:
                append_jsonl(metrics_path, [{"step": st["global_step"], "epoch": epoch, "sigma": sigma,
                                             "upper_loss": ls_sum, "ft_loss_local": ft_sum / max(1, n_real)}],
                             fsync=False)
            at_end = st["step"] == slots.shape[0]
            if stop_after_steps is not None and st["global_step"] >= stop_after_steps and not at_end:
                stopped = True
            if ckpt is not None and not at_end and (stopped or (cfg.checkpoint_every and st["global_step"] % cfg.checkpoint_every == 0)):
                st["seconds"] = time.perf_counter() - t_start
                _ckpt_write(ckpt, runtime, model, model_opt, own_state())
            if stopped:
                break
        if stopped:
            break
        # end of epoch
        epoch_logits[epoch] = sel.logits.detach().cpu()
        c = counts[epoch]
        n_steps = slots.shape[0]
        rec = {"epoch": epoch, "sigma": sigma, "steps": n_steps,
               "upper_loss": st["acc"][0] / max(1, n_steps),
               "ft_loss": st["acc"][1] / max(1, st["acc"][3]) if world == 1 else None,
               "weighted_ft_loss": st["acc"][2] / max(1, st["acc"][3]) if world == 1 else None,
               "d_safe_passes": n_safe_drawn / m,
               "d_safe_passes_total": ((st["safe_pos_epoch"] + n_safe_drawn) / m) if cfg.ft_coverage == "cycle"
               else float(epoch + 1) * n_safe_drawn / m,
               "d_ft_passes": float(c.sum()) / n if world == 1 else None,
               "updated_min": int(c.min()), "updated_max": int(c.max()),
               "never_updated": int((c == 0).sum()),
               "logit_spread": float(sel.logits.detach().std()) if n > 1 else 0.0,
               "seconds": time.perf_counter() - t_start}
        history.append(rec)
        log.info("selector epoch %d/%d: sigma %.3g, upper loss %.4f, D_safe cycled %.2fx this epoch, D_ft indices "
                 "updated min %d / max %d times (%d never)", epoch + 1, E, sigma, rec["upper_loss"],
                 rec["d_safe_passes"], rec["updated_min"], rec["updated_max"], rec["never_updated"])
        if cfg.ft_coverage == "cycle":
            st["safe_pos"] = st["safe_pos_epoch"] + n_safe_drawn
        st["epoch"], st["step"] = epoch + 1, 0
        st["seconds"] = time.perf_counter() - t_start
        if ckpt is not None:
            _ckpt_write(ckpt, runtime, model, model_opt, own_state())
        if stop_after_steps is not None and st["global_step"] >= stop_after_steps and epoch + 1 < E:
            break
    bar.close()
    done = st["epoch"]
    res = SelectorResult(sel.logits.detach().cpu().clone(), cfg.selector, epoch_logits[:done].clone(),
                         counts[:done].clone(), history, cfg)
    if world > 1:  # counts are per process: sum them so every process reports the global coverage
        res.update_counts = runtime.mean(counts[:done].to(torch.float32).to(dev)).cpu().mul(world).round().to(torch.int32)
    return res
