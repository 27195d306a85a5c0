"""The trap base shipped inside the wheel: a converged ``p_c = 0.4`` base, loaded without pre-training.

The quick reproduction and the README's example use it, so every machine starts from the same weights
(a fixed-length base trained on each machine reached 0.27 argmax accuracy on one and 0.985 on another).
It was trained with the full preset's to-convergence recipe (:func:`~iclr25.sharpening.base.
pretrain_trap_base_to_kl`: validation ``KL(p_data || pi_base) <= 0.05`` nats, cap 12,000 steps) by
``benchmarks/train_shipped_base.py``; its training record (steps, validation KL per check, CPU-seconds)
ships beside the weights (``trapbase_train.json``). The weights' SHA-256 is checked on every load, and the
validation KL is measured again on the caller's validation prompts (it is a measured quantity, not a label).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from .base import TrapBase, trap_data_kl, use_fused_gelu, validation_pairs
from .task import TrapArithmeticTask

__all__ = ["SHIPPED_BASE_DIR", "SHIPPED_BASE_SHA256", "check_shipped_base", "shipped_trap_base", "shipped_base_record"]

log = logging.getLogger(__name__)

#: the packaged base's folder (``save_pretrained`` layout + ``trapbase_train.json``)
SHIPPED_BASE_DIR = Path(__file__).parent / "weights" / "trapbase-pc0.4-seed2"
#: SHA-256 of ``model.safetensors`` in :data:`SHIPPED_BASE_DIR`
SHIPPED_BASE_SHA256 = "219753b2e8d399951385d9bfabdd7559a27c65f4bbb806d0f6df9981bad7f53f"


def shipped_base_record() -> dict:
    """The shipped base's training record (``trapbase_train.json``: recipe, config, steps, validation KL,
    KL history, CPU-seconds on the machine that trained it)."""
    p = SHIPPED_BASE_DIR / "trapbase_train.json"
    if not p.is_file():
        raise FileNotFoundError(f"{p} is missing: the shipped trap base is not installed; reinstall "
                                "iclr25-sharpening")
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(rec, dict):
            raise TypeError(f"expected a JSON object, got {type(rec).__name__}")
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"{p} is damaged ({e}); reinstall iclr25-sharpening") from None
    return rec


def check_shipped_base() -> tuple[dict, Path, str]:
    """Check the shipped base's files without loading it (milliseconds): its training record parses, and
    ``model.safetensors`` is there with the shipped SHA-256. ``reproduce`` calls this before it starts any job,
    so a damaged install is one line in the parent, not a worker's traceback.

    Returns:
        ``(training record, weights path, sha256)``.

    Raises:
        FileNotFoundError: a file is missing. ValueError: a damaged record or other weights.
    """
    rec = shipped_base_record()
    w = SHIPPED_BASE_DIR / "model.safetensors"
    if not w.is_file():
        raise FileNotFoundError(f"{w} is missing: reinstall iclr25-sharpening")
    got = _sha256(w)
    if got != SHIPPED_BASE_SHA256:
        raise ValueError(f"{w}: SHA-256 {got[:16]}... differs from the shipped {SHIPPED_BASE_SHA256[:16]}... "
                         "(damaged or replaced); reinstall iclr25-sharpening")
    return rec, w, got


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shipped_trap_base(task: TrapArithmeticTask | None = None, *, exclude: np.ndarray | None = None,
                      n_val: int = 256) -> TrapBase:
    """Load the shipped converged trap base (``p_c = 0.4``, 10 distractors; seconds, no pre-training).

    Args:
        task: must be the default :class:`TrapArithmeticTask` (the base was trained on it); ``None`` for it.
        exclude: operand pairs the validation prompts avoid (the test prompts), as in
            :func:`~iclr25.sharpening.base.cached_trap_base`; ``None``: the quick test split
            ``task.split(300, 200, seed=0)[1]``, i.e. the validation prompts the base stopped on (its record's
            ``validation_prompts``), so the re-measured KL is comparable with the stopping rule.
        n_val: validation prompts for the measured KL.

    Returns:
        :class:`~iclr25.sharpening.base.TrapBase`; ``info`` holds the training record's steps and CPU-seconds,
        ``val_kl`` measured now on ``validation_pairs(task, n_val, exclude)``, ``converged`` = that KL is at most
        the recipe's ``stop_kl``, ``shipped: True`` and the checked ``sha256``.

    Raises:
        ValueError: another task, or weights whose SHA-256 differs from :data:`SHIPPED_BASE_SHA256`.
        FileNotFoundError: the weights are not installed.
    """
    from transformers import AutoModelForCausalLM

    from iclr25.core.lm import byte_tokenizer

    task = TrapArithmeticTask() if task is None else task
    if task != TrapArithmeticTask():
        raise ValueError(f"shipped_trap_base: the shipped base models the default trap task (p_c 0.4, 10 "
                         f"distractors), not {task}; pre-train one with cached_trap_base(task, cfg)")
    rec, _, got = check_shipped_base()
    if exclude is None:
        exclude = task.split(300, 200, seed=0)[1]
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_BASE_DIR, use_safetensors=True).eval()
    use_fused_gelu(model)
    tok = byte_tokenizer(padding_side="left")
    kl = trap_data_kl(model, tok, task, validation_pairs(task, n_val, exclude))["kl"]
    stop = float(rec["stop_kl"])
    info = {"cached": True, "shipped": True, "sha256": got, "path": str(SHIPPED_BASE_DIR), "recipe": rec["recipe"],
            "pretrain_seconds": float(rec["seconds"]), "pretrain_cpu_seconds": float(rec["cpu_seconds"]),
            "load_seconds": 0.0, "final_loss": rec.get("final_loss"), "steps": int(rec["steps"]),
            "converged": bool(kl <= stop), "val_kl": float(kl), "train_val_kl": float(rec["val_kl"]),
            "stop_kl": stop, "max_steps": int(rec["max_steps"]), "kl_history": rec["kl_history"],
            "task": rec.get("task"), "config": rec.get("config")}
    if not info["converged"]:
        log.warning("shipped trap base: validation KL %.4f nats > %.3g on these prompts", kl, stop)
    return TrapBase(model, tok, info)
