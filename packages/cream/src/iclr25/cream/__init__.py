"""iclr25-cream: CREAM — Consistency Regularized Self-Rewarding Language Models (Wang et al., ICLR 2025).

The model samples ``N`` answers per prompt, ranks them with its own DPO implicit reward, and trains
with DPO on the best-vs-worst pair; CREAM weights each self-labelled pair by how consistently two
iterations rank its responses (Kendall tau), as a soft DPO label.

Public API (imported lazily, so ``import iclr25.cream`` does not load torch):

- rewards: :func:`dpo_reward`, :func:`score_responses`, :func:`encode_responses`;
- consistency: :func:`ordinal_ranks`, :func:`kendall_consistency`, :func:`spearman_consistency`,
  :func:`consistency_rates`, :func:`kendall_tau_b`;
- pairs: :class:`Sample`, :class:`PreferencePair`, :func:`build_pairs`;
- loss: :func:`cream_dpo_loss`;
- training: :func:`train_sft`, :func:`train_dpo`;
- loop: :class:`CreamConfig`, :func:`self_rewarding_loop`, :class:`IterationReport`;
- evaluation: :func:`extract_gsm8k_answer`, :func:`extract_choice_answer`;
- the toy task: :class:`AdditionTask`, :func:`toy_models`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "dpo_reward": "rewards",
    "score_responses": "rewards",
    "encode_responses": "rewards",
    "EncodedResponses": "rewards",
    "ordinal_ranks": "consistency",
    "kendall_consistency": "consistency",
    "spearman_consistency": "consistency",
    "consistency_rates": "consistency",
    "consistency_summary": "consistency",
    "kendall_tau_b": "consistency",
    "Sample": "pairs",
    "PreferencePair": "pairs",
    "build_pairs": "pairs",
    "pair_c_values": "pairs",
    "cream_dpo_loss": "losses",
    "train_sft": "training",
    "train_dpo": "training",
    "StageResult": "training",
    "TrainConfig": "config",
    "CreamConfig": "config",
    "self_rewarding_loop": "loop",
    "IterationReport": "loop",
    "sample_responses": "generation",
    "make_generator": "generation",
    "extract_gsm8k_answer": "parsers",
    "extract_choice_answer": "parsers",
    "AdditionTask": "toy",
    "toy_models": "toy",
    "read_samples": "data",
    "read_rewards": "data",
    "read_pairs": "data",
    "read_prompts": "data",
    "read_sft_data": "data",
    "read_eval_data": "data",
    "accelerate_config_path": "training",
    "deepspeed_config_path": "training",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
