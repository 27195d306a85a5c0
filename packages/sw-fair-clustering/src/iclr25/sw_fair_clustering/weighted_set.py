"""A weighted coloured point set: the object every summary, window and baseline is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._validate import as_colors, as_points, as_weights, check_positive_int

__all__ = ["WeightedSet"]


@dataclass(frozen=True, eq=False)
class WeightedSet:
    """Points with weights, colours (protected groups) and timestamps (spec "Problem").

    Attributes:
        points: ``[m, d]`` float64.
        weights: ``[m]`` float64, ``>= 0`` (1 for raw points, coreset weights otherwise).
        colors: ``[m]`` int64 colour indices in ``[0, n_colors)``.
        timestamps: ``[m]`` float64 (arrival index for count-based windows, or the user's event time).
        n_colors: number of colours ``l`` (colours absent from the set still count).

    Build with :meth:`from_arrays` (validates) or :meth:`concat`.
    """

    points: np.ndarray
    weights: np.ndarray
    colors: np.ndarray
    timestamps: np.ndarray
    n_colors: int

    @classmethod
    def from_arrays(cls, points, colors, weights=None, timestamps=None, *, n_colors: int | None = None) -> WeightedSet:
        """Validate and build.

        Args:
            points: ``[m, d]`` finite floats.
            colors: ``[m]`` integer colour indices.
            weights: ``[m]`` finite ``>= 0`` (default 1).
            timestamps: ``[m]`` (default ``1..m``).
            n_colors: number of colours (default ``max(colors) + 1``).

        Raises:
            ValueError: NaN/inf, shape mismatch, colours outside ``[0, n_colors)``, negative weights.
        """
        X = as_points(points, n_colors_given=int(np.size(colors)))
        m = X.shape[0]
        if n_colors is None:
            c0 = np.asarray(colors)
            n_colors = int(c0.max()) + 1 if c0.size else 1
        n_colors = check_positive_int(n_colors, "n_colors")
        c = as_colors(colors, m, n_colors)
        w = as_weights(weights, m)
        t = np.arange(1, m + 1, dtype=np.float64) if timestamps is None else np.asarray(timestamps, dtype=np.float64)
        if t.shape != (m,):
            raise ValueError(f"timestamps must have shape ({m},), got {t.shape}")
        return cls(X, w, c, t, n_colors)

    def __post_init__(self) -> None:
        # The direct constructor is public: check the contract :meth:`from_arrays` builds (cheap, O(m)).
        X, w, c, t = self.points, self.weights, self.colors, self.timestamps
        if not all(isinstance(a, np.ndarray) for a in (X, w, c, t)):
            raise ValueError("WeightedSet: points, weights, colors and timestamps must be numpy arrays "
                             "(use WeightedSet.from_arrays to convert and check)")
        if X.ndim != 2:
            raise ValueError(f"WeightedSet: points must be [m, d], got shape {X.shape} "
                             "(use WeightedSet.from_arrays, which names the fix)")
        m = X.shape[0]
        for name, a in (("weights", w), ("colors", c), ("timestamps", t)):
            if a.shape != (m,):
                raise ValueError(f"WeightedSet: {name} must have shape ({m},), got {a.shape}")
        if m and (not np.isfinite(w).all() or (w < 0).any()):
            i = int(np.flatnonzero(~np.isfinite(w) | (w < 0))[0])
            raise ValueError(f"WeightedSet: weights must be finite and >= 0, got {w[i]!r} at point {i}")
        if m and (not np.issubdtype(c.dtype, np.integer) or c.min() < 0 or c.max() >= self.n_colors):
            raise ValueError(f"WeightedSet: colors must be integer indices in [0, {self.n_colors}), got dtype "
                             f"{c.dtype}, range [{c.min()}, {c.max()}]")

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    def total_weight(self) -> float:
        return float(self.weights.sum())

    def color_weights(self) -> np.ndarray:
        """``[n_colors]`` total weight per colour (0 for an absent colour)."""
        return np.bincount(self.colors, weights=self.weights, minlength=self.n_colors)[: self.n_colors]

    def subset(self, index) -> WeightedSet:
        """The points selected by a boolean mask or an index array (weights unchanged)."""
        return WeightedSet(self.points[index], self.weights[index], self.colors[index], self.timestamps[index],
                           self.n_colors)

    def with_weights(self, weights) -> WeightedSet:
        return WeightedSet(self.points, as_weights(weights, len(self)), self.colors, self.timestamps, self.n_colors)

    def scaled(self, a: float) -> WeightedSet:
        """All coordinates multiplied by ``a`` (used by the scaling-invariance tests)."""
        return WeightedSet(self.points * a, self.weights, self.colors, self.timestamps, self.n_colors)

    @classmethod
    def concat(cls, sets: Sequence[WeightedSet], *, n_colors: int | None = None, dim: int | None = None) -> WeightedSet:
        """Union of several sets (e.g. partition summaries merged at query time).

        Raises:
            ValueError: no sets and no ``dim``, or sets with different dimensions.
        """
        sets = list(sets)
        if not sets:
            if dim is None:
                raise ValueError("concat: no sets given (pass dim= to build an empty set)")
            return cls(np.zeros((0, dim)), np.zeros(0), np.zeros(0, np.int64), np.zeros(0), n_colors or 1)
        dims = {s.dim for s in sets if len(s)} or {sets[0].dim}
        if len(dims) > 1:
            raise ValueError(f"concat: the sets have different point dimensions {sorted(dims)}")
        nc = n_colors or max(s.n_colors for s in sets)
        return cls(np.concatenate([s.points.reshape(-1, next(iter(dims))) for s in sets]),
                   np.concatenate([s.weights for s in sets]), np.concatenate([s.colors for s in sets]),
                   np.concatenate([s.timestamps for s in sets]), nc)
