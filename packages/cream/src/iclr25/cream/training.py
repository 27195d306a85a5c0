"""Training stages: SFT (M0 -> M1) and one CREAM/DPO stage (M_t -> M_{t+1}), on ``accelerate``.

Both run the same loop: AdamW, warm-up then cosine/linear/constant schedule, gradient clipping,
gradient accumulation, optional bf16 and optional LoRA (peft; merged into the weights at the end of
the stage). Under ``accelerate launch`` the data are sharded over processes and gradients synced
(DDP, or DeepSpeed ZeRO-2 with the config shipped in :func:`accelerate_config_path`).

DPO (spec §1.4, Algorithm line 9): the reference is the model the stage starts from; its
log-probabilities of every chosen and rejected response are computed **once** before the first
step (with the LoRA adapter disabled when LoRA is on) and kept for the stage (and its resumption).

Dropout (issue #44 item 4): with ``TrainConfig.disable_dropout`` (default, as TRL's
``DPOConfig.disable_dropout``) every dropout probability of the policy (the model's and LoRA's) is set to 0
for a DPO stage, so the policy forward at initialisation equals the cached, dropout-free reference and the
loss starts at exactly ``log 2``; ``disable_dropout=False`` keeps dropout on in the policy forward (the
reference stays dropout-free). SFT stages keep the model's dropout.

Checkpoints (``out_dir/checkpoint``): model weights (safetensors via ``save_pretrained``; a LoRA
adapter as a peft adapter), optimizer and scheduler state (``torch.save`` of tensors, reloaded with
``weights_only=True``), every RNG state of every process (``rng_state.json``, the core's
:func:`~iclr25.core.checkpoint.capture_rng_state`) and ``trainer_state.json``, written together through the
core's :func:`~iclr25.core.checkpoint.atomic_folder` (a kill mid-save keeps the previous checkpoint whole).
``resume=True`` continues from there with the same data order and dropout masks (bit-identical weights);
a stage whose final model exists is not retrained. ``stage_settings.json`` records the stage's settings and
a fingerprint of its data; a resume with other ones is refused, naming them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig
from .losses import cream_dpo_loss
from .pairs import PreferencePair
from .rewards import EncodedResponses, encode_responses, fit_max_length

__all__ = ["StageResult", "train_sft", "train_dpo", "accelerate_config_path", "deepspeed_config_path",
           "apply_lora", "merge_lora", "disable_dropout", "has_checkpoint"]

log = logging.getLogger(__name__)


def accelerate_config_path(name: str = "deepspeed_zero2") -> Path:
    """Path of a shipped ``accelerate launch --config_file`` YAML (``"deepspeed_zero2"``: 8 GPUs,
    DeepSpeed ZeRO-2, bf16; ``"multi_cpu"``: 2 CPU processes for testing)."""
    p = resources.files("iclr25.cream") / "configs" / f"accelerate_{name}.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"no shipped accelerate config {name!r} ({p})")
    return Path(str(p))


def deepspeed_config_path() -> Path:
    """Path of the shipped DeepSpeed ZeRO-2 JSON (for ``accelerate launch --use_deepspeed
    --deepspeed_config_file``)."""
    return Path(str(resources.files("iclr25.cream") / "configs" / "deepspeed_zero2.json"))


@dataclass
class StageResult:
    """What a training stage returns.

    Attributes:
        model: the trained model (unwrapped; LoRA merged), eval mode.
        history: one dict per optimiser step (``step``, ``loss``, ``lr`` and, for DPO, ``margin``
            = mean h of the step's pairs).
        steps: optimiser steps taken in total.
        seconds: wall time of this call.
        n_examples: training examples (pairs) used.
        n_dropped: pairs dropped because chosen == rejected (DPO).
        final_margin_mean: DPO only: mean h over all training pairs after the stage.
        final_margins: DPO only: ``(n_examples,)`` h per pair after the stage.
        ref_logps: DPO only: ``(n_examples, 2)`` reference log-probs (chosen, rejected).
    """

    model: Any
    history: list[dict[str, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    n_examples: int = 0
    n_dropped: int = 0
    final_margin_mean: float | None = None
    final_margins: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None

    def summary(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("model", "final_margins", "ref_logps", "history")}
        d["final_loss"] = self.history[-1]["loss"] if self.history else None
        return d


# ---------------------------------------------------------------------------------------------
# helpers


def _peft():
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'iclr25-cream[peft]'") from None
    return peft


def apply_lora(model: Any, cfg: TrainConfig) -> Any:
    """Wrap ``model`` in a fresh peft LoRA adapter (``r``, ``alpha``, ``dropout`` from ``cfg``)."""
    peft = _peft()
    targets: Any = cfg.lora_target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    lcfg = peft.LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                           target_modules=targets, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, lcfg)


def merge_lora(model: Any) -> Any:
    """Merge a peft adapter into the base weights and return the plain model (no-op otherwise)."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


_DROPOUT_ATTRS = ("attention_dropout", "attn_dropout", "hidden_dropout", "dropout", "activation_dropout")


def disable_dropout(model: Any) -> int:
    """Set every dropout probability of ``model`` to 0 (TRL's ``disable_dropout_in_model``, extended to the
    float ``attention_dropout``-style attributes some attention modules pass to a functional dropout).

    Returns:
        how many probabilities were non-zero before (0: the model had no active dropout).
    """
    n = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            n += m.p > 0
            m.p = 0.0
        for a in _DROPOUT_ATTRS:
            v = getattr(m, a, None)
            if isinstance(v, float) and not isinstance(v, bool) and v > 0:
                setattr(m, a, 0.0)
                n += 1
    return n


def has_checkpoint(out_dir: str | Path | None) -> bool:
    """Whether ``out_dir/checkpoint`` holds a resumable checkpoint (after the core's
    :func:`~iclr25.core.checkpoint.recover_folder` puts back one a kill left between two renames)."""
    from iclr25.core.checkpoint import recover_folder

    if out_dir is None:
        return False
    ck = Path(out_dir) / "checkpoint"
    return recover_folder(ck) is not None and (ck / "trainer_state.json").is_file()


def _fingerprint(rows: Any) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode("utf-8")).hexdigest()


def _guard_stage(out: Path | None, cfg: TrainConfig, data: Any, resume: bool) -> None:
    """Record the stage's settings (and a hash of its data) in ``out/stage_settings.json``; on resume refuse
    other ones, naming them (the core's :func:`~iclr25.core.config.guard_resume_settings`). ``device`` may
    change."""
    from iclr25.core.config import guard_resume_settings

    if out is None:
        return
    settings = {**asdict(cfg), "data_sha256": _fingerprint(data)}
    guard_resume_settings(out, settings, resume=resume, ignore=("device",), filename="stage_settings.json",
                          write=int(os.environ.get("RANK", "0")) == 0)


def _is_peft(model: Any) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


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


def _torch_save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` written whole or not at all (the core's ``atomic_write_bytes``)."""
    import io

    from iclr25.core.checkpoint import atomic_write_bytes

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def _corrupt(path: Path, err: BaseException, ck: Path) -> ValueError:
    """The error for an unreadable checkpoint file (torn by a crash mid-write, or foreign)."""
    return ValueError(f"{path}: corrupt or torn checkpoint file ({type(err).__name__}: {str(err)[:200]}); delete "
                      f"{ck} to start the stage over (or run without --resume)")


def _load_tensors(path: Path, ck: Path) -> Any:
    """``torch.load(path, weights_only=True)`` of a checkpoint file, a clean error when it is
    missing or unreadable."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing from the checkpoint; delete {ck} to start the stage over")
    try:
        return torch.load(path, weights_only=True)
    except Exception as e:  # UnpicklingError, EOFError, RuntimeError ("failed finding central directory")
        raise _corrupt(path, e, ck) from None


_STATE_KEYS = ("global_step", "epoch", "step_in_epoch")


def _read_trainer_state(ck: Path) -> dict[str, Any]:
    """``ck/trainer_state.json``, validated (the step counters are non-negative ints, the history a list)."""
    p = ck / "trainer_state.json"
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _corrupt(p, e, ck) from None
    ok = isinstance(state, dict) and isinstance(state.get("history"), list) and all(
        isinstance(state.get(k), int) and not isinstance(state.get(k), bool) and state[k] >= 0 for k in _STATE_KEYS)
    if not ok:
        raise ValueError(f"{p}: not a trainer state (needs non-negative integer {', '.join(_STATE_KEYS)} and a "
                         f"history list); delete {ck} to start the stage over")
    return state


def _load_state(obj: Any, path: Path, ck: Path) -> None:
    """``obj.load_state_dict`` from a checkpoint file (optimizer, scheduler), a clean error when it does not fit."""
    state = _load_tensors(path, ck)
    try:
        obj.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise ValueError(f"{path}: does not fit this run's {type(obj).__name__} ({type(e).__name__}: "
                         f"{str(e)[:200]}); delete {ck} to start the stage over") from None


def _load_weights(model: Any, folder: Path) -> None:
    """Load the weights saved by ``save_pretrained`` in ``folder`` into ``model`` (full model or peft
    adapter), from safetensors."""
    from safetensors.torch import load_file

    def read(f: Path) -> dict[str, torch.Tensor]:
        try:
            return load_file(str(f))
        except Exception as e:  # safetensors raises its own error type on a torn or foreign file
            raise _corrupt(f, e, folder.parent) from None

    if _is_peft(model):
        peft = _peft()
        f = folder / "adapter_model.safetensors"
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing from the checkpoint; delete {folder.parent} to start over")
        peft.set_peft_model_state_dict(model, read(f))
        return
    files = sorted(folder.glob("model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no model*.safetensors to resume from; delete {folder.parent} to start "
                                "over")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(read(f))
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # a tensor of the wrong shape
        raise ValueError(f"{folder}: checkpoint does not fit the model ({str(e)[:300]})") from None
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    missing = [m for m in missing if m not in tied and not any(m.endswith(t) for t in tied)]
    if missing or unexpected:
        raise ValueError(f"{folder}: checkpoint does not fit the model (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]})")


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
                if cfg.save_steps and step % cfg.save_steps == 0 and step < total:
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


def _restore_rng(ck: Path, accelerator: Any) -> None:
    """Put back this process's RNG states from ``ck/rng_state.json`` (a clean error when it is missing, torn,
    or written by another number of processes)."""
    from iclr25.core.checkpoint import restore_rng_state

    p = ck / "rng_state.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p}: missing from the checkpoint (written by an older version?); delete {ck} to "
                                "start the stage over (or run without --resume)")
    try:
        rngs = json.loads(p.read_text(encoding="utf-8"))["processes"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise _corrupt(p, e, ck) from None
    if not isinstance(rngs, list) or len(rngs) != accelerator.num_processes:
        raise ValueError(f"{p}: RNG states of {len(rngs) if isinstance(rngs, list) else '?'} process(es), this run "
                         f"has {accelerator.num_processes}; resume with the same number of processes (an exact "
                         f"resume needs it) or delete {ck} to start the stage over")
    try:
        restore_rng_state(rngs[accelerator.process_index])
    except (KeyError, TypeError, IndexError) as e:
        raise _corrupt(p, e, ck) from None


def _drop_checkpoint(out_dir: Path | None) -> None:
    """Delete the stage's checkpoint once its final model and ``stage.json`` are written (not before: a kill
    in between must still find something to resume from)."""
    from accelerate import PartialState

    if out_dir is None or not PartialState().is_main_process:
        return
    for name in ("checkpoint", "checkpoint.old", "checkpoint.tmp"):
        shutil.rmtree(out_dir / name, ignore_errors=True)


def _final_exists(out_dir: Path | None) -> bool:
    return out_dir is not None and (out_dir / "model" / "config.json").is_file() and \
        (out_dir / "stage.json").is_file()


def _load_final(out_dir: Path, like: Any) -> Any:
    from transformers import AutoModelForCausalLM

    dtype = next(like.parameters()).dtype
    try:
        model = AutoModelForCausalLM.from_pretrained(out_dir / "model", dtype=dtype)
    except Exception as e:  # OSError, safetensors' error, a bad config.json
        raise ValueError(f"{out_dir / 'model'}: the finished stage's model cannot be loaded ({type(e).__name__}: "
                         f"{str(e)[:200]}); delete {out_dir / 'stage.json'} to train the stage again") from None
    return model.to(next(like.parameters()).device).eval()


def _write_final(result: StageResult, tokenizer: Any, out_dir: Path | None, extra: dict[str, Any]) -> None:
    if out_dir is None:
        return
    from accelerate import PartialState

    if PartialState().is_main_process:
        from iclr25.core.checkpoint import atomic_folder, atomic_write_text

        with atomic_folder(out_dir / "model") as tmp:
            result.model.save_pretrained(tmp, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
        # written last: its presence says the stage is finished
        atomic_write_text(out_dir / "stage.json", json.dumps({**result.summary(), **extra, "history": result.history},
                                                             indent=2) + "\n")
    PartialState().wait_for_everyone()


# ---------------------------------------------------------------------------------------------
# SFT


def train_sft(model: Any, tokenizer: Any, examples: Sequence[tuple[str, str]], cfg: TrainConfig, *,
              out_dir: str | Path | None = None, resume: bool = False, progress: bool = True) -> StageResult:
    """Supervised fine-tuning on ``(prompt, response)`` pairs, loss on response tokens (+ EOS) only
    (the official SFT masks everything but the assistant turn).

    Args:
        model: a ``*ForCausalLM`` (trained in place unless LoRA is on).
        tokenizer: its tokenizer.
        examples: ``(prompt, response)`` strings.
        cfg: the stage's :class:`~iclr25.cream.config.TrainConfig` (``beta`` unused).
        out_dir: folder for checkpoints and the final ``model/`` (``None``: nothing written).
        resume: continue from ``out_dir/checkpoint``.
        progress: show a progress bar.

    Returns:
        :class:`StageResult` (``history`` has the mean token NLL per step).

    Raises:
        ValueError: no examples, empty texts. FileNotFoundError: ``resume`` without a checkpoint.
    """
    from iclr25.core.lm import token_logprobs

    out = Path(out_dir) if out_dir is not None else None
    _guard_stage(out, cfg, [list(e) for e in examples], resume)
    if resume and _final_exists(out):
        log.info("sft: %s already holds the finished stage; loading it", out)
        return StageResult(model=_load_final(out, model), n_examples=len(examples))  # type: ignore[arg-type]
    for i, (p, r) in enumerate(examples):
        if not p.strip() or not r.strip():
            raise ValueError(f"sft example {i}: empty {'prompt' if not p.strip() else 'response'}")
    enc = encode_responses(tokenizer, [e[0] for e in examples], [e[1] for e in examples],
                           chat_template=cfg.chat_template, max_length=fit_max_length(model, cfg.max_length))

    def step_loss(m: Any, idx: torch.Tensor, acc: Any) -> tuple[torch.Tensor, dict[str, float]]:
        b = enc.select(idx.cpu()).to(acc.device)
        lp = token_logprobs(m, b.input_ids, b.attention_mask, b.response_mask)
        ntok = (b.response_mask[:, 1:] * b.attention_mask[:, 1:]).sum().clamp(min=1)
        return -lp.sum() / ntok, {}

    res = _run_stage(model, tokenizer, cfg, len(enc), step_loss, kind="sft", out_dir=out, resume=resume,
                     progress_bar=progress)
    _write_final(res, tokenizer, out, {"kind": "sft", "config": asdict(cfg)})
    _drop_checkpoint(out)
    return res


# ---------------------------------------------------------------------------------------------
# DPO / CREAM


def train_dpo(model: Any, tokenizer: Any, pairs: Sequence[PreferencePair], cfg: TrainConfig, *,
              c: Sequence[float] | None = None, out_dir: str | Path | None = None, resume: bool = False,
              progress: bool = True) -> StageResult:
    """One CREAM stage: minimise :func:`~iclr25.cream.losses.cream_dpo_loss` over ``pairs`` from
    ``model``, with the starting model as frozen reference.

    Args:
        model: the policy ``pi_t`` at the start of the stage (trained in place unless LoRA is on).
        tokenizer: its tokenizer.
        pairs: the preference pairs; pairs whose chosen and rejected texts are identical are dropped
            and counted (``StageResult.n_dropped``), never trained as a silent zero gradient.
        cfg: :class:`~iclr25.cream.config.TrainConfig` (``beta``, ``lr``, ``epochs``...).
        c: the weight per pair (default: each pair's ``c``); ``1`` everywhere is plain DPO.
        out_dir, resume, progress: as :func:`train_sft`.

    Returns:
        :class:`StageResult` with the per-step loss and margin, the reference log-probs and the
        margins over all pairs after the stage.

    Raises:
        ValueError: no pairs left, ``c`` of the wrong length or outside ``[0, 1]``.
    """
    from .losses import check_consistency_weights

    out = Path(out_dir) if out_dir is not None else None
    weights = [p.c for p in pairs] if c is None else list(c)
    if len(weights) != len(pairs):
        raise ValueError(f"{len(weights)} weights for {len(pairs)} pairs")
    keep = [i for i, p in enumerate(pairs) if p.chosen != p.rejected]
    dropped = len(pairs) - len(keep)
    if dropped:
        log.warning("dpo: dropped %d pair(s) whose chosen and rejected texts are identical (no signal)", dropped)
    pairs = [pairs[i] for i in keep]
    cw = torch.tensor([weights[i] for i in keep], dtype=torch.float64)
    check_consistency_weights(cw, len(pairs))
    if not pairs:
        raise ValueError("dpo: no pairs to train on")
    _guard_stage(out, cfg, [[p.prompt, p.chosen, p.rejected] for p in pairs] + [cw.tolist()], resume)
    if resume and _final_exists(out):
        log.info("dpo: %s already holds the finished stage; loading it", out)
        return StageResult(model=_load_final(out, model), n_examples=len(pairs), n_dropped=dropped)  # type: ignore[arg-type]
    prompts = [p.prompt for p in pairs]
    enc_c = encode_responses(tokenizer, prompts, [p.chosen for p in pairs], chat_template=cfg.chat_template,
                             max_length=fit_max_length(model, cfg.max_length))
    enc_r = encode_responses(tokenizer, prompts, [p.rejected for p in pairs], chat_template=cfg.chat_template,
                             max_length=fit_max_length(model, cfg.max_length))
    holder: dict[str, torch.Tensor] = {}
    ref_file = out / "ref_logps.pt" if out is not None else None

    def before(acc: Any, m: Any) -> None:
        if cfg.disable_dropout:
            n_off = disable_dropout(m)
            if n_off:
                log.info("dpo: dropout disabled in the policy (%d probabilities set to 0; disable_dropout=False "
                         "keeps it)", n_off)
        elif any(isinstance(x, torch.nn.Dropout) and x.p > 0 for x in m.modules()):
            log.warning("dpo: disable_dropout=False: dropout is active in the policy forward while the reference "
                        "log-probs are dropout-free, so the loss at initialisation is not log 2")
        if resume and ref_file is not None and ref_file.is_file():
            ref = _load_tensors(ref_file, out / "checkpoint")  # type: ignore[operator]
            if not isinstance(ref, torch.Tensor) or tuple(ref.shape) != (len(pairs), 2) or not ref.isfinite().all():
                raise ValueError(f"{ref_file}: expected finite ({len(pairs)}, 2) reference log-probs (one row per "
                                 f"pair), got {getattr(ref, 'shape', type(ref).__name__)}; delete it and "
                                 f"{out / 'checkpoint'} to start the stage over")  # type: ignore[operator]
            holder["ref"] = ref
            return
        if _is_peft(m):
            with m.disable_adapter():
                ref = _sharded_pair_logps(acc, m, enc_c, enc_r, cfg.batch_size, "dpo: reference log-probs")
        else:
            ref = _sharded_pair_logps(acc, m, enc_c, enc_r, cfg.batch_size, "dpo: reference log-probs")
        holder["ref"] = ref
        if ref_file is not None and acc.is_main_process:
            _torch_save_atomic(ref, ref_file)

    def step_loss(m: Any, idx: torch.Tensor, acc: Any) -> tuple[torch.Tensor, dict[str, float]]:
        i = idx.cpu()
        both = _concat(enc_c.select(i), enc_r.select(i))
        lp = _logps(m, both, acc.device)
        k = len(i)
        ref = holder["ref"][i].to(device=acc.device, dtype=lp.dtype)
        loss, h = cream_dpo_loss(lp[:k], lp[k:], ref[:, 0], ref[:, 1], cw[i].to(acc.device, lp.dtype),
                                 beta=cfg.beta)
        return loss, {"margin": float(h.mean())}

    def after(acc: Any, m: Any) -> None:
        pol = _sharded_pair_logps(acc, m, enc_c, enc_r, cfg.batch_size, "dpo: final margins")
        ref = holder["ref"]
        holder["margins"] = cfg.beta * ((pol[:, 0] - ref[:, 0]) - (pol[:, 1] - ref[:, 1]))

    res = _run_stage(model, tokenizer, cfg, len(pairs), step_loss, kind="dpo", out_dir=out, resume=resume,
                     progress_bar=progress, before_train=before, after_train=after)
    res.n_dropped = dropped
    res.ref_logps = holder["ref"]
    res.final_margins = holder["margins"]
    res.final_margin_mean = float(holder["margins"].mean())
    _write_final(res, tokenizer, out, {"kind": "dpo", "config": asdict(cfg), "c_mean": float(cw.mean())})
    _drop_checkpoint(out)
    if ref_file is not None and ref_file.exists():
        from accelerate import PartialState

        if PartialState().is_main_process:
            ref_file.unlink()
    return res
