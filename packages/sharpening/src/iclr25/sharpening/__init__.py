"""iclr25-sharpening: Self-Improvement in Language Models — The Sharpening Mechanism (Huang et al., ICLR 2025).

Self-rewards (:mod:`.rewards`), batched best-of-N (:mod:`.bon`), SFT-Sharpening (:mod:`.sft`), RLHF-Sharpening
with Eq. (8) and XPO (:mod:`.rlhf`), the adaptive sample count (:mod:`.adaptive`), exact tools for small
response spaces (:mod:`.exact`), the trap-arithmetic task (:mod:`.task`), its cached base (:mod:`.base`) and the converged base shipped in the
wheel (:mod:`.shipped`).

Attributes are imported lazily (torch is loaded only when a model function is used).
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "LogLikelihood": "rewards",
    "LengthNormalizedLogLikelihood": "rewards",
    "MajorityVote": "rewards",
    "SelfReward": "rewards",
    "score_sequences": "rewards",
    "answer_extractor": "answers",
    "Samples": "sampling",
    "sample_responses": "sampling",
    "samples_from_texts": "sampling",
    "BoNResult": "bon",
    "best_of_n": "bon",
    "select_best": "bon",
    "SFTConfig": "sft",
    "SFTResult": "sft",
    "build_sft_corpus": "sft",
    "sft_sharpen": "sft",
    "adaptive_mu": "adaptive",
    "adaptive_sample_count": "adaptive",
    "RLHFConfig": "rlhf",
    "RLHFResult": "rlhf",
    "rlhf_sharpen": "rlhf",
    "sharpening_regression_loss": "rlhf",
    "xpo_loss": "rlhf",
    "sample_pairs": "rlhf",
    "estimate_j_beta": "rlhf",
    "TrainConfig": "training",
    "PolicyTrainer": "training",
    "enumerate_responses": "exact",
    "argmax_response": "exact",
    "tilted_optimum": "exact",
    "coverage_coefficient": "exact",
    "SharpnessReport": "exact",
    "sharpness_report": "exact",
    "bon_output_law": "exact",
    "bon_success_probability": "exact",
    "required_samples": "exact",
    "tabular_greedy": "exact",
    "TrapArithmeticTask": "task",
    "TrapBaseConfig": "base",
    "TrapBase": "base",
    "cached_trap_base": "base",
    "shipped_trap_base": "shipped",
    "trap_data_kl": "base",
    "data_kl": "base",
    "evaluate_on_trap": "evaluation",
    "reproduce": "reproduce",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
