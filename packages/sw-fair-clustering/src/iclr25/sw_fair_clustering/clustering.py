"""Fair k-median / k-means on a weighted summary: weighted D^z seeding, Lloyd (z = 2) or Weiszfeld
k-median iterations (z = 1) for the centres, then the fair-assignment LP (spec "Offline fair solver on
the coreset", package default (a) + (b) [design])."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ._validate import check_k, check_positive_int, check_z
from .fairness import FairnessSpec
from .lp import FairAssignmentResult, dist_z, fair_assignment_lp
from .weighted_set import WeightedSet

__all__ = ["FairClusteringResult", "dz_seeding", "kclustering", "fair_kclustering", "fair_cost",
           "random_centers"]


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def dz_seeding(S: WeightedSet, k: int, z: int, seed=0) -> np.ndarray:
    """Weighted k-means++ (``D^z``) seeding: each new centre is a point drawn with probability
    ``∝ w_p · dist(p, C)^z``. Returns ``[k, d]`` centres (points of ``S``).

    Raises:
        ValueError: ``k`` larger than the number of points with positive weight.
    """
    z = check_z(z)
    pos = np.flatnonzero(S.weights > 0)
    k = check_k(k, int(pos.size), what="the point set")
    rng = _rng(seed)
    X, w = S.points, S.weights
    first = rng.choice(pos, p=w[pos] / w[pos].sum())
    C = [X[first]]
    D = dist_z(X, X[first][None], z)[:, 0]
    for _ in range(1, k):
        p = w * D
        tot = p.sum()
        if tot <= 0:  # every positive-weight point coincides with a centre: pick any unused one
            idx = rng.choice(pos)
        else:
            idx = rng.choice(X.shape[0], p=p / tot)
        C.append(X[idx])
        np.minimum(D, dist_z(X, X[idx][None], z)[:, 0], out=D)
    return np.array(C)


def _update_centers(X, w, C, lab, z, weiszfeld_steps: int = 3) -> np.ndarray:
    """One centre update: weighted means (z = 2) or weighted geometric medians by Weiszfeld steps
    warm-started at the current centres (z = 1). Clusters with no weight keep their centre."""
    k = C.shape[0]
    M = np.zeros((X.shape[0], k))
    M[np.arange(X.shape[0]), lab] = 1.0
    if z == 2:
        W = M.T @ w
        S = M.T @ (w[:, None] * X)
        ok = W > 0
        C = C.copy()
        C[ok] = S[ok] / W[ok, None]
        return C
    C = C.copy()
    for _ in range(weiszfeld_steps):
        d = np.sqrt(np.maximum(((X - C[lab]) ** 2).sum(1), 0.0))
        dmax = d.max(initial=0.0)
        coef = w / np.maximum(d, 1e-12 * dmax if dmax > 0 else 1.0)  # scale-free guard against d = 0
        W = M.T @ coef
        S = M.T @ (coef[:, None] * X)
        ok = W > 0
        C[ok] = S[ok] / W[ok, None]
    return C


def kclustering(S: WeightedSet, k: int, z: int = 1, *, seed=0, n_init: int = 3, max_iter: int = 30,
                tol: float = 1e-6) -> tuple[np.ndarray, float]:
    """Unconstrained weighted k-median (z = 1) / k-means (z = 2) on ``S``.

    ``n_init`` runs of D^z seeding followed by alternating nearest-centre assignment and centre updates
    (Lloyd means, or Weiszfeld geometric-median steps); the run with the lowest weighted cost wins.

    Returns:
        ``(centers [k, d] float64, cost)`` with ``cost = sum_p w_p min_i dist(p, c_i)^z``.
    """
    z = check_z(z)
    n_init = check_positive_int(n_init, "n_init")
    max_iter = check_positive_int(max_iter, "max_iter")
    rng = _rng(seed)
    best = (None, math.inf)
    X, w = S.points, S.weights
    for _ in range(n_init):
        C = dz_seeding(S, k, z, rng)
        prev = math.inf
        for _ in range(max_iter):
            D = dist_z(X, C, z)
            lab = D.argmin(1)
            cost = float(w @ D[np.arange(len(lab)), lab])
            if prev - cost <= tol * max(prev if math.isfinite(prev) else cost, 1e-300):
                break
            prev = cost
            C = _update_centers(X, w, C, lab, z)
        D = dist_z(X, C, z)
        cost = float(w @ D.min(1))
        if cost < best[1]:
            best = (C, cost)
    return best[0], best[1]


@dataclass
class FairClusteringResult:
    """Centres and the fair assignment on the set they were computed on.

    Attributes:
        centers: ``[k, d]`` float64.
        assignment: the fair-assignment LP result on the input set (status, cost, ``[m, k]`` plan).
        unconstrained_cost: nearest-centre cost of ``centers`` on the input set.
        seconds: wall time (clustering + LP).
    """

    centers: np.ndarray
    assignment: FairAssignmentResult
    unconstrained_cost: float
    seconds: float

    @property
    def status(self) -> str:
        return self.assignment.status

    @property
    def cost(self) -> float:
        return self.assignment.cost

    @property
    def plan(self):
        return self.assignment.plan


def fair_kclustering(S: WeightedSet, k: int, z: int = 1, fairness: FairnessSpec | None = None, *, seed=0,
                     n_init: int = 10, max_iter: int = 30, fair_iters: int = 0,
                     time_limit: float | None = None) -> FairClusteringResult:
    """Fair k-median / k-means on a weighted coloured set (e.g. a coreset).

    Centres from :func:`kclustering` (vanilla clustering, as in Bera et al. 2019), then the fair-assignment
    LP with those centres. With ``fair_iters > 0`` the centres are re-fitted to the LP's fractional plan
    and the LP re-solved that many times (a fair Lloyd refinement, off by default).

    Args:
        S: ``m`` weighted points.
        k: number of centres, ``1 <= k <=`` points with positive weight.
        z: 1 (k-median) or 2 (k-means).
        fairness: bounds; ``None`` = unconstrained.
        seed: int or ``numpy.random.Generator`` (seeding randomness).
        n_init: restarts of the vanilla clustering (the lowest-cost one is kept; 10 as in scikit-learn).
        max_iter: assignment/update rounds per restart.
        time_limit: seconds for each HiGHS solve.

    Returns:
        :class:`FairClusteringResult`; its ``status`` is the LP status (never ignored by callers).

    Raises:
        ValueError: bad ``k``/``z``, colour-count mismatch.
    """
    t0 = time.perf_counter()
    z = check_z(z)
    check_k(k, int((S.weights > 0).sum()), what="the point set")
    if fairness is not None and fairness.n_colors != S.n_colors:
        raise ValueError(f"the FairnessSpec has {fairness.n_colors} colours but the points have {S.n_colors}")
    C, ucost = kclustering(S, k, z, seed=seed, n_init=n_init, max_iter=max_iter)
    res = fair_assignment_lp(S, C, fairness, z, time_limit=time_limit)
    for _ in range(int(fair_iters)):
        if not res.optimal:
            break
        # fractional plan -> weights per (point, centre); update each centre on its weighted points
        Cn = C.copy()
        for i in range(k):
            wi = S.weights * res.plan[:, i]
            if wi.sum() <= 0:
                continue
            sub = WeightedSet(S.points, wi, S.colors, S.timestamps, S.n_colors)
            Cn[i] = _update_centers(sub.points, sub.weights, C[i:i + 1], np.zeros(len(S), int), z)[0]
        new = fair_assignment_lp(S, Cn, fairness, z, time_limit=time_limit)
        if not new.optimal or new.cost >= res.cost:
            break
        C, res = Cn, new
    D = dist_z(S.points, C, z)
    return FairClusteringResult(C, res, float(S.weights @ D.min(1)), time.perf_counter() - t0)


def fair_cost(S: WeightedSet, centers, fairness: FairnessSpec | None, z: int = 1, **kw) -> FairAssignmentResult:
    """``fcost(S, C)``: the LP-optimal fair assignment cost of ``S`` with centres ``C`` (spec metric (a)).

    Alias of :func:`fair_assignment_lp`; check ``.status`` before using ``.cost``.
    """
    return fair_assignment_lp(S, centers, fairness, z, **kw)


def random_centers(S: WeightedSet, k: int, n_sets: int, seed=0) -> list[np.ndarray]:
    """``n_sets`` centre sets of ``k`` distinct points of ``S`` drawn uniformly (spec metric (b))."""
    rng = _rng(seed)
    check_k(k, len(S), what="the point set")
    return [S.points[rng.choice(len(S), k, replace=False)] for _ in range(n_sets)]
