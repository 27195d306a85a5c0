"""The vBoN reward and the policy-gradient losses (paper §3, Eq. 6–9; official ``ppo_sentiments.py``).

vBoN maximises ``-KL(pi_theta || pi_BoN)``, i.e. KL-regularised RL with

* ``bound="exact"``: reward ``log sum_{i=1}^N C(N,i) F^{N-i} pi_ref(y)^{i-1}`` and KL coefficient 1,
  or — dividing by ``N-1`` (``scale="paper"``) — reward ``/ (N-1)`` with ``beta = 1/(N-1)``;
  the official code divides by ``N`` instead (``scale="code"``);
* ``bound="l1"``: the lower bound keeping only ``i = 1``: reward ``log F`` with ``beta = 1/(N-1)``.

Baseline RLHF: reward ``r`` with a free ``beta``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["vbon_reward", "rloo_advantages", "policy_gradient_loss", "kl_k3"]

_BOUNDS = ("exact", "l1")
_SCALES = ("paper", "code", "none")


def vbon_reward(log_cdf, log_ref, n: int, bound: str = "exact", scale: str = "paper") -> torch.Tensor:
    """Sequence-level vBoN reward (§3, Eq. 7–9).

    Args:
        log_cdf: ``(B,)`` float ``log F(x, y)`` (e.g. from :class:`~iclr25.vbon.cdf.RewardCDFCache`).
        log_ref: ``(B,)`` float ``log pi_ref(y|x)`` of each sample (used by ``bound="exact"`` only;
            the official code computes it over prompt + continuation, see ``ref_logprob_scope``).
        n: the BoN ``N`` (>= 1; >= 2 for ``scale="paper"``).
        bound: ``"exact"`` or ``"l1"``.
        scale: for ``"exact"``: ``"paper"`` divides ``log S`` by ``N-1`` (pairs with
            ``beta = 1/(N-1)``), ``"code"`` by ``N`` (official code), ``"none"`` returns ``log S``
            (pairs with ``beta = 1``). Ignored for ``"l1"``.

    Returns:
        ``(B,)`` float64 rewards (nats). Monotone in ``F``, hence invariant to any strictly
        increasing transform of the underlying reward.

    Raises:
        ValueError: bad ``n``, ``bound``, ``scale`` or shapes; ``log_cdf`` NaN or ``> 0`` (not a
            log-probability; ``-inf`` is allowed: ``F = 0`` without smoothing); ``log_ref`` NaN or ``> 0``.
    """
    if bound not in _BOUNDS:
        raise ValueError(f"bound must be one of {_BOUNDS}, got {bound!r}")
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"N must be an integer >= 1, got {n!r}")
    n = int(n)
    lf = torch.as_tensor(log_cdf, dtype=torch.float64)
    if torch.isnan(lf).any():
        raise ValueError("log_cdf contains NaN; check the reward function and the reference-reward cache")
    if (lf > 1e-9).any():
        raise ValueError(f"log_cdf must be <= 0 (log of a CDF value in [0, 1]), got max {lf.max().item():.4g}; "
                         "pass log F, not F or the raw reward")
    if bound == "l1":
        return lf
    lr = torch.as_tensor(log_ref, dtype=torch.float64)
    if lr.shape != lf.shape:
        raise ValueError(f"log_ref shape {tuple(lr.shape)} != log_cdf shape {tuple(lf.shape)}")
    if torch.isnan(lr).any():
        raise ValueError("log_ref contains NaN; check the reference model's log-probs")
    if (lr > 1e-9).any():
        raise ValueError("log_ref must be <= 0 (a log-probability)")
    i = torch.arange(1, n + 1, dtype=torch.float64)
    log_comb = torch.tensor([math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(1, n + 1)],
                            dtype=torch.float64)
    pow_f = (n - i)                                                # (N,)
    f_term = torch.where(pow_f > 0, pow_f * lf[..., None], torch.zeros(()))  # avoid 0 * -inf
    terms = log_comb + f_term + (i - 1) * lr[..., None]
    log_s = torch.logsumexp(terms, dim=-1)
    if scale == "paper":
        if n < 2:
            raise ValueError("scale='paper' divides by N-1; use N >= 2 (or scale='none')")
        return log_s / (n - 1)
    if scale == "code":
        return log_s / n
    return log_s


def rloo_advantages(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """REINFORCE leave-one-out advantages (Ahmadian et al., 2024).

    Args:
        returns: ``(P * k,)`` float sequence returns, grouped: the ``k = group_size`` samples of a
            prompt are contiguous.
        group_size: samples per prompt ``k >= 2``.

    Returns:
        ``(P * k,)`` ``R_i - mean_{j != i} R_j`` within each group.
    """
    if group_size < 2:
        raise ValueError("RLOO needs at least 2 samples per prompt (samples_per_prompt >= 2)")
    if returns.numel() % group_size:
        raise ValueError(f"{returns.numel()} returns are not a multiple of group_size={group_size}")
    g = returns.view(-1, group_size)
    base = (g.sum(1, keepdim=True) - g) / (group_size - 1)
    return (g - base).reshape(-1)


def policy_gradient_loss(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                         advantages: torch.Tensor, clip: float | None = 0.2) -> torch.Tensor:
    """Clipped-surrogate (PPO) or plain REINFORCE loss on token log-probs with sequence advantages.

    Args:
        logp: ``(B, T)`` current token log-probs (with grad).
        old_logp: ``(B, T)`` log-probs under the sampling policy (no grad).
        mask: ``(B, T)`` 1 on response tokens.
        advantages: ``(B,)`` sequence advantages (broadcast to every token).
        clip: PPO ratio clip ``epsilon``; ``None`` gives REINFORCE ``-A * sum_t log pi``.

    Returns:
        scalar loss (mean over sequences of the per-sequence summed token surrogate).
    """
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)[:, None]
    if clip is None:
        return -((logp * mask).sum(1) * adv[:, 0]).mean()
    ratio = torch.exp(logp - old_logp)
    surr = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    return -((surr * mask).sum(1)).mean()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The official code's ``calc_kl``: ``sum_t (e^l - 1) - l`` with ``l = log pi_ref - log pi``.

    Returns ``(B,)`` non-negative per-sequence KL estimates.
    """
    lr = (ref_logp - logp) * mask
    return ((lr.exp() - 1) - lr).mul(mask).sum(-1)
