"""Rewarding consistency between two iterations (CREAM §1.2 of the spec; paper Sec. 3, Eq. for C).

For one prompt with responses ``y_1..y_N``, the current reward ``r_t`` and the previous iteration's
reward ``r_{t-1}`` each rank the ``N`` responses. Ranks are *ordinal* (ties broken by response index,
as ``scipy.stats.rankdata(method="ordinal")``), so there are no ties and Kendall's tau is

    tau = (#concordant - #discordant) / (N (N - 1) / 2)  in [-1, 1],

and the consistency rate is ``C = (tau + 1) / 2`` in ``[0, 1]``. The Spearman variant scales
``rho = 1 - 6 sum d^2 / (N (N^2 - 1))`` the same way.

Everything here is keyed by prompt id (the official code re-associated values by position after
skipping prompts, which attached every later C to the wrong prompt; see the README) and vectorised
over prompts with numpy.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "ordinal_ranks",
    "kendall_tau_ordinal",
    "spearman_rho_ordinal",
    "kendall_consistency",
    "spearman_consistency",
    "consistency_rates",
    "consistency_summary",
    "kendall_tau_b",
]

log = logging.getLogger(__name__)


def _as_array(x: Any, name: str) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (the N responses), got a scalar")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf; every response needs a finite score")
    return a


def ordinal_ranks(scores: Any) -> np.ndarray:
    """Ordinal ranks 1..N along the last axis, ties broken by position (first index = lower rank).

    Equal to ``scipy.stats.rankdata(scores, method="ordinal", axis=-1)``.

    Args:
        scores: ``(..., N)`` float (numpy array, list or torch tensor) — one score per response.

    Returns:
        ``(..., N)`` int64 ranks; the smallest score gets rank 1.

    Raises:
        ValueError: a scalar input, or NaN/inf scores.
    """
    a = _as_array(scores, "scores")
    order = np.argsort(a, axis=-1, kind="stable")
    return (np.argsort(order, axis=-1, kind="stable") + 1).astype(np.int64)  # inverse permutation


def _pair_signs(a: np.ndarray) -> np.ndarray:
    """``sign(a_i - a_j)`` for ``i < j`` along the last axis: ``(..., N(N-1)/2)``."""
    n = a.shape[-1]
    i, j = np.triu_indices(n, k=1)
    return np.sign(a[..., i] - a[..., j])


def kendall_tau_ordinal(scores_a: Any, scores_b: Any) -> np.ndarray:
    """Kendall's tau between the *ordinal* rankings of two score vectors (no ties by construction).

    Args:
        scores_a, scores_b: ``(..., N)`` float, ``N >= 2``, the same shape.

    Returns:
        ``(...)`` float64 tau in ``[-1, 1]`` (a 0-d array for 1-d inputs).

    Raises:
        ValueError: shape mismatch, ``N < 2``, non-finite scores.
    """
    a, b = _as_array(scores_a, "scores_a"), _as_array(scores_b, "scores_b")
    if a.shape != b.shape:
        raise ValueError(f"score shapes differ: {a.shape} vs {b.shape}")
    n = a.shape[-1]
    if n < 2:
        raise ValueError(f"consistency needs at least 2 responses per prompt, got N={n}")
    sa, sb = _pair_signs(ordinal_ranks(a)), _pair_signs(ordinal_ranks(b))
    return (sa * sb).sum(-1) / (n * (n - 1) / 2)


def spearman_rho_ordinal(scores_a: Any, scores_b: Any) -> np.ndarray:
    """Spearman's rho between ordinal rankings: ``1 - 6 sum d^2 / (N (N^2 - 1))``. Shapes as
    :func:`kendall_tau_ordinal`."""
    a, b = _as_array(scores_a, "scores_a"), _as_array(scores_b, "scores_b")
    if a.shape != b.shape:
        raise ValueError(f"score shapes differ: {a.shape} vs {b.shape}")
    n = a.shape[-1]
    if n < 2:
        raise ValueError(f"consistency needs at least 2 responses per prompt, got N={n}")
    d = (ordinal_ranks(a) - ordinal_ranks(b)).astype(np.float64)
    return 1.0 - 6.0 * (d * d).sum(-1) / (n * (n * n - 1))


def kendall_consistency(scores_a: Any, scores_b: Any) -> float | np.ndarray:
    """CREAM's consistency rate ``C = (tau + 1) / 2`` on ordinal ranks.

    Identical rankings give 1, reversed ones 0; ``(1,2,3)`` vs ``(2,1,3)`` gives 2/3. All-equal
    scores rank as ``(1..N)`` (ties by index), so they are fully consistent with any increasing
    vector — where ``scipy.stats.kendalltau`` on the raw tied values would return NaN.

    Args:
        scores_a, scores_b: ``(N,)`` or ``(P, N)`` float.

    Returns:
        A float for 1-d inputs, else ``(P,)`` float64 in ``[0, 1]``.
    """
    c = (kendall_tau_ordinal(scores_a, scores_b) + 1.0) / 2.0
    return float(c) if np.ndim(c) == 0 else c


def spearman_consistency(scores_a: Any, scores_b: Any) -> float | np.ndarray:
    """``(rho + 1) / 2`` on ordinal ranks (the official code's Spearman option). As
    :func:`kendall_consistency`."""
    c = (spearman_rho_ordinal(scores_a, scores_b) + 1.0) / 2.0
    return float(c) if np.ndim(c) == 0 else c


def consistency_rates(rewards_cur: Mapping[Hashable, Sequence[float]],
                      rewards_prev: Mapping[Hashable, Sequence[float]],
                      method: Literal["kendall", "spearman"] = "kendall", *,
                      min_prompts: int = 2) -> dict[Hashable, float]:
    """Per-prompt consistency ``C_j`` between the current and the previous iteration's rewards.

    Keyed by prompt id: a prompt is skipped (and logged) when it is missing from ``rewards_prev``
    or its two reward vectors have different lengths; every other prompt keeps its own value, so
    skipping never shifts C onto another prompt (the official ``zip`` misalignment).

    Args:
        rewards_cur: ``{id: (N,) rewards under r_t}``.
        rewards_prev: ``{id: (N,) rewards under r_{t-1}}`` (same response order).
        method: ``"kendall"`` (the paper) or ``"spearman"``.
        min_prompts: the fewest prompts with a value before this is an error (the set-level mean
            and its spread need two; the official code crashed inside ``statistics.stdev``).

    Returns:
        ``{id: C_j}`` in the order of ``rewards_cur``, values in ``[0, 1]``.

    Raises:
        ValueError: an unknown method, a prompt with fewer than 2 responses, non-finite rewards,
            or fewer than ``min_prompts`` prompts with a value (the message gives the counts).
    """
    if method not in ("kendall", "spearman"):
        raise ValueError(f"method must be 'kendall' or 'spearman', got {method!r}")
    fn = kendall_consistency if method == "kendall" else spearman_consistency
    groups: dict[int, list[Hashable]] = {}
    missing, mismatched = [], []
    for pid, cur in rewards_cur.items():
        prev = rewards_prev.get(pid)
        if prev is None:
            missing.append(pid)
            continue
        n_cur, n_prev = len(cur), len(prev)
        if n_cur != n_prev:
            mismatched.append(pid)
            continue
        if n_cur < 2:
            raise ValueError(f"prompt {pid!r}: {n_cur} reward(s); consistency needs at least 2 responses")
        groups.setdefault(n_cur, []).append(pid)
    if missing or mismatched:
        log.warning("consistency: skipped %d prompt(s) missing from the previous rewards (first: %r) and "
                    "%d with a different number of rewards (first: %r); they get no C_j (dyn mode fills "
                    "the set mean)", len(missing), missing[0] if missing else None, len(mismatched),
                    mismatched[0] if mismatched else None)
    values: dict[Hashable, float] = {}
    for ids in groups.values():  # vectorised per response count
        cur = np.stack([_as_array(rewards_cur[i], f"rewards_cur[{i!r}]") for i in ids])
        prev = np.stack([_as_array(rewards_prev[i], f"rewards_prev[{i!r}]") for i in ids])
        for pid, c in zip(ids, np.atleast_1d(fn(cur, prev))):
            values[pid] = float(c)
    if len(values) < min_prompts:
        raise ValueError(f"consistency needs at least {min_prompts} prompts with rewards in both iterations; "
                         f"got {len(values)} (of {len(rewards_cur)} current; {len(missing)} missing from the "
                         f"previous rewards, {len(mismatched)} with mismatched lengths)")
    return {pid: values[pid] for pid in rewards_cur if pid in values}


def consistency_summary(rates: Mapping[Hashable, float]) -> dict[str, float]:
    """Mean, sample standard deviation, min and max of per-prompt consistency rates.

    Raises:
        ValueError: fewer than 2 rates (a standard deviation needs two values).
    """
    v = np.asarray(list(rates.values()), dtype=np.float64)
    if len(v) < 2:
        raise ValueError(f"a consistency summary needs at least 2 prompts with a value, got {len(v)}")
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)), "min": float(v.min()),
            "max": float(v.max()), "n": int(len(v))}


def kendall_tau_b(x: Any, y: Any) -> np.ndarray:
    """Kendall's tau-b between raw scores (ties allowed), row-wise; NaN where a row is constant.

    Used for the "gt-tau" diagnostic (self-reward vs true utility). Equal to
    ``scipy.stats.kendalltau(x, y).statistic`` (variant ``"b"``) for each row.

    Args:
        x, y: ``(..., N)`` float, the same shape, ``N >= 2``.

    Returns:
        ``(...)`` float64 in ``[-1, 1]`` or NaN.
    """
    a, b = _as_array(x, "x"), _as_array(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    n = a.shape[-1]
    if n < 2:
        raise ValueError(f"tau needs at least 2 values per row, got N={n}")
    sa, sb = _pair_signs(a), _pair_signs(b)
    s = (sa * sb).sum(-1)
    n0 = n * (n - 1) / 2
    denom = np.sqrt((n0 - (sa == 0).sum(-1)) * (n0 - (sb == 0).sum(-1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(denom > 0, s / np.where(denom > 0, denom, 1.0), np.nan)
    return tau
