"""The adaptive sample count of SFT-Sharpening (App. D).

Per prompt, keep sampling until ``N_mu(x) = inf{k : 1 / max_{j<=k} pi_base(y_j|x) <= k / mu}``, i.e. stop at
the first ``k`` with ``k >= mu / (best likelihood so far)``; with ``mu = ln(2/delta)`` the expected total
sample count scales with ``C̄_cov = E_x[1 / max_y pi_base(y|x)]`` and ``1/eps`` instead of ``1/eps^2``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["adaptive_mu", "adaptive_sample_count"]


def adaptive_mu(delta: float) -> float:
    """``mu = ln(2 / delta)`` (App. D). Raises ``ValueError`` unless ``0 < delta < 1``."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return math.log(2.0 / delta)


def adaptive_sample_count(logprobs, *, delta: float | None = None, mu: float | None = None):
    """Where the adaptive rule stops, given the log-likelihoods of the draws in the order they were made.

    Args:
        logprobs: ``(K,)`` or ``(B, K)`` ``log pi_base(y_j|x)`` of draws ``j = 1..K`` (nats; numpy or torch).
        delta: sets ``mu = ln(2/delta)``; give exactly one of ``delta`` and ``mu``.
        mu: the threshold directly (> 0).

    Returns:
        ``(k, stopped)``: ``k`` ``(B,)`` int64 — the first ``k`` (1-based) with
        ``k * max_{j<=k} pi(y_j) >= mu``, or ``K`` when the rule has not stopped within the draws given;
        ``stopped`` ``(B,)`` bool says which. Scalars for a 1-D input.

    Raises:
        ValueError: both/neither of ``delta``/``mu``, ``mu <= 0``, or NaN log-likelihoods.

    Example (spec §6.7): ``delta = 0.1`` gives ``mu = ln 20 = 2.9957``; with best likelihood 0.4 the rule
    stops at the first ``k >= 7.49``, ``k = 8``.
    """
    if (delta is None) == (mu is None):
        raise ValueError("give exactly one of delta and mu")
    if mu is None:
        mu = adaptive_mu(delta)
    if isinstance(mu, bool) or not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"mu must be a finite number > 0, got {mu!r}")
    a = logprobs.detach().cpu().double().numpy() if hasattr(logprobs, "detach") else np.asarray(logprobs, float)
    one = a.ndim == 1
    if one:
        a = a[None]
    if a.ndim != 2 or a.shape[1] == 0:
        raise ValueError(f"logprobs must be (K,) or (B, K) with K >= 1, got shape {a.shape}")
    if np.isnan(a).any():
        raise ValueError("logprobs contain NaN")
    best = np.maximum.accumulate(a, axis=1)                       # log max_{j<=k} pi(y_j)
    k = np.arange(1, a.shape[1] + 1)[None]
    ok = np.log(k) + best >= math.log(mu)                        # k * best >= mu, in log space
    stopped = ok.any(1)
    first = np.where(stopped, ok.argmax(1) + 1, a.shape[1]).astype(np.int64)
    if one:
        return int(first[0]), bool(stopped[0])
    return first, stopped
