"""Proportional fairness constraints (Bera et al. 2019) and exact-fairness feasibility.

Every cluster ``c`` must satisfy ``lower_j * w(c) <= w(c ∩ P_j) <= upper_j * w(c)`` for every colour
``j`` (spec "Problem" [paper]); the (1 + eps)-relaxed version uses ``(1 - eps) lower_j`` and
``(1 + eps) upper_j``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ._validate import as_weights, check_eps, check_finite_float, check_positive_int

__all__ = ["FairnessSpec", "exact_fair_feasible", "fairness_violations", "color_weight_error"]


@dataclass(frozen=True, eq=False)
class FairnessSpec:
    """Per-colour lower and upper ratio bounds.

    Attributes:
        lower: ``[l]`` float64 in ``[0, 1]``.
        upper: ``[l]`` float64 in ``[0, 1]``, ``lower <= upper`` elementwise.
        color_names: optional names for error messages.

    Raises:
        ValueError: shapes differ, a bound is NaN/inf or outside ``[0, 1]``, or ``lower > upper``
            (naming the colour).
    """

    lower: np.ndarray
    upper: np.ndarray
    color_names: tuple[str, ...] | None = field(default=None)

    def __post_init__(self):
        lo = np.atleast_1d(np.asarray(self.lower, dtype=np.float64))
        up = np.atleast_1d(np.asarray(self.upper, dtype=np.float64))
        if lo.ndim != 1 or lo.shape != up.shape or lo.size == 0:
            raise ValueError(f"FairnessSpec: lower and upper must be 1-D of equal length >= 1, got {lo.shape}, {up.shape}")
        for name, a in (("lower", lo), ("upper", up)):
            if not np.isfinite(a).all():
                raise ValueError(f"FairnessSpec: {name} bounds must be finite, got {a.tolist()}")
            bad = np.flatnonzero((a < 0) | (a > 1))
            if bad.size:
                j = int(bad[0])
                raise ValueError(f"FairnessSpec: {name}[{self._name(j)}] = {a[j]} is outside [0, 1]")
        bad = np.flatnonzero(lo > up)
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"FairnessSpec: lower[{self._name(j)}] = {lo[j]} > upper = {up[j]}; lower must be <= upper")
        if self.color_names is not None and len(self.color_names) != lo.size:
            raise ValueError(f"FairnessSpec: {len(self.color_names)} colour names for {lo.size} colours")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", up)

    def _name(self, j: int) -> str:
        if self.color_names is not None and j < len(self.color_names):
            return f"{j} ({self.color_names[j]!r})"
        return str(j)

    @property
    def n_colors(self) -> int:
        return int(self.lower.size)

    @classmethod
    def proportional(cls, colors, eta: float, *, n_colors: int | None = None, weights=None,
                     color_names: Sequence[str] | None = None) -> FairnessSpec:
        """Bounds from observed colour ratios ``r_j``: ``lower = r_j (1 - eta)``, ``upper = min(1, r_j / (1 - eta))``
        (spec "Hyperparameters", Bera et al.'s delta-parametrisation). An absent colour gets ``0/0``;
        ``eta = 1`` removes the constraint (``0/1``).

        Args:
            colors: ``[n]`` int colour indices (e.g. of the window).
            eta: slack in ``[0, 1]``; ``0`` = exactly the observed ratios.
            n_colors: number of colours (default ``max(colors) + 1``).
            weights: optional ``[n]`` weights (default 1).

        Raises:
            ValueError: ``eta`` not finite or outside ``[0, 1]``, empty ``colors``.
        """
        eta = check_finite_float(eta, "eta")
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"eta must be in [0, 1], got {eta}")
        c = np.asarray(colors).astype(np.int64)
        if c.size == 0:
            raise ValueError("FairnessSpec.proportional: no points to derive the colour ratios from")
        nc = check_positive_int(n_colors if n_colors is not None else int(c.max()) + 1, "n_colors")
        w = as_weights(weights, c.size)
        if (c < 0).any() or (c >= nc).any():
            raise ValueError(f"FairnessSpec.proportional: colours must be in [0, {nc})")
        cw = np.bincount(c, weights=w, minlength=nc)
        tot = cw.sum()
        if tot <= 0:
            raise ValueError("FairnessSpec.proportional: the points have zero total weight")
        r = cw / tot
        lower = r * (1.0 - eta)
        upper = np.ones(nc) if eta >= 1.0 else np.minimum(1.0, r / (1.0 - eta))
        upper = np.where(r == 0, 0.0 if eta < 1.0 else 1.0, upper)
        return cls(lower, upper, tuple(color_names) if color_names is not None else None)

    @classmethod
    def exact(cls, ratios, color_names: Sequence[str] | None = None) -> FairnessSpec:
        """``lower = upper = ratios`` (exact proportional fairness, e.g. ``[0.5, 0.5]`` = 1:1 balance)."""
        r = np.asarray(ratios, dtype=np.float64)
        return cls(r.copy(), r.copy(), tuple(color_names) if color_names is not None else None)

    @classmethod
    def unconstrained(cls, n_colors: int) -> FairnessSpec:
        return cls(np.zeros(n_colors), np.ones(n_colors))

    def relaxed(self, eps: float) -> FairnessSpec:
        """The (1 + eps)-relaxed bounds ``(1 - eps) lower``, ``min(1, (1 + eps) upper)`` (spec "Problem").

        Raises:
            ValueError: ``eps`` outside (0, 1).
        """
        e = check_eps(eps, "eps (relaxation)")
        return FairnessSpec(self.lower * (1.0 - e), np.minimum(1.0, self.upper * (1.0 + e)), self.color_names)

    def is_vacuous(self) -> bool:
        """True when no colour is constrained (all lower 0, upper 1)."""
        return bool(np.all(self.lower <= 0.0) and np.all(self.upper >= 1.0))

    def to_dict(self) -> dict:
        return {"lower": self.lower.tolist(), "upper": self.upper.tolist(),
                "color_names": list(self.color_names) if self.color_names else None}


def fairness_violations(color_weights, spec: FairnessSpec, *, tol: float = 1e-12) -> list[str]:
    """Why a set with these per-colour weights admits no fair (fractional or integral) clustering.

    A fair clustering exists iff every colour's overall share lies in ``[lower_j, upper_j]``: any fair
    clustering's clusters are within the bounds, so their union (a weighted average) is; conversely
    one cluster holding everything is fair. Empty list = feasible.

    Args:
        color_weights: ``[l]`` total weight per colour.
        spec: the bounds.
        tol: relative slack for float round-off.
    """
    cw = np.asarray(color_weights, dtype=np.float64)
    if cw.shape != (spec.n_colors,):
        raise ValueError(f"the set has {cw.size} colours but the FairnessSpec has {spec.n_colors}")
    tot = cw.sum()
    if tot <= 0:
        return ["the set has zero total weight"]
    share = cw / tot
    out = []
    if spec.lower.sum() > 1 + tol:
        out.append(f"the lower bounds sum to {spec.lower.sum():.6g} > 1")
    if spec.upper.sum() < 1 - tol:
        out.append(f"the upper bounds sum to {spec.upper.sum():.6g} < 1")
    for j in range(spec.n_colors):
        name = spec._name(j)
        if cw[j] <= 0 and spec.lower[j] > 0:
            out.append(f"colour {name} is absent (weight 0) but its lower bound is {spec.lower[j]:.6g} > 0")
        elif share[j] < spec.lower[j] - tol:
            out.append(f"colour {name} has share {share[j]:.6g} < lower bound {spec.lower[j]:.6g}")
        elif share[j] > spec.upper[j] + tol:
            out.append(f"colour {name} has share {share[j]:.6g} > upper bound {spec.upper[j]:.6g}")
    return out


def exact_fair_feasible(colors, spec: FairnessSpec, weights=None, *, tol: float = 1e-12) -> bool:
    """Whether the point set admits *any* clustering that satisfies ``spec`` exactly.

    This is the quantity behind the linear-space lower bound [paper]: it depends on the exact colour
    counts of the window, which change when a single point expires (spec known-answer test 2).

    Args:
        colors: ``[n]`` int colour indices.
        spec: the bounds (``spec.n_colors`` colours).
        weights: optional ``[n]`` weights.

    Returns:
        ``True`` iff every colour's share is within its bounds (see :func:`fairness_violations`).
    """
    c = np.asarray(colors).astype(np.int64)
    w = as_weights(weights, c.size)
    cw = np.bincount(c, weights=w, minlength=spec.n_colors)
    if cw.size > spec.n_colors:
        raise ValueError(f"colour index {int(c.max())} outside [0, {spec.n_colors})")
    return not fairness_violations(cw, spec, tol=tol)


def color_weight_error(summary_color_weights, true_color_counts) -> float:
    """Metric (c): ``max_j |w(S ∩ P_j) - |W ∩ P_j|| / |W ∩ P_j|`` over colours present in the window.

    Colours absent from the window are skipped (no division by zero); if the summary holds weight of a
    colour the window lacks, that is an unbounded error and ``inf`` is returned.
    """
    s = np.asarray(summary_color_weights, dtype=np.float64)
    t = np.asarray(true_color_counts, dtype=np.float64)
    present = t > 0
    if np.any(~present & (s > 0)):
        return float("inf")
    if not present.any():
        return 0.0
    return float(np.max(np.abs(s[present] - t[present]) / t[present]))
