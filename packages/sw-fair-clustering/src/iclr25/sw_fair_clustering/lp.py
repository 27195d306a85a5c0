"""The fair-assignment LP (Bera et al. 2019) on scipy's HiGHS, with its solver status.

``min sum_{p,i} x_pi w_p dist(p, c_i)^z``  s.t.  ``sum_i x_pi = 1``, ``x >= 0`` and, for every centre ``i``
and colour ``j``: ``lower_j sum_p w_p x_pi <= sum_{p in P_j} w_p x_pi <= upper_j sum_p w_p x_pi``
(spec "Offline fair solver on the coreset" (b)).

The status is part of every result: a solve that is not ``"optimal"`` carries ``cost = nan`` and
``plan = None`` so that it can never be used as if it were optimal.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ._validate import check_z
from .fairness import FairnessSpec, fairness_violations
from .weighted_set import WeightedSet

__all__ = ["FairAssignmentResult", "fair_assignment_lp", "dist_z", "nearest_cost", "round_plan",
           "plan_violation", "STATUSES"]

STATUSES = ("optimal", "infeasible", "iteration_limit", "time_limit", "numerical", "unbounded", "error")
"""Possible values of :attr:`FairAssignmentResult.status`."""


def dist_z(X: np.ndarray, C: np.ndarray, z: int) -> np.ndarray:
    """``[m, k]`` float64 matrix of ``dist(x_p, c_i)^z`` (Euclidean; ``z = 2`` squared distances).

    Vectorised via ``|x|^2 + |c|^2 - 2 x.c`` (clipped at 0).
    """
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    sq = (X * X).sum(1)[:, None] + (C * C).sum(1)[None, :] - 2.0 * (X @ C.T)
    np.maximum(sq, 0.0, out=sq)
    return sq if z == 2 else np.sqrt(sq, out=sq)


def nearest_cost(S: WeightedSet, C: np.ndarray, z: int) -> float:
    """Unconstrained cost ``sum_p w_p min_i dist(p, c_i)^z`` (no fairness)."""
    return float(S.weights @ dist_z(S.points, C, z).min(axis=1))


@dataclass
class FairAssignmentResult:
    """Outcome of one fair-assignment LP.

    Attributes:
        status: one of :data:`STATUSES`; only ``"optimal"`` results carry a cost and a plan.
        cost: ``sum w_p d^z x_pi`` of the optimal plan (``nan`` unless optimal).
        plan: ``[m, k]`` float64 fractional assignment (rows sum to 1), ``None`` unless optimal.
        message: the solver's message (and, for an infeasible problem, the bounds that cannot be met).
        violations: for ``"infeasible"``: which colours' shares fall outside their bounds.
        seconds: wall time of the solve.
        n_fractional: points whose plan row is not 0/1 (Bera et al.'s rounding touches only these).
    """

    status: str
    cost: float = math.nan
    plan: np.ndarray | None = None
    message: str = ""
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    n_fractional: int = 0

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    def to_dict(self) -> dict:
        return {"status": self.status, "cost": None if not math.isfinite(self.cost) else self.cost,
                "message": self.message, "violations": self.violations, "seconds": self.seconds,
                "n_fractional": self.n_fractional}


_SCIPY_STATUS = {0: "optimal", 1: "iteration_limit", 2: "infeasible", 3: "unbounded", 4: "numerical"}


def fair_assignment_lp(S: WeightedSet, centers, fairness: FairnessSpec | None, z: int = 1, *,
                       time_limit: float | None = None, precomputed_dist: np.ndarray | None = None) -> FairAssignmentResult:
    """Solve the fair-assignment LP for fixed centres (HiGHS via ``scipy.optimize.linprog``).

    Args:
        S: the weighted coloured points (``m`` points, ``S.n_colors`` colours ``l``).
        centers: ``[k, d]`` float centres.
        fairness: the bounds (``l`` colours) or ``None`` for the unconstrained nearest-centre
            assignment (solved in closed form). A spec with vacuous bounds still goes through HiGHS.
        z: 1 (k-median) or 2 (k-means).
        time_limit: seconds for HiGHS (``None``: no limit); hitting it gives ``status="time_limit"``.
        precomputed_dist: optional ``[m, k]`` ``dist^z`` matrix (saves recomputing it).

    Returns:
        :class:`FairAssignmentResult` (status, cost, ``[m, k]`` plan, message, violations).

    Raises:
        ValueError: ``z`` not in {1, 2}, centres of the wrong dimension, colour count mismatch, empty set.
    """
    z = check_z(z)
    C = np.asarray(centers, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] < 1:
        raise ValueError(f"centers must be [k, d] with k >= 1, got shape {C.shape}")
    if len(S) == 0:
        raise ValueError("fair_assignment_lp: the point set is empty")
    if C.shape[1] != S.dim:
        raise ValueError(f"centers have dimension {C.shape[1]} but the points have {S.dim}")
    if not np.isfinite(C).all():
        raise ValueError("centers contain NaN or inf")
    if fairness is not None and fairness.n_colors != S.n_colors:
        raise ValueError(f"the FairnessSpec has {fairness.n_colors} colours but the points have n_colors = {S.n_colors}")
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive finite number of seconds, got {time_limit}")
    t0 = time.perf_counter()
    m, k = len(S), C.shape[0]
    D = dist_z(S.points, C, z) if precomputed_dist is None else precomputed_dist
    w = S.weights
    if fairness is None:
        lab = D.argmin(axis=1)
        plan = np.zeros((m, k))
        plan[np.arange(m), lab] = 1.0
        return FairAssignmentResult("optimal", float(w @ D[np.arange(m), lab]), plan,
                                    "closed form (no fairness constraint)", seconds=time.perf_counter() - t0)
    # scale for conditioning: weights to mean 1, costs to mean 1
    wn = w / max(w.mean(), 1e-300)
    cmat = wn[:, None] * D
    cscale = float(cmat.mean()) or 1.0
    cmat = cmat / cscale
    onehot = (S.colors[:, None] == np.arange(S.n_colors)[None, :]).astype(np.float64)
    rows_val = []  # each: [m] coefficients applied to the variables of one centre
    for j in range(S.n_colors):
        if fairness.upper[j] < 1.0:
            rows_val.append(wn * (onehot[:, j] - fairness.upper[j]))
        if fairness.lower[j] > 0.0:
            rows_val.append(wn * (fairness.lower[j] - onehot[:, j]))
    V = np.stack(rows_val) if rows_val else np.zeros((0, m))  # [r, m]
    options = {"presolve": True}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    res, err = _solve(cmat, V, options)
    if err is not None:
        return FairAssignmentResult("error", message=err, seconds=time.perf_counter() - t0)
    status = _SCIPY_STATUS.get(int(res.status), "error")
    msg = str(res.message)
    if status == "iteration_limit" and "time" in msg.lower():
        status = "time_limit"
    secs = time.perf_counter() - t0
    if status != "optimal":
        viol = fairness_violations(S.color_weights(), fairness) if status == "infeasible" else []
        if status == "infeasible":
            msg = msg + ("; cannot meet: " + "; ".join(viol) if viol else
                         "; no colour share is outside its bounds, so this is numerical trouble")
        return FairAssignmentResult(status, message=msg, violations=viol, seconds=secs)
    plan = np.clip(res.x.reshape(m, k), 0.0, None)
    plan /= plan.sum(axis=1, keepdims=True)
    cost = float((w[:, None] * D * plan).sum())
    nfrac = int(np.sum(plan.max(axis=1) < 1.0 - 1e-9))
    return FairAssignmentResult("optimal", cost, plan, msg, seconds=secs, n_fractional=nfrac)


def _solve(cmat: np.ndarray, V: np.ndarray, options: dict):
    """HiGHS on the fair-assignment LP with scaled costs ``cmat`` [m, k] and fairness rows ``V`` [r, m]
    (repeated for every centre). Returns ``(result, error_message)``."""
    from scipy import sparse
    from scipy.optimize import linprog

    m, k = cmat.shape
    nvar = m * k
    A_eq = sparse.csr_matrix((np.ones(nvar), (np.repeat(np.arange(m), k), np.arange(nvar))), shape=(m, nvar))
    A_ub = b_ub = None
    r = V.shape[0]
    if r:
        ridx, pidx = np.nonzero(V)
        vals = V[ridx, pidx]
        # row (i, q) = i * r + q; column p * k + i
        rows = (np.arange(k)[:, None] * r + ridx[None, :]).ravel()
        cols = (pidx[None, :] * k + np.arange(k)[:, None]).ravel()
        A_ub = sparse.csr_matrix((np.tile(vals, k), (rows, cols)), shape=(k * r, nvar))
        b_ub = np.zeros(k * r)
    try:
        res = linprog(cmat.ravel(), A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=np.ones(m), bounds=(0, None),
                      method="highs", options=options)
    except Exception as e:  # noqa: BLE001 - solver crashes become a status, never a silent result
        return None, f"HiGHS raised {type(e).__name__}: {e}"
    return res, None


def round_plan(plan: np.ndarray) -> np.ndarray:
    """Integral assignment ``[m]`` int: each point to its largest plan entry (ties: lowest centre)."""
    return np.asarray(plan).argmax(axis=1)


def plan_violation(S: WeightedSet, labels_or_plan, k: int, fairness: FairnessSpec) -> float:
    """Largest additive violation ``max_{i,j} max(lower_j - share_ij, share_ij - upper_j, 0)`` of the
    clusters given by hard labels ``[m]`` or a fractional plan ``[m, k]`` (0 for a fair clustering;
    empty clusters are skipped)."""
    a = np.asarray(labels_or_plan)
    P = np.zeros((len(S), k))
    if a.ndim == 1:
        P[np.arange(len(S)), a] = 1.0
    else:
        P = a
    wc = (S.weights[:, None] * P)  # [m, k]
    tot = wc.sum(0)
    onehot = (S.colors[:, None] == np.arange(S.n_colors)[None, :]).astype(np.float64)
    per = onehot.T @ wc  # [l, k]
    keep = tot > 0
    if not keep.any():
        return 0.0
    share = per[:, keep] / tot[keep]
    v = np.maximum(fairness.lower[:, None] - share, share - fairness.upper[:, None])
    return float(max(0.0, v.max()))
