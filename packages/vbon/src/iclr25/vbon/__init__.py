"""iclr25-vbon: Variational Best-of-N alignment (Amini, Vieira, Ash, Cotterell; ICLR 2025).

Exact BoN utilities (:mod:`.bon`), the empirical reward CDF (:mod:`.cdf`), the vBoN reward and
policy-gradient losses (:mod:`.objective`), a batched BoN sampler (:mod:`.sampling`), the trainer
(:mod:`.trainer`), rewards (:mod:`.rewards`) and the embedded tiny reference LM (:mod:`.reflm`).
"""

from ._version import __version__
from .bon import (
    beta_from_n,
    bon_distribution,
    bon_distribution_sum_form,
    bon_kl,
    bon_win_rate,
    exact_win_rate,
    kl_divergence,
    l1_optimum,
    n_from_beta,
    optimize_tabular,
    rlhf_optimum,
    sample_bon_discrete,
    strict_cdf,
    total_variation,
)
from .cdf import RewardCDFCache, empirical_log_cdf, normalize_prompt
from .config import VBoNConfig
from .objective import kl_k3, policy_gradient_loss, rloo_advantages, vbon_reward
from .reflm import RefLMConfig, load_reference_lm, pretrain_reference_lm
from .rewards import HFRewardModel, TfidfSentimentReward, call_reward
from .sampling import BoNResult, Samples, best_of_n, response_logprobs, sample, sample_texts
from .trainer import VBoNTrainer, evaluate_policy, win_rate

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
    "BoNResult",
    "sample",
    "sample_texts",
    "Samples",
    "response_logprobs",
    "TfidfSentimentReward",
    "HFRewardModel",
    "call_reward",
    "RefLMConfig",
    "load_reference_lm",
    "pretrain_reference_lm",
]
