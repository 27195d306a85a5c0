"""Meyerson's online facility-location sketch (step 1 of Algorithm 1).

An arriving point ``p`` (weight ``w``) opens a facility with probability ``min(1, w dist(p, F)^z / f)``;
otherwise it is attached to its nearest open facility. The facility cost ``f`` is a guess of
``OPT / k``; it is doubled (a new phase) whenever the phase's running cost (connection costs plus
``f`` per facility opened in the phase) exceeds ``gamma * k * f`` [paper: structure; design: the
constants and the initial guess, see the README].

The per-point decisions are sequential, but the implementation is vectorised: for the remaining points
of a batch it computes every opening probability at once, jumps to the first *event* (a facility opens,
or the phase cost crosses its threshold), updates the distances with one vector operation and continues.
Work is ``O(events x n x d)`` with ``events = facilities + doublings``, never a Python loop over points.
"""

from __future__ import annotations

import numpy as np

from ._validate import as_points, as_weights, check_finite_float, check_positive_int, check_z
from .lp import dist_z

__all__ = ["MeyersonSketch"]


class MeyersonSketch:
    """Online facility location (Meyerson 2001) with facility-cost doubling.

    Args:
        k: number of clusters the cost guess targets (``f ≈ OPT_k / (phi k)``).
        z: 1 or 2 (distances to the power ``z``).
        f: fixed initial facility cost; ``None`` = estimated from the first batch (a ``D^z`` seeding of
            ``k`` centres on it: ``f = cost / (phi k)``).
        doubling: double ``f`` when the phase cost exceeds ``gamma k f`` (set False to keep ``f`` fixed,
            e.g. for the limit tests ``f -> 0`` / ``f -> inf``).
        gamma: phase-cost factor ``gamma_M``.
        phi: divisor of the initial guess.
        seed: int or ``numpy.random.Generator``.

    Attributes:
        facilities: ``[F, d]`` opened facilities (in opening order).
        rho: ``[F]`` ring radius ``rho_a`` frozen when facility ``a`` opened:
            ``((C_run + c_hint) / (N_run + 1))^{1/z}`` with ``C_run``, ``N_run`` the running connection cost
            and weight so far and ``c_hint`` the first batch's average seeding cost [design].
        f: current facility cost.
        doublings: how many times ``f`` was doubled.
    """

    def __init__(self, k: int, z: int = 1, *, f: float | None = None, doubling: bool = True, gamma: float = 4.0,
                 phi: float = 1.0, seed=0):
        self.k = check_positive_int(k, "k")
        self.z = check_z(z)
        if f is not None:
            f = check_finite_float(f, "f")
            if f <= 0:
                raise ValueError(f"f must be > 0, got {f}")
        self.f = f
        self.doubling = bool(doubling)
        self.gamma = check_finite_float(gamma, "gamma")
        self.phi = check_finite_float(phi, "phi")
        if self.gamma <= 0 or self.phi <= 0:
            raise ValueError("gamma and phi must be > 0")
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self._fac = np.zeros((0, 0))
        self._nfac = 0
        self._rho = np.zeros(0)
        self.c_hint: float | None = None
        self.run_cost = 0.0
        self.run_weight = 0.0
        self.phase_cost = 0.0
        self.doublings = 0

    @property
    def facilities(self) -> np.ndarray:
        return self._fac[: self._nfac]

    @property
    def rho(self) -> np.ndarray:
        return self._rho[: self._nfac]

    @property
    def n_facilities(self) -> int:
        return self._nfac

    def _init_scale(self, X: np.ndarray, w: np.ndarray) -> None:
        from .clustering import dz_seeding
        from .weighted_set import WeightedSet

        n_pos = int((w > 0).sum())
        S = WeightedSet(X, w, np.zeros(len(X), np.int64), np.zeros(len(X)), 1)
        kk = min(self.k, n_pos)
        if kk >= 1:
            C = dz_seeding(S, kk, self.z, self.rng)
            cost = float(w @ dist_z(X, C, self.z).min(1))
        else:
            cost = 0.0
        tot = float(w.sum())
        if cost <= 0:  # all points coincide with the seeds: any positive scale works
            cost = 1.0
        self.c_hint = cost / max(tot, 1e-300)
        if self.f is None:
            self.f = cost / (self.phi * self.k)

    def _open(self, x: np.ndarray) -> None:
        if self._nfac == self._fac.shape[0]:
            cap = max(16, 2 * self._fac.shape[0])
            fac = np.zeros((cap, x.shape[0]))
            if self._nfac:
                fac[: self._nfac] = self._fac[: self._nfac]
            rho = np.zeros(cap)
            rho[: self._nfac] = self._rho[: self._nfac]
            self._fac, self._rho = fac, rho
        self._fac[self._nfac] = x
        avg = (self.run_cost + self.c_hint) / (self.run_weight + 1.0)
        self._rho[self._nfac] = avg ** (1.0 / self.z)
        self._nfac += 1

    def insert_many(self, X, weights=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Process a batch of points in order.

        Args:
            X: ``[n, d]`` float points (in arrival order).
            weights: ``[n]`` weights (default 1); a weighted point opens with probability
                ``min(1, w d^z / f)``.

        Returns:
            ``(assign [n] int64, dz [n] float64, opened [n] bool)``: each point's facility index (its own
            when it opened one), its ``dist^z`` to that facility at arrival, and whether it opened one.
        """
        X = as_points(X, "points", dim=self._fac.shape[1] if self._nfac else None)
        n = X.shape[0]
        w = as_weights(weights, n)
        assign = np.empty(n, np.int64)
        dz = np.zeros(n)
        opened = np.zeros(n, bool)
        if n == 0:
            return assign, dz, opened
        if self.c_hint is None:
            self._init_scale(X, w)
        U = self.rng.random(n)
        if self._nfac:
            Dall = dist_z(X, self.facilities, self.z)
            near = Dall.argmin(1)
            D = Dall[np.arange(n), near]
        else:
            near = np.full(n, -1, np.int64)
            D = np.full(n, np.inf)
        i = 0
        while i < n:
            f = self.f
            Dseg = D[i:]
            wseg = w[i:]
            with np.errstate(invalid="ignore", over="ignore"):
                prob = np.where(np.isinf(Dseg), 1.0, np.minimum(1.0, wseg * Dseg / f))
            opens = U[i:] < prob
            j_open = int(np.argmax(opens)) if opens.any() else n - i
            if self.doubling:
                head = (wseg * Dseg)[:j_open]
                thr = self.gamma * self.k * f - self.phase_cost
                csum = np.cumsum(head)
                cross = np.flatnonzero(csum > thr)
                j_cost = int(cross[0]) if cross.size else n
            else:
                j_cost = n
            if j_cost < j_open:
                end = i + j_cost + 1  # points i .. i + j_cost are attached, then f doubles
                self._attach(i, end, near, D, w, assign, dz)
                self.f *= 2.0
                self.doublings += 1
                self.phase_cost = 0.0
                i = end
                continue
            jo = i + j_open
            self._attach(i, jo, near, D, w, assign, dz)
            if jo >= n:
                break
            self._open(X[jo])
            a = self._nfac - 1
            assign[jo] = a
            dz[jo] = 0.0
            opened[jo] = True
            self.run_weight += w[jo]
            self.phase_cost += f
            if jo + 1 < n:
                dnew = dist_z(X[jo + 1:], X[jo][None], self.z)[:, 0]
                better = dnew < D[jo + 1:]
                D[jo + 1:][better] = dnew[better]
                near[jo + 1:][better] = a
            i = jo + 1
            if self.doubling and self.phase_cost > self.gamma * self.k * self.f:
                self.f *= 2.0
                self.doublings += 1
                self.phase_cost = 0.0
        return assign, dz, opened

    def _attach(self, i, j, near, D, w, assign, dz) -> None:
        if j <= i:
            return
        assign[i:j] = near[i:j]
        dz[i:j] = D[i:j]
        c = float(w[i:j] @ D[i:j])
        self.run_cost += c
        self.phase_cost += c
        self.run_weight += float(w[i:j].sum())

    def state(self) -> dict:
        """JSON-ready scalars (arrays are saved separately by :meth:`arrays`)."""
        return {"k": self.k, "z": self.z, "f": self.f, "doubling": self.doubling, "gamma": self.gamma,
                "phi": self.phi, "c_hint": self.c_hint, "run_cost": self.run_cost, "run_weight": self.run_weight,
                "phase_cost": self.phase_cost, "doublings": self.doublings}

    def arrays(self) -> dict[str, np.ndarray]:
        return {"facilities": self.facilities.copy(), "rho": self.rho.copy()}

    @classmethod
    def from_state(cls, state: dict, arrays: dict, rng: np.random.Generator) -> MeyersonSketch:
        m = cls(state["k"], state["z"], f=None, doubling=state["doubling"], gamma=state["gamma"], phi=state["phi"],
                seed=rng)
        m.f = state["f"]
        for key in ("c_hint", "run_cost", "run_weight", "phase_cost", "doublings"):
            setattr(m, key, state[key])
        fac = np.asarray(arrays["facilities"], dtype=np.float64)
        m._fac = fac.copy() if fac.size else np.zeros((0, 0))
        m._nfac = int(fac.shape[0]) if fac.size else 0
        m._rho = np.asarray(arrays["rho"], dtype=np.float64).copy()
        return m

