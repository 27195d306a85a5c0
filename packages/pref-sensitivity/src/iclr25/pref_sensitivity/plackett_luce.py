"""Plackett-Luce (PL) rankings and K-tuple choice sensitivities (numpy, torch-free).

A ranking ``pi`` of a tuple ``T`` has probability ``prod_t w_{pi_t} / sum_{u >= t} w_{pi_u}`` with
``w = exp(s)``; the top-1 ("K-tuple choice") probability is ``q(i | T) = w_i / sum_{m in T} w_m``.
Every pairwise marginal of PL is Bradley-Terry, ``P(i above j) = sigmoid(s_i - s_j)``.

K-tuples with a shared context ``C`` (``|C| = K - 1``; spec "Plackett-Luce / K-tuples"): with
``q_A = q(i | {i} u C)`` and ``q_B = q(j | {j} u C)``, ``w_i / W_C = q_A / (1 - q_A)`` and
``w_j / W_C = q_B / (1 - q_B)``, hence ``p_ij = g(q_A, 1 - q_B)``: the BT formula with the context
acting as one pivot option. For ``K = 2`` (``C = {k}``) this is exactly the BT triple.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, logit, logsumexp

from ._checks import EPS, check_probabilities, check_scores

__all__ = [
    "pl_log_prob",
    "pl_top1_prob",
    "pl_tuple_predict",
    "pl_tuple_sensitivity",
]


def _check_rankings(rankings, n: int, name: str = "rankings") -> np.ndarray:
    try:
        r = np.asarray(rankings)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected an integer array of item indices, got {rankings!r}") from e
    if r.size == 0 or r.ndim == 0:
        raise ValueError(f"{name}: expected shape (..., K) with K >= 2, got {r.shape}")
    if not np.issubdtype(r.dtype, np.integer):
        if np.issubdtype(r.dtype, np.floating) and np.all(r == np.round(r)):
            r = r.astype(np.int64)
        else:
            raise ValueError(f"{name}: item indices must be integers, got dtype {r.dtype}")
    if r.shape[-1] < 2:
        raise ValueError(f"{name}: a ranking needs at least 2 items, got K={r.shape[-1]}")
    bad = (r < 0) | (r >= n)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: item index {int(r[idx])} at {idx} is outside [0, {n - 1}]")
    srt = np.sort(r, axis=-1)
    dup = (srt[..., 1:] == srt[..., :-1]).any(axis=-1)
    if np.any(dup):
        idx = tuple(int(i) for i in np.argwhere(np.atleast_1d(dup))[0])
        raise ValueError(f"{name}: ranking {idx} lists an item twice; a ranking orders distinct items")
    return r


def pl_log_prob(scores, rankings, *, n_stages: int | None = None) -> np.ndarray:
    """Log-probability of rankings under Plackett-Luce (vectorised over rankings).

    Args:
        scores: ``(n,)`` float log-strengths ``s``.
        rankings: ``(..., K)`` int item indices, best first, distinct within a ranking.
        n_stages: number of choice stages counted (``1``: top-1 choice from the K-tuple;
            ``None``: the full ranking, ``K - 1`` stages; the last stage has probability 1).

    Returns:
        ``(...)`` float64 ``log P(ranking)``.

    Raises:
        ValueError: bad scores, indices outside ``[0, n)``, repeated items, ``K < 2``, or
            ``n_stages`` outside ``[1, K - 1]``.
    """
    s = check_scores(scores)
    r = _check_rankings(rankings, s.size)
    k = r.shape[-1]
    m = k - 1 if n_stages is None else int(n_stages)
    if not 1 <= m <= k - 1:
        raise ValueError(f"n_stages must be in [1, K-1] = [1, {k - 1}], got {n_stages}")
    sr = s[r]  # (..., K)
    # suffix log-sum-exp: lse[..., t] = log sum_{u >= t} exp(sr[..., u])
    lse = np.flip(np.logaddexp.accumulate(np.flip(sr, -1), axis=-1), -1)
    return (sr[..., :m] - lse[..., :m]).sum(-1)


def pl_top1_prob(scores, tuples) -> np.ndarray:
    """Top-1 choice probability ``q(t_0 | T) = w_{t_0} / sum_{m in T} w_m`` of the first item of each tuple.

    Args:
        scores: ``(n,)`` float log-strengths.
        tuples: ``(..., K)`` int, distinct items; the probability of the item in position 0 is returned.

    Returns:
        ``(...)`` float64 in (0, 1).
    """
    s = check_scores(scores)
    r = _check_rankings(tuples, s.size, "tuples")
    sr = s[r]
    return np.exp(sr[..., 0] - logsumexp(sr, axis=-1))


def pl_tuple_predict(q_a, q_b, *, eps: float = EPS) -> np.ndarray:
    """``p_ij`` implied by two K-tuple top-1 probabilities with a shared context ``C``.

    Args:
        q_a: ``(...)`` ``q(i | {i} u C)`` in (0, 1).
        q_b: ``(...)`` ``q(j | {j} u C)`` in (0, 1).

    Returns:
        ``(...)`` float64 ``P(i > j) = g(q_a, 1 - q_b) = sigmoid(logit q_a - logit q_b)``.
    """
    a = check_probabilities(q_a, "q_a", eps=eps)
    b = check_probabilities(q_b, "q_b", eps=eps)
    return expit(logit(a) - logit(b))


def pl_tuple_sensitivity(q_a, q_b, *, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
    """Partials of ``p_ij = g(q_a, 1 - q_b)`` w.r.t. the two K-tuple choice probabilities.

    The perturbation of ``q_a`` keeps the strength ratios inside the context fixed (spec,
    "Plackett-Luce / K-tuples"); this is Result 2 with ``a = q_a``, ``b = 1 - q_b``.

    Returns:
        ``(d p_ij / d q_a, d p_ij / d q_b)``: the first > 0, the second < 0, each ``(...)`` float64.
    """
    a = check_probabilities(q_a, "q_a", eps=eps)
    b = 1.0 - check_probabilities(q_b, "q_b", eps=eps)
    d = a * b + (1.0 - a) * (1.0 - b)
    d2 = d * d
    return b * (1.0 - b) / d2, -a * (1.0 - a) / d2
