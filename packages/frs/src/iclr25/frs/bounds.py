"""Confidence bounds, the certified radius and the sample-size checks (Theorem 1, Corollary 1).

All functions here are pure (numpy / scipy) and independent of any model.

* :func:`clopper_pearson_lower` — the one-sided Clopper–Pearson lower confidence bound of p_A
  from k of N votes [paper: "Clopper–Pearson"].
* :func:`certified_radius` — ``R_r = ln(1 − (p_A − p_B)/2) / (L ln ω)`` [reconstructed from the
  sources: a trigger of R_r·L tokens, each randomised with probability ω, survives whole with
  probability Δ = 1 − ω^{R_r·L}; the smoothed prediction cannot change while p_A − Δ > p_B + Δ].
* :func:`radius_ratio` — Corollary 1: ``R_new / R_old = ln ω_M / ln ω_H`` at equal p_A, p_B.
* :func:`check_num_votes` — the warning that N = K·n votes are too few for α: one dissenting vote
  already forces abstention (``CP(N−1, N, α) ≤ 1/2``), or even unanimous votes cannot certify
  (``α^{1/N} ≤ 1/2``) so every text abstains (locuslab/smoothing #8).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = [
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "certified_radius",
    "certified_edits",
    "segment_radius_tokens",
    "radius_ratio",
    "min_votes_one_dissent",
    "min_votes_unanimous",
    "check_num_votes",
    "FewVotesWarning",
    "NoCertificatePossibleWarning",
    "check_alpha",
]


class FewVotesWarning(UserWarning):
    """N = K·n votes are so few that one dissenting vote forces abstention at this α."""


class NoCertificatePossibleWarning(FewVotesWarning):
    """N = K·n votes are so few that even unanimous votes cannot certify: every text abstains."""


def check_alpha(alpha: float, name: str = "alpha") -> float:
    """Return ``float(alpha)`` or raise ``ValueError`` unless it is finite and in (0, 1)."""
    a = float(alpha)
    if not math.isfinite(a) or not 0.0 < a < 1.0:
        raise ValueError(f"{name} must be in (0, 1) (a one-sided error level such as 0.05), got {alpha!r}")
    return a


def _check_counts(k, n) -> tuple[np.ndarray, np.ndarray]:
    k_arr, n_arr = np.asarray(k), np.asarray(n)
    if not (np.issubdtype(k_arr.dtype, np.integer) or np.all(np.mod(k_arr, 1) == 0)):
        raise ValueError(f"k (number of votes) must be integers, got {k!r}")
    if np.any(n_arr < 1):
        raise ValueError(f"n (number of votes N) must be >= 1, got {n!r}")
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise ValueError(f"k must be in [0, N]; got k={k!r}, N={n!r}")
    return k_arr.astype(np.int64), n_arr.astype(np.int64)


def clopper_pearson_lower(k: int | np.ndarray, n: int | np.ndarray, alpha: float = 0.05) -> float | np.ndarray:
    """One-sided (1 − α) Clopper–Pearson lower bound on a binomial proportion.

    ``P(p >= bound) >= 1 − α`` for k successes out of n trials: ``bound = Beta.ppf(α; k, n − k + 1)``
    (0 when k = 0). With unanimous votes (k = n) it equals ``α ** (1/n)``.

    Args:
        k: number of votes for the top class (int or integer array).
        n: total number of votes N = K·n_random (int or array broadcastable with k).
        alpha: one-sided error level in (0, 1).

    Returns:
        float (or float64 array) in [0, 1].

    Raises:
        ValueError: alpha outside (0, 1), n < 1, or k outside [0, n].
    """
    from scipy.stats import beta

    alpha = check_alpha(alpha)
    k_arr, n_arr = _check_counts(k, n)
    with np.errstate(all="ignore"):
        out = np.where(k_arr == 0, 0.0, beta.ppf(alpha, np.maximum(k_arr, 1), n_arr - k_arr + 1))
    out = np.asarray(out, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def clopper_pearson_upper(k: int | np.ndarray, n: int | np.ndarray, alpha: float = 0.05) -> float | np.ndarray:
    """One-sided (1 − α) Clopper–Pearson upper bound: ``Beta.ppf(1 − α; k + 1, n − k)`` (1 when k = n)."""
    from scipy.stats import beta

    alpha = check_alpha(alpha)
    k_arr, n_arr = _check_counts(k, n)
    with np.errstate(all="ignore"):
        out = np.where(k_arr == n_arr, 1.0, beta.ppf(1 - alpha, k_arr + 1, np.maximum(n_arr - k_arr, 1)))
    out = np.asarray(out, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


def _check_prob(p, name: str) -> np.ndarray:
    arr = np.asarray(p, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return arr


def certified_radius(p_a: float | np.ndarray, p_b: float | np.ndarray, w: float | np.ndarray,
                     length: int | np.ndarray) -> float | np.ndarray:
    """Certified radius as a fraction of the text length (Theorem 1, reconstructed).

    ``R_r = ln(1 − (p_A − p_B)/2) / (L · ln ω)`` when p_A > p_B, else 0. ``R_r · L`` is the radius in
    edited tokens: a trigger of fewer than ``R_r · L`` tokens, each randomised with probability ω,
    cannot change the smoothed prediction.

    Args:
        p_a: lower confidence bound of the top-class probability (in [0, 1]).
        p_b: upper bound of the runner-up probability (in [0, 1]; the spec uses ``1 − p_a``).
        w: per-token randomisation probability ω in (0, 1) (ω_H for FRS inside T(x'), ω_M uniform).
        length: text length L in tokens (>= 1).

    Returns:
        float (or float64 array) >= 0: the radius as a fraction of L.

    Raises:
        ValueError: p_a or p_b outside [0, 1], p_a + p_b > 1, ω outside (0, 1), or L < 1.
    """
    pa, pb = _check_prob(p_a, "p_a"), _check_prob(p_b, "p_b")
    if np.any(pa + pb > 1.0 + 1e-12):
        raise ValueError(f"p_a + p_b must be <= 1 (they are probabilities of two different classes), "
                         f"got p_a={p_a!r}, p_b={p_b!r}")
    w_arr = np.asarray(w, dtype=np.float64)
    if np.any(~np.isfinite(w_arr)) or np.any(w_arr <= 0) or np.any(w_arr >= 1):
        raise ValueError(f"w (randomisation probability omega) must be in (0, 1), got {w!r}")
    L = np.asarray(length)
    if np.any(L < 1) or np.any(np.mod(L, 1) != 0):
        raise ValueError(f"length (L, tokens) must be an integer >= 1, got {length!r}")
    L = L.astype(np.float64)
    gap = np.clip(pa - pb, 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(gap > 0, np.log1p(-gap / 2.0) / (L * np.log(w_arr)), 0.0)
    r = np.asarray(r, dtype=np.float64) + 0.0  # -0.0 -> 0.0
    return float(r) if r.ndim == 0 else r


def segment_radius_tokens(p_a: float, p_b: float, w_in: float, w_out: float, seg_len: int, length: int) -> float:
    """The conditional radius in edited tokens when the vulnerable area T(x') has ``seg_len`` tokens [design].

    The radius ``ln(1 − (p_A − p_B)/2) / ln ω_H`` assumes every trigger token lies in T(x') and so is
    randomised with ω_H; a trigger longer than |T| cannot. Its first |T| tokens get ω_in, the others
    ω_out (ω_L), so the trigger survives whole with probability ``1 − ω_in^{min(m,|T|)} ω_out^{max(0,m−|T|)}``
    and the largest m with that below ``(p_A − p_B)/2`` is::

        m = ln(1 − gap/2) / ln ω_in                                   if that is <= |T|
        m = |T| + (ln(1 − gap/2) − |T| ln ω_in) / ln ω_out            otherwise (|T| when ω_out = 0)

    capped at L. Equals ``certified_radius(p_a, p_b, w_in, L) · L`` whenever that is at most |T|.

    Raises:
        ValueError: as :func:`certified_radius`, or ``seg_len`` outside [1, L], ω_out outside [0, 1).
    """
    m = float(certified_radius(p_a, p_b, w_in, length)) * int(length)
    if int(seg_len) != seg_len or not 1 <= seg_len <= length:
        raise ValueError(f"seg_len (|T|) must be an integer in [1, L={length}], got {seg_len!r}")
    if not (math.isfinite(w_out) and 0.0 <= w_out < 1.0):
        raise ValueError(f"w_out (omega_L) must be in [0, 1), got {w_out!r}")
    if m <= seg_len:
        return m
    if w_out == 0.0:
        return float(seg_len)
    rest = math.log1p(-(p_a - p_b) / 2.0) - seg_len * math.log(w_in)
    return float(min(seg_len + rest / math.log(w_out), length))


def certified_edits(radius: float | np.ndarray, length: int | np.ndarray) -> int | np.ndarray:
    """The largest integer number of edited tokens m with m < R_r · L (the strict inequality of the
    certificate): ``ceil(R_r·L) − 1`` for R_r·L > 0, else 0."""
    rl = np.asarray(radius, dtype=np.float64) * np.asarray(length, dtype=np.float64)
    out = np.where(rl > 0, np.ceil(rl - 1e-12) - 1, 0).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def radius_ratio(w_mid: float, w_high: float) -> float:
    """Corollary 1: ``R_r(ω_H) / R_r(ω_M) = ln ω_M / ln ω_H`` at equal p_A, p_B and L.

    Raises:
        ValueError: unless 0 < ω_M < 1 and 0 < ω_H < 1.
    """
    for name, v in (("w_mid", w_mid), ("w_high", w_high)):
        if not (math.isfinite(v) and 0 < v < 1):
            raise ValueError(f"{name} must be in (0, 1), got {v!r}")
    return math.log(w_mid) / math.log(w_high)


def min_votes_unanimous(alpha: float) -> int:
    """Smallest N for which N unanimous votes certify: ``α^{1/N} > 1/2``, i.e. N > ln α / ln ½."""
    alpha = check_alpha(alpha)
    n = math.floor(math.log(alpha) / math.log(0.5)) + 1
    while alpha ** (1.0 / n) <= 0.5:  # guard against rounding at exact powers of 2
        n += 1
    return int(n)


def min_votes_one_dissent(alpha: float) -> int:
    """Smallest N for which N − 1 of N votes still certify: ``CP_lower(N − 1, N, α) > 1/2``.

    (N < 8 at α = 0.05, N < 11 at 0.01, N < 14 at 0.001 force abstention on one dissent.)
    """
    alpha = check_alpha(alpha)
    n = max(2, min_votes_unanimous(alpha))
    while clopper_pearson_lower(n - 1, n, alpha) <= 0.5:
        n += 1
    return n


def check_num_votes(num_votes: int, alpha: float, *, stacklevel: int = 2, classes: int = 1) -> str | None:
    """Warn when N votes are too few for α; return the warning text (``None`` if fine).

    The bound is taken at level ``α / classes`` (``classes`` = C for the Bonferroni bound of
    :func:`~iclr25.frs.certification.certify`; 1 for a plain bound).

    * ``NoCertificatePossibleWarning`` when ``(α/C)^{1/N} ≤ 1/2``: even unanimous votes give a lower
      bound ≤ 1/2, so **every text abstains** (N < 5 at level 0.05, N < 10 at 0.001).
    * ``FewVotesWarning`` otherwise when ``CP(N−1, N, α/C) ≤ 1/2``: a single dissenting vote forces
      abstention (N < 8 at level 0.05, N < 11 at 0.01, N < 14 at 0.001).

    Raises:
        ValueError: num_votes < 1, alpha outside (0, 1) or classes < 1.
    """
    alpha = check_alpha(alpha)
    if int(num_votes) != num_votes or num_votes < 1:
        raise ValueError(f"number of votes N must be an integer >= 1, got {num_votes!r}")
    if int(classes) != classes or classes < 1:
        raise ValueError(f"classes must be an integer >= 1, got {classes!r}")
    level = alpha / classes
    at = f"alpha = {alpha:g}" + (f" (bound at alpha/C = {level:g}, C = {classes} classes)" if classes > 1 else "")
    n_min0, n_min1 = min_votes_unanimous(level), min_votes_one_dissent(level)
    if num_votes < n_min0:
        msg = (f"N = {num_votes} votes at {at}: even unanimous votes give a "
               f"Clopper-Pearson lower bound {level ** (1 / num_votes):.4f} <= 1/2, so EVERY text abstains; "
               f"use N >= {n_min0} (N >= {n_min1} to tolerate one dissenting vote)")
        warnings.warn(msg, NoCertificatePossibleWarning, stacklevel=stacklevel)
        return msg
    if num_votes < n_min1:
        msg = (f"N = {num_votes} votes at {at}: one dissenting vote already forces "
               f"abstention (lower bound {clopper_pearson_lower(num_votes - 1, num_votes, level):.4f} <= 1/2); "
               f"use N >= {n_min1}")
        warnings.warn(msg, FewVotesWarning, stacklevel=stacklevel)
        return msg
    return None
