"""Input checks shared by the modules: every error names the field and the fix."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

__all__ = [
    "check_z",
    "check_k",
    "check_eps",
    "check_unit_interval",
    "check_positive_int",
    "check_finite_float",
    "as_points",
    "as_colors",
    "as_weights",
]


def check_z(z) -> int:
    """``z`` selects the objective: 1 = k-median, 2 = k-means (spec "Problem")."""
    if isinstance(z, bool) or not isinstance(z, Integral) or int(z) not in (1, 2):
        raise ValueError(f"z must be 1 (k-median) or 2 (k-means), got {z!r}")
    return int(z)


def check_k(k, n_points: int | None = None, *, what: str = "the window") -> int:
    """``k >= 1`` and, when ``n_points`` is given, ``k <= n_points``."""
    if isinstance(k, bool) or not isinstance(k, Integral) or int(k) < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if n_points is not None and int(k) > n_points:
        raise ValueError(f"k = {k} is larger than the {n_points} point(s) with positive weight in {what}; "
                         "use a smaller k or a longer window")
    return int(k)


def check_finite_float(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, Real) or not math.isfinite(float(x)):
        raise ValueError(f"{name} must be a finite number, got {x!r}")
    return float(x)


def check_eps(eps, name: str = "eps") -> float:
    """``eps`` in the open interval (0, 1) (the (1 + eps) relaxation)."""
    e = check_finite_float(eps, name)
    if not 0.0 < e < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {eps!r}")
    return e


def check_unit_interval(x, name: str) -> float:
    v = check_finite_float(x, name)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {x!r}")
    return v


def check_positive_int(x, name: str, *, minimum: int = 1) -> int:
    if isinstance(x, bool) or not isinstance(x, Integral) or int(x) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    return int(x)


def as_points(x, name: str = "points", *, dim: int | None = None, offset: int = 0,
              n_colors_given: int | None = None) -> np.ndarray:
    """``x`` as a C-contiguous float64 array ``[n, d]`` with finite entries.

    A 1-D ``x`` is one point. When the caller also has colours, ``n_colors_given`` (their number) makes a
    1-D ``x`` with more than one colour an error about ``x`` (not a colours-shape error).

    Raises:
        ValueError: wrong rank, a 1-D ``x`` with ``n_colors_given != 1``, a dimension different from
            ``dim``, NaN/inf (naming the first bad row, counted from ``offset``).
    """
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: not numeric ({e})") from None
    if a.ndim == 1:
        if n_colors_given is not None and n_colors_given != 1:
            raise ValueError(f"{name} is 1-D with shape {a.shape} (one point of dimension {a.shape[0]}) but "
                             f"{n_colors_given} colours were given; {name} must be [n, d]: for {n_colors_given} "
                             f"points of one feature pass {name}.reshape(-1, 1)")
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"{name} must be [n, d], got shape {a.shape}")
    if dim is not None and a.shape[0] and a.shape[1] != dim:
        raise ValueError(f"{name}: point dimension {a.shape[1]} differs from the earlier points' dimension {dim}")
    if a.size and not np.isfinite(a).all():
        bad = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ValueError(f"{name}: point {bad + offset} has a NaN or inf feature ({a[bad].tolist()}); "
                         "clean or impute the data first")
    return np.ascontiguousarray(a)


def as_colors(c, n: int, n_colors: int | None, name: str = "colors", *, offset: int = 0) -> np.ndarray:
    """Colours as int64 ``[n]`` in ``[0, n_colors)``."""
    a = np.asarray(c)
    if a.ndim == 0:
        a = a[None]
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integer colour indices (map string colours first, e.g. with "
                             f"load_csv/ColorMap), got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if n_colors is not None and a.size:
        bad = np.flatnonzero((a < 0) | (a >= n_colors))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{name}: colour index {int(a[i])} at point {i + offset} is outside [0, {n_colors}) "
                             f"(n_colors = {n_colors})")
    return a


def as_weights(w, n: int, name: str = "weights") -> np.ndarray:
    if w is None:
        return np.ones(n)
    a = np.asarray(w, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    if a.size and (not np.isfinite(a).all() or (a < 0).any()):
        raise ValueError(f"{name} must be finite and >= 0")
    return a
