"""A stage's checkpoints and final model: :class:`StageResult`, the settings guard, atomic tensor and
weight I/O (``weights_only=True``/safetensors), RNG state, and the final-model folder."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig
from .lora import _peft
from .lora import is_peft as _is_peft

__all__ = ['StageResult', 'has_checkpoint']

log = logging.getLogger(__name__)


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
