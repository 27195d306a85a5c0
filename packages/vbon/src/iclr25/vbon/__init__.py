"""iclr25-vbon: Variational Best-of-N alignment (Amini, Vieira, Ash, Cotterell; ICLR 2025).

Exact BoN utilities (:mod:`.bon`), the empirical reward CDF (:mod:`.cdf`), the vBoN reward and
policy-gradient losses (:mod:`.objective`), a batched BoN sampler (:mod:`.sampling`), the trainer
(:mod:`.trainer`), rewards (:mod:`.rewards`) and the embedded tiny reference LM (:mod:`.reflm`).
"""

from ._version import __version__

__all__ = [
    "__version__",
    "bon_distribution",
    "bon_distribution_sum_form",
    "strict_cdf",
    "bon_kl",
    "bon_win_rate",
    "n_from_beta",
    "beta_from_n",
    "kl_divergence",
    "total_variation",
    "exact_win_rate",
    "l1_optimum",
    "rlhf_optimum",
    "sample_bon_discrete",
    "optimize_tabular",
    "empirical_log_cdf",
    "normalize_prompt",
    "RewardCDFCache",
    "vbon_reward",
    "rloo_advantages",
    "policy_gradient_loss",
    "kl_k3",
    "VBoNConfig",
    "VBoNTrainer",
    "evaluate_policy",
    "win_rate",
    "best_of_n",
    "best_of_n_generator",
    "select_best",
    "BoNResult",
    "sample",
    "sample_texts",
    "Samples",
    "response_logprobs",
    "TfidfSentimentReward",
    "HFRewardModel",
    "call_reward",
    "load_reference_lm",
    "reference_lm_spec",
]

# Imported on first use (module __getattr__), so that `import iclr25.vbon` and `iclr25-vbon --help`
# do not load torch & co.
_LAZY = {
    "beta_from_n": "bon",
    "bon_distribution": "bon",
    "bon_distribution_sum_form": "bon",
    "bon_kl": "bon",
    "bon_win_rate": "bon",
    "exact_win_rate": "bon",
    "kl_divergence": "bon",
    "l1_optimum": "bon",
    "n_from_beta": "bon",
    "optimize_tabular": "bon",
    "rlhf_optimum": "bon",
    "sample_bon_discrete": "bon",
    "strict_cdf": "bon",
    "total_variation": "bon",
    "RewardCDFCache": "cdf",
    "empirical_log_cdf": "cdf",
    "normalize_prompt": "cdf",
    "VBoNConfig": "config",
    "kl_k3": "objective",
    "policy_gradient_loss": "objective",
    "rloo_advantages": "objective",
    "vbon_reward": "objective",
    "load_reference_lm": "reflm",
    "reference_lm_spec": "reflm",
    "HFRewardModel": "rewards",
    "TfidfSentimentReward": "rewards",
    "call_reward": "rewards",
    "BoNResult": "sampling",
    "Samples": "sampling",
    "best_of_n": "sampling",
    "best_of_n_generator": "sampling",
    "select_best": "sampling",
    "response_logprobs": "sampling",
    "sample": "sampling",
    "sample_texts": "sampling",
    "VBoNTrainer": "trainer",
    "evaluate_policy": "trainer",
    "win_rate": "trainer",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
