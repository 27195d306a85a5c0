"""Ordinary supervised fine-tuning of the aligned model on the kept subset (spec §1.3, the final stage)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .bilevel import _ckpt_write, _perm, _prepare_resume, _restore_rng, _rng_state, _trim_metrics
from .config import SFTConfig
from .data import LMDataset
from .losses import token_mean_lm_loss
from .runtime import PlainRuntime, Runtime, load_checkpoint_file, resolve_micro_batch

__all__ = ["sft", "base_losses"]

log = logging.getLogger("iclr25.seal")
_RESUME_FREE = ("epochs", "checkpoint_every", "log_every")


def sft(model: Any, data: LMDataset, cfg: SFTConfig | None = None, *, runtime: Runtime | None = None,
        checkpoint_dir: str | Path | None = None, resume: bool = False, stop_after_steps: int | None = None,
        progress: bool = True, metrics_path: str | Path | None = None) -> Any:
    """Fine-tune ``model`` on ``data`` with AdamW and a constant learning rate (token-mean NLL of the
    response tokens over each batch, as OpenRLHF's ``GPTLMLoss``).

    Args:
        model: a causal LM (trained in place: whatever ``requires_grad``, e.g. only LoRA weights).
        data: the tokenised SFT set (the kept subset, optionally concatenated with a SafeInstr set).
        cfg: :class:`SFTConfig` (default: the official Llama-3 SFT values).
        runtime: plain torch (default, on the model's device) or accelerate.
        checkpoint_dir: checkpoint at every epoch end (and every ``cfg.checkpoint_every`` steps).
        resume: continue from ``checkpoint_dir`` (model, optimiser, epoch, step, RNG).
        stop_after_steps: stop (after checkpointing) once this many optimiser steps have run.
        progress: show a progress bar.
        metrics_path: append a JSONL record every ``cfg.log_every`` steps.

    Returns:
        The trained model (the prepared one under accelerate), in eval mode.

    Raises:
        ValueError: an empty set, a checkpoint of another run, a non-finite loss.
        FileNotFoundError: ``resume`` without a checkpoint.
    """
    from iclr25.core.jsonl import append_jsonl
    from iclr25.core.progress import progress as bar_of

    cfg = cfg or SFTConfig()
    if len(data) == 0:
        raise ValueError("sft: the training set is empty")
    runtime = runtime or PlainRuntime(next(model.parameters()).device)
    n, g, world = len(data), cfg.batch_size, runtime.world_size
    micro, ga = resolve_micro_batch(g, cfg.micro_batch_size, world)
    runtime.configure(micro, ga)
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    _prepare_resume(ckpt, resume, runtime.is_main)
    torch.manual_seed(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("sft: the model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    model, opt = runtime.prepare(model, opt)
    key = {k: v for k, v in asdict(cfg).items() if k not in _RESUME_FREE}
    st: dict[str, Any] = {"epoch": 0, "step": 0, "global_step": 0, "losses": []}
    if resume:
        assert ckpt is not None
        own = load_checkpoint_file(ckpt / "loop_state.pt")
        meta = json.loads(own["meta"])
        if meta["n"] != n or meta["config"] != json.loads(json.dumps(key)):
            raise ValueError(f"checkpoint {ckpt} was written for another run (n={meta['n']}, settings "
                             f"{meta['config']}); resume with the same data and flags")
        runtime.load_model_state(ckpt, model, opt)
        st = meta["state"]
        _restore_rng(own, ckpt)
        _trim_metrics(metrics_path, st["global_step"], runtime.is_main)
        log.info("resumed SFT at epoch %d, step %d", st["epoch"], st["step"])
    steps_per_epoch = math.ceil(n / g)
    dev = runtime.device
    bar = bar_of(total=steps_per_epoch * cfg.epochs - st["global_step"], desc="sft", unit="step",
                 quiet=None if progress else True)
    model.train()
    stopped = False
    for epoch in range(st["epoch"], cfg.epochs):
        order = _perm(n, cfg.seed, 3, epoch)
        slots = torch.full((steps_per_epoch * g,), -1, dtype=torch.long)
        slots[:n] = order
        slots = slots.view(steps_per_epoch, g)
        for s in range(st["step"], steps_per_epoch):
            idx_all = slots[s]
            n_tok_global = int(data.response_mask[idx_all[idx_all >= 0]][:, 1:].sum())
            total = 0.0
            for a in range(ga):
                lo = (a * world + runtime.rank) * micro
                idx = idx_all[lo:lo + micro]
                idx = idx[idx >= 0]
                with runtime.accumulate(model):
                    if idx.numel():
                        nll, _ = token_mean_lm_loss(model, *data.batch(idx, dev))
                    else:  # an empty slot of the last step: a zero loss keeps the processes in step
                        nll = 0.0 * token_mean_lm_loss(model, *data.batch(idx_all[:1], dev))[0]
                    loss = nll * (world * ga / max(1, n_tok_global))
                    if not bool(torch.isfinite(loss)):
                        raise ValueError(f"sft: the loss became {loss.item()} at epoch {epoch}, step {s}; lower lr "
                                         f"(now {cfg.lr})")
                    runtime.backward(loss)
                    if runtime.sync:
                        runtime.clip(model, cfg.max_grad_norm)
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                total += float(nll.detach()) / max(1, n_tok_global)
            st["step"], st["global_step"] = s + 1, st["global_step"] + 1
            bar.update(1)
            if metrics_path is not None and runtime.is_main and st["global_step"] % cfg.log_every == 0:
                append_jsonl(metrics_path, [{"step": st["global_step"], "epoch": epoch, "loss": total}], fsync=False)
            at_end = s + 1 == steps_per_epoch
            if stop_after_steps is not None and st["global_step"] >= stop_after_steps and not at_end:
                stopped = True
            if ckpt is not None and not at_end and (stopped or (cfg.checkpoint_every and st["global_step"] % cfg.checkpoint_every == 0)):
                _ckpt_write(ckpt, runtime, model, opt, _own(st, n, key))
            if stopped:
                break
        if stopped:
            break
        st["epoch"], st["step"] = epoch + 1, 0
        if ckpt is not None:
            _ckpt_write(ckpt, runtime, model, opt, _own(st, n, key))
        if stop_after_steps is not None and st["global_step"] >= stop_after_steps:
            break
    bar.close()
    model.eval()
    return model


def _own(st: dict[str, Any], n: int, key: dict[str, Any]) -> dict[str, Any]:
    return {"rng": _rng_state(), "meta": json.dumps({"n": n, "config": key, "state": st})}


@torch.inference_mode()
def base_losses(model: Any, data: LMDataset, *, batch_size: int = 64, device: Any = None) -> torch.Tensor:
    """Per-sample mean response loss ℓ(θ; z_i) of every sample under a fixed model (eval mode).

    Used by the base-loss filter baseline (keep the lowest loss under θ₀) and by the safety margin.

    Returns:
        ``(n,)`` float32 on CPU, nats per response token.
    """
    from .losses import per_sample_lm_loss

    dev = device or next(model.parameters()).device
    was = model.training
    model.eval()
    out = []
    try:
        for lo in range(0, len(data), batch_size):
            idx = torch.arange(lo, min(len(data), lo + batch_size))
            out.append(per_sample_lm_loss(model, *data.batch(idx, dev)).float().cpu())
    finally:
        model.train(was)
    return torch.cat(out)
