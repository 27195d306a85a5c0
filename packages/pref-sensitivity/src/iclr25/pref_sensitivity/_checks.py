"""Input validation shared by the numpy modules: probabilities, scores, item indices."""

from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = ["ProbabilityClippedWarning", "EPS", "check_probabilities", "check_scores"]

#: Default clipping margin: probabilities are kept in ``[EPS, 1 - EPS]`` so that logits stay finite.
EPS = 1e-12


class ProbabilityClippedWarning(UserWarning):
    """A probability exactly 0 or 1 was clipped to ``[eps, 1 - eps]`` (its logit is infinite)."""


def check_probabilities(p, name: str, *, eps: float = EPS, allow_nan: bool = False) -> np.ndarray:
    """Validate probabilities and clip exact 0/1 to ``[eps, 1-eps]`` with a warning.

    Args:
        p: array-like of probabilities (any shape).
        name: the argument name used in error messages.
        eps: clipping margin, ``0 < eps < 0.5``.
        allow_nan: keep NaN entries (missing values) instead of raising.

    Returns:
        ``float64`` array of the same shape, in ``[eps, 1-eps]`` (NaN kept if allowed).

    Raises:
        ValueError: a value outside ``[0, 1]``, a NaN (unless ``allow_nan``), an infinite value,
            or a non-numeric input. The message names ``name``, the first bad index and value.
    """
    if not 0.0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5), got {eps}")
    try:
        a = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected numbers (probabilities in (0, 1)), got {p!r}") from e
    nan = np.isnan(a)
    if nan.any() and not allow_nan:
        idx = tuple(int(i) for i in np.argwhere(nan)[0])
        raise ValueError(f"{name}: NaN at index {idx}; give probabilities in (0, 1)")
    bad = ~nan & ((a < 0.0) | (a > 1.0))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}: value {float(a[idx]):g} at index {idx} is outside (0, 1); "
            "a preference probability P(i > j) must lie in (0, 1) (percentages? divide by 100)"
        )
    extreme = ~nan & ((a < eps) | (a > 1.0 - eps))
    if extreme.any():
        n = int(extreme.sum())
        warnings.warn(
            f"{name}: {n} value(s) at (or within {eps:g} of) 0 or 1 clipped to [{eps:g}, 1-{eps:g}] "
            "(a probability of exactly 0 or 1 has an infinite logit)",
            ProbabilityClippedWarning,
            stacklevel=3,
        )
        a = np.where(nan, a, np.clip(a, eps, 1.0 - eps))
    return a


def check_scores(scores, name: str = "scores") -> np.ndarray:
    """Validate a 1-D vector of finite real scores; returns it as ``float64``.

    Raises:
        ValueError: not 1-D, empty, or a non-finite entry (index named).
    """
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: expected a 1-D array of real numbers, got {scores!r}") from e
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array, got shape {s.shape}")
    bad = ~np.isfinite(s)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}: entry {i} is {s[i]}; scores (log-strengths) must be finite")
    return s


def check_lam(lam: float, field: str = "lam") -> float:
    """The one check of a sensitivity threshold used by every subcommand and scan: finite and > 0
    (every partial of p_ij is positive, so lambda <= 0 marks everything sensitive and means nothing).

    Raises:
        ValueError: naming ``field``.
    """
    v = float(lam)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{field}={lam!r}: lambda must be a finite threshold > 0")
    return v
