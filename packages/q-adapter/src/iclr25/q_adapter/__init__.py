"""Q-Adapter (Li et al., ICLR 2025): customise a pre-trained LLM to a new preference by training a LoRA
adapter as a residual soft Q-function, serving ``softmax((Q + alpha_0 log pi_1) / alpha~)``.

Attributes are imported lazily (torch, transformers and peft load on first use), so the CLI's
``--help`` is fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "QAdapterConfig": "config",
    "PreferencePair": "data", "TokenizedPair": "data", "collate_pairs": "data", "load_dsp": "data",
    "load_dsp_pairs": "data", "load_hh_rlhf": "data", "load_preference_jsonl": "data",
    "split_hh_dialogue": "data", "split_queries": "data", "tokenize_pairs": "data",
    "evaluate_customization": "evaluate", "general_nll": "evaluate", "generation_throughput": "evaluate",
    "pair_accuracy": "evaluate",
    "action_mask": "losses", "implicit_scores": "losses", "policy_logits": "losses", "qadapter_loss": "losses",
    "residual_rewards": "losses", "sequence_rewards": "losses", "soft_values": "losses",
    "LoRAPolicy": "baseline", "QAdapterModel": "model", "check_causal_lm": "lora", "kv_decode": "decoding",
    "PreferenceTrainer": "trainer", "TrainerConfig": "trainer", "preference_step_loss": "step_loss",
    "train_qadapter": "trainer",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
