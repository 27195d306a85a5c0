"""iclr25-seal: SEAL — safety-enhanced aligned LLM fine-tuning via bilevel data selection
(Shen, Chen, Das & Chen, ICLR 2025).

A selector learns one score per fine-tuning sample against a small trusted safety set
(:func:`train_selector`, the released code's penalty-based bilevel update), :func:`select_top` keeps the
top-ranked fraction and :func:`sft` fine-tunes the original aligned model on it. The CPU-scale tasks
with known labels (:func:`make_synthetic_safety_task`, :func:`make_real_safety_task`), the tiny aligned
base (:func:`aligned_base`), the metrics and the baselines reproduce the paper's claims.

Attributes are imported lazily (torch, transformers, peft load on first use), so ``iclr25-seal --help``
stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "BilevelConfig": "config",
    "SFTConfig": "config",
    "LoRAOptions": "config",
    "CPU_SELECTOR": "config",
    "CPU_SELECTOR_ADAM": "config",
    "CPU_SFT": "config",
    "OFFICIAL_TEMPLATE": "config",
    "Selector": "selector",
    "selector_loss": "selector",
    "selector_gradient": "selector",
    "per_sample_lm_loss": "losses",
    "PairSet": "data",
    "LMDataset": "data",
    "read_pairs": "data",
    "record_to_pair": "data",
    "encode_pairs": "data",
    "SelectorResult": "bilevel",
    "train_selector": "bilevel",
    "load_selector": "bilevel",
    "epoch_plan": "bilevel",
    "select_top": "selection",
    "random_subset": "selection",
    "loss_filter_subset": "selection",
    "oracle_subset": "selection",
    "sft": "sft",
    "base_losses": "sft",
    "SafetyTask": "tasks",
    "make_synthetic_safety_task": "tasks",
    "make_real_safety_task": "tasks",
    "word_tokenizer": "tasks",
    "aligned_base": "tasks",
    "refusal_rate": "metrics",
    "safety_margin": "metrics",
    "exact_match": "metrics",
    "win_rate": "metrics",
    "ProgrammaticJudge": "metrics",
    "judged_win_rate": "metrics",
    "parse_verdict": "metrics",
    "parse_verdict_detailed": "metrics",
    "auroc": "metrics",
    "generate_responses": "metrics",
    "PlainRuntime": "runtime",
    "AccelerateRuntime": "runtime",
    "make_runtime": "runtime",
    "apply_lora": "scale",
    "load_model": "scale",
    "METHODS": "experiment",
    "run_task_seed": "experiment",
    "reproduce": "reproduce",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
