"""iclr25-aihf: reward and policy learned jointly from demonstrations and preferences (AIHF, ICLR 2025).

Li, Zeng, Liao, Li, Kang, Garcia, Hong, *Joint Reward and Policy Learning with Demonstrations and Human Feedback
Improves Alignment* (ICLR 2025, arXiv 2406.06874). One objective ``w * L_D + (1 - w) * L_P`` over a reward whose
KL-regularised optimal policy must explain the demonstrations (``L_D``) while the reward explains the preferences
(``L_P``): w = 0 is RLHF, w = 1 is ML-IRL (= SFT in the tabular one-step case); the implicit-reward form gives
AIHF-DPO / Self-Play-AIHF.

The namespace is lazy: importing it loads neither torch nor transformers until a name is used.
"""

from __future__ import annotations

import importlib

from ._version import __version__

_EXPORTS = {
    "AIHFConfig": "config",
    "MujocoConfig": "config",
    "train_mujoco": "mujoco",
    "aihf_segment_loss": "mujoco",
    "TinyLMConfig": "config",
    "aihf_reward_loss": "losses",
    "aihf_implicit_loss": "losses",
    "soft_policy": "soft",
    "soft_value_iteration": "soft",
    "BanditTask": "tasks",
    "GridworldMDP": "tasks",
    "BanditDemos": "tasks",
    "BanditPrefs": "tasks",
    "TrajDemos": "tasks",
    "TrajPrefs": "tasks",
    "train_aihf": "tabular",
    "fit_aihf_exact": "tabular",
    "run_baseline": "tabular",
    "sft_policy": "tabular",
    "TrainResult": "tabular",
    "TinyLMTask": "tinylm",
    "train_aihf_dpo": "tinylm",
    "run_lm_method": "tinylm",
    "load_hh_pairs": "data",
    "split_hh_dialogue": "data",
    "read_demonstrations": "data",
    "read_preferences": "data",
    "read_agent_samples": "data",
    "PolicyStep": "text",
    "PPOStep": "text",
    "RewardModel": "text",
    "train_text": "text",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'iclr25.aihf' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
