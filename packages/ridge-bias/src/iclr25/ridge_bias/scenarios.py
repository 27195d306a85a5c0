"""The spec's synthetic scenarios (S1-S3) and validation configurations (A-C) as :class:`MixtureSpec`.

All use ``w_1* = 1/sqrt(d)`` (all ones, unit norm) and ``u = (+1, -1, +1, ...)/sqrt(d)``.
"""

from __future__ import annotations

import numpy as np

from .theory import GroupSpec, MixtureSpec

__all__ = ["base_teacher", "alternating", "scenario", "SCENARIOS"]

SCENARIOS = ("s1", "s2", "s3", "A", "B", "C")


def base_teacher(d: int) -> np.ndarray:
    """``w_1* = (1, ..., 1)/sqrt(d)``, ``[d]``."""
    return np.ones(d) / np.sqrt(d)


def alternating(d: int) -> np.ndarray:
    """``u = (+1, -1, +1, ...)/sqrt(d)`` (orthogonal to ``w_1*`` for even ``d``), ``[d]``."""
    return np.where(np.arange(d) % 2 == 0, 1.0, -1.0) / np.sqrt(d)


def scenario(name: str, d: int | None = None, n: float | None = None, *, p2: float | None = None) -> MixtureSpec:
    """Build a named scenario.

    * ``s1`` (difficulty via covariance): ``Sigma_1 = I, Sigma_2 = 2I``, same teacher, ``p = (1/2, 1/2)``,
      ``sigma^2 = 0.1``; default ``d = 400, n = 800``.
    * ``s2`` (concept shift + minority): ``Sigma_1 = Sigma_2 = I``, ``w_2* = w_1*/2 + (sqrt 3/2) u``,
      ``p = (0.8, 0.2)``, ``sigma^2 = 0.1``; default ``d = 400, n = 800``.
    * ``s3`` (random projections): as ``s1`` with default ``d = 100, n = 200`` (sweep ``m``).
    * ``A``: ``Sigma_1 = I, Sigma_2 = diag(linspace(0.2, 1.8, d))``, same teacher, ``sigma^2 = (0.1, 0.5)``,
      ``p = (0.8, 0.2)``; ``B``: ``Sigma = I``, teachers ``(w_1*, w_2b)`` (second half negated),
      ``sigma^2 = 0.1``, ``p = (0.7, 0.3)``; ``C``: covariances of A, teachers of B, ``sigma^2 = 0.2``,
      ``p = (1/2, 1/2)``. Default ``d = 200, n = 400``.

    Args:
        name: one of :data:`SCENARIOS`.
        d, n: dimension and sample size (defaults above; ``n`` defaults to ``2 d``).
        p2: override the second group's proportion (``p_1 = 1 - p2``).

    Raises:
        ValueError: unknown name, ``d < 2``.
    """
    if name not in SCENARIOS:
        raise ValueError(f"scenario: unknown name {name!r}; choose from {SCENARIOS}")
    if d is None:
        d = {"s1": 400, "s2": 400, "s3": 100}.get(name, 200)
    if d < 2:
        raise ValueError(f"scenario: d must be >= 2, got {d}")
    n = 2 * d if n is None else n
    w1 = base_teacher(d)
    ones = np.ones(d)
    w2b = w1.copy()
    w2b[d // 2 :] *= -1
    spread = np.linspace(0.2, 1.8, d)
    if name in ("s1", "s3"):
        g = (GroupSpec(ones, w1, 0.1), GroupSpec(2 * ones, w1, 0.1))
        p = (0.5, 0.5)
    elif name == "s2":
        w2 = 0.5 * w1 + np.sqrt(3) / 2 * alternating(d)
        g = (GroupSpec(ones, w1, 0.1), GroupSpec(ones, w2, 0.1))
        p = (0.8, 0.2)
    elif name == "A":
        g = (GroupSpec(ones, w1, 0.1), GroupSpec(spread, w1, 0.5))
        p = (0.8, 0.2)
    elif name == "B":
        g = (GroupSpec(ones, w1, 0.1), GroupSpec(ones, w2b, 0.1))
        p = (0.7, 0.3)
    else:
        g = (GroupSpec(ones, w1, 0.2), GroupSpec(spread, w2b, 0.2))
        p = (0.5, 0.5)
    if p2 is not None:
        p = (1.0 - p2, p2)
    return MixtureSpec(g, p, n)
