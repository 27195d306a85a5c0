"""The loop of one training stage (SFT or DPO) on ``accelerate``: sampler, schedule, sharded
log-probabilities, and :func:`run_stage` (AdamW, warm-up then decay, clipping, accumulation, checkpoints)."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig
from .lora import apply_lora, merge_lora
from .lora import is_peft as _is_peft
from .rewards import EncodedResponses
from .stage_checkpoint import (
    StageResult,
    _load_state,
    _load_weights,
    _read_trainer_state,
    _restore_rng,
    has_checkpoint,
)

__all__ = ["_run_stage", "_sharded_pair_logps", "_concat", "_logps"]

log = logging.getLogger(__name__)


def _make_accelerator(cfg: TrainConfig):
    from accelerate import Accelerator

    kw: dict[str, Any] = {"gradient_accumulation_steps": cfg.grad_accum}
    if cfg.bf16:
        kw["mixed_precision"] = "bf16"
    if cfg.device == "cpu":
        kw["cpu"] = True
    return Accelerator(**kw)


class _EpochPermutation(torch.utils.data.Sampler):
    """A permutation of ``range(n)`` fixed by ``(seed, epoch)`` — identical on every process, so
    accelerate's batch sharding splits one global order, and a resumed run sees the same order."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


def _index_loader(n: int, batch_size: int, *, shuffle_seed: int | None):
    from torch.utils.data import DataLoader

    ds = torch.arange(n)
    # a private generator: creating an iterator draws a base seed from it (from torch's global generator
    # without one), and a resumed run creates one more mid-epoch, which would shift the dropout masks after it
    gen = torch.Generator().manual_seed(0)
    if shuffle_seed is None:
        return DataLoader(ds, batch_size=batch_size, shuffle=False, generator=gen)
    return DataLoader(ds, batch_size=batch_size, sampler=_EpochPermutation(n, shuffle_seed), generator=gen)


def _scheduler(opt: Any, cfg: TrainConfig, total: int):
    from transformers import (
        get_constant_schedule_with_warmup,
        get_cosine_schedule_with_warmup,
        get_linear_schedule_with_warmup,
    )

    warm = int(math.ceil(cfg.warmup_ratio * total))
    if cfg.lr_scheduler == "cosine":
        return get_cosine_schedule_with_warmup(opt, warm, total)
    if cfg.lr_scheduler == "linear":
        return get_linear_schedule_with_warmup(opt, warm, total)
    return get_constant_schedule_with_warmup(opt, warm)


def _concat(a: EncodedResponses, b: EncodedResponses) -> EncodedResponses:
    w = max(a.input_ids.shape[1], b.input_ids.shape[1])

    def pad(t: torch.Tensor, v: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, w - t.shape[1]), value=v)

    return EncodedResponses(torch.cat([pad(a.input_ids, 0), pad(b.input_ids, 0)]),  # padding is masked
                            torch.cat([pad(a.attention_mask, 0), pad(b.attention_mask, 0)]),
                            torch.cat([pad(a.response_mask, 0), pad(b.response_mask, 0)]))


def _logps(model: Any, enc: EncodedResponses, device: Any) -> torch.Tensor:
    from iclr25.core.lm import sequence_logprobs

    e = enc.to(device)
    return sequence_logprobs(model, e.input_ids, e.attention_mask, e.response_mask)


def _sharded_pair_logps(accelerator: Any, model: Any, chosen: EncodedResponses, rejected: EncodedResponses,
                        batch_size: int, desc: str) -> torch.Tensor:
    """``(n, 2)`` float64 log-probs of (chosen, rejected) of every pair: each process scores its
    shard of a fixed order, the results are gathered (``gather_for_metrics`` drops the padding)."""
    from iclr25.core.progress import progress

    n = len(chosen)
    loader = accelerator.prepare_data_loader(_index_loader(n, batch_size, shuffle_seed=None))
    out = torch.zeros(n, 2, dtype=torch.float64)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            for idx in progress(loader, desc=desc, unit="batch", quiet=None if n > 4 * batch_size else True):
                idx = idx.to(accelerator.device)
                both = _concat(chosen.select(idx.cpu()), rejected.select(idx.cpu()))
                lp = _logps(model, both, accelerator.device).double()
                vals = torch.stack([lp[:len(idx)], lp[len(idx):]], dim=1)
                g_idx, g_vals = accelerator.gather_for_metrics((idx, vals))
                out[g_idx.cpu()] = g_vals.cpu()
    finally:
        model.train(was)
    return out


def _run_stage(model: Any, tokenizer: Any, cfg: TrainConfig, n: int,
               step_loss: Callable[[Any, torch.Tensor, Any], tuple[torch.Tensor, dict[str, float]]], *,
               kind: str, out_dir: Path | None, resume: bool, progress_bar: bool,
               before_train: Callable[[Any, Any], None] | None = None,
               after_train: Callable[[Any, Any], None] | None = None) -> StageResult:
    """The shared optimisation loop (see the module docstring)."""
    from iclr25.core.progress import progress

    t0 = time.perf_counter()
    if n == 0:
        raise ValueError(f"{kind}: no training examples")
    ck = out_dir / "checkpoint" if out_dir is not None else None
    state: dict[str, Any] = {"global_step": 0, "epoch": 0, "step_in_epoch": 0, "history": []}
    if resume:
        if ck is None or not has_checkpoint(out_dir):
            raise FileNotFoundError(f"{kind}: --resume given but there is no checkpoint in "
                                    f"{ck if ck is not None else '(no output folder)'}; run without --resume to start")
        state = _read_trainer_state(ck)
    accelerator = _make_accelerator(cfg)
    if ck is not None and accelerator.is_main_process:
        out_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
    if getattr(model, "hf_device_map", None) is None:
        model = model.to(accelerator.device)
    if cfg.lora:
        model = apply_lora(model, cfg)
    if resume:
        _load_weights(model, ck / "model")  # type: ignore[operator]
    if before_train is not None:
        before_train(accelerator, model)  # e.g. DPO reference log-probs (once per stage), dropout off
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    loader = _index_loader(n, cfg.batch_size, shuffle_seed=cfg.seed)
    # batches per process (accelerate shards one global order, even_batches) -> optimiser steps
    local_batches = math.ceil(len(loader) / accelerator.num_processes)
    total = max(1, math.ceil(cfg.epochs * math.ceil(local_batches / cfg.grad_accum)))
    # the prepared scheduler advances num_processes times per step, so it is sized in global steps
    sched = _scheduler(opt, cfg, total * accelerator.num_processes)
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    if len(loader) != local_batches:
        raise RuntimeError(f"{kind}: expected {local_batches} batches per process, the prepared loader has "
                           f"{len(loader)}")
    if resume:
        if accelerator.distributed_type.name == "DEEPSPEED":
            log.warning("%s: resuming under DeepSpeed restores the weights and the data position; the "
                        "ZeRO-sharded optimizer moments restart from zero", kind)
        else:
            _load_state(opt.optimizer, ck / "optimizer.pt", ck)  # type: ignore[operator]
        _load_state(sched.scheduler, ck / "scheduler.pt", ck)  # type: ignore[operator]
        _restore_rng(ck, accelerator)  # last: LoRA's initialisation above drew from torch's generator
    history: list[dict[str, float]] = list(state["history"])

    def checkpoint() -> None:
        """Every file of the checkpoint into a temporary folder, swapped in atomically (core atomic_folder)."""
        from iclr25.core.checkpoint import atomic_folder, capture_rng_state

        if ck is None:
            return
        unwrapped = accelerator.unwrap_model(model)
        state_dict = None if _is_peft(unwrapped) else accelerator.get_state_dict(model)  # collective (ZeRO)
        rng = capture_rng_state(torch_state=True)
        rngs = [rng]
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            rngs = gather_object([rng])
        if accelerator.is_main_process:
            with atomic_folder(ck) as tmp:
                kw = {} if state_dict is None else {"state_dict": state_dict}
                unwrapped.save_pretrained(tmp / "model", safe_serialization=True, **kw)
                if accelerator.distributed_type.name != "DEEPSPEED":
                    torch.save(opt.optimizer.state_dict(), tmp / "optimizer.pt")
                torch.save(sched.scheduler.state_dict(), tmp / "scheduler.pt")
                (tmp / "rng_state.json").write_text(json.dumps({"processes": rngs}), encoding="utf-8")
                st = {"global_step": step, "epoch": epoch, "step_in_epoch": in_epoch, "history": history,
                      "kind": kind, "config": asdict(cfg)}
                (tmp / "trainer_state.json").write_text(json.dumps(st), encoding="utf-8")
        accelerator.wait_for_everyone()

    step = int(state["global_step"])
    epoch = int(state["epoch"])
    in_epoch = int(state["step_in_epoch"])
    bar = progress(total=total, desc=kind, unit="step", quiet=None if progress_bar else True)
    bar.update(step)
    acc_loss, acc_extra, micro = 0.0, {}, 0
    while step < total:
        loader.set_epoch(epoch)  # the permutation of this epoch, on every process
        skip = in_epoch * cfg.grad_accum
        it = accelerator.skip_first_batches(loader, skip) if skip else loader
        for idx in it:
            with accelerator.accumulate(model):
                loss, extra = step_loss(model, idx, accelerator)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{kind}: loss became {loss.item()} at step {step}; lower the "
                                             f"learning rate (now {cfg.lr})")
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
            acc_loss += float(loss.detach())
            for k, v in extra.items():
                acc_extra[k] = acc_extra.get(k, 0.0) + v
            micro += 1
            if accelerator.sync_gradients:
                step += 1
                in_epoch += 1
                rec = {"step": step, "epoch": epoch, "loss": acc_loss / micro, "lr": float(sched.get_last_lr()[0])}
                rec.update({k: v / micro for k, v in acc_extra.items()})
                history.append(rec)
                acc_loss, acc_extra, micro = 0.0, {}, 0
                bar.update(1)
                bar.set_postfix(loss=f"{rec['loss']:.4f}")
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < total:
                    checkpoint()
                if step >= total:
                    break
        else:
            epoch += 1
            in_epoch = 0
            if step < total:
                checkpoint()
            continue
        break
    bar.close()
    if after_train is not None:
        after_train(accelerator, model)
    model = accelerator.unwrap_model(model)
    if accelerator.device.type != "cpu":
        accelerator.free_memory()  # releases the prepared objects and empties the device cache (a gc pass)
    if cfg.lora:
        model = merge_lora(model)
    model.eval()
    return StageResult(model=model, history=history, steps=step, seconds=time.perf_counter() - t0, n_examples=n)
