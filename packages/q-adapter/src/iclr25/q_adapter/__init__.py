"""Q-Adapter (Li et al., ICLR 2025): customise a pre-trained LLM to a new preference by training a LoRA
adapter as a residual soft Q-function, serving ``softmax((Q + alpha_0 log pi_1) / alpha~)``."""

from ._version import __version__
from .config import QAdapterConfig
from .data import (
    PreferencePair,
    TokenizedPair,
    collate_pairs,
    load_dsp,
    load_dsp_pairs,
    load_hh_rlhf,
    load_preference_jsonl,
    split_hh_dialogue,
    split_queries,
    tokenize_pairs,
)
from .evaluate import evaluate_customization, general_nll, generation_throughput, pair_accuracy
from .losses import (
    action_mask,
    implicit_scores,
    policy_logits,
    qadapter_loss,
    residual_rewards,
    sequence_rewards,
    soft_values,
)
from .model import LoRAPolicy, QAdapterModel, check_causal_lm
from .trainer import PreferenceTrainer, TrainerConfig, preference_step_loss


def train_qadapter(model, pairs, pad_token_id, cfg: TrainerConfig | None = None, **kwargs):
    """Train ``model`` (a :class:`QAdapterModel`) on tokenised pairs; returns the per-step stats."""
    return PreferenceTrainer(model, pairs, pad_token_id, cfg or TrainerConfig(), **kwargs).train()


__all__ = [
    "__version__",
    "QAdapterConfig",
    "QAdapterModel",
    "LoRAPolicy",
    "check_causal_lm",
    "PreferencePair",
    "TokenizedPair",
    "load_hh_rlhf",
    "load_dsp",
    "load_dsp_pairs",
    "load_preference_jsonl",
    "split_hh_dialogue",
    "split_queries",
    "tokenize_pairs",
    "collate_pairs",
    "policy_logits",
    "soft_values",
    "action_mask",
    "residual_rewards",
    "sequence_rewards",
    "qadapter_loss",
    "implicit_scores",
    "TrainerConfig",
    "PreferenceTrainer",
    "preference_step_loss",
    "train_qadapter",
    "pair_accuracy",
    "general_nll",
    "generation_throughput",
    "evaluate_customization",
]
