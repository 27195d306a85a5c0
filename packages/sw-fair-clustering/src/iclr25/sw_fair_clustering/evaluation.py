"""The spec's metrics (a)-(d) and one query's comparison of the arms (offline / SW-coreset / uniform /
insertion-only) on the same window, centres and seed.

(a) end-to-end fair cost ``fcost(W_t, C_alg) / fcost(W_t, C_offline)``, where ``fcost(W_t, C)`` is the
    LP-optimal exactly-fair assignment cost of the window with centres ``C``;
(b) coreset error ``|fcost(S, C) - fcost(W_t, C)| / fcost(W_t, C)`` over random centre sets;
(c) colour-weight error ``max_j |w(S ∩ P_j) - |W_t ∩ P_j|| / |W_t ∩ P_j|`` (absent colours skipped);
(d) stored points.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .clustering import fair_kclustering, random_centers
from .fairness import FairnessSpec, color_weight_error
from .lp import FairAssignmentResult, fair_assignment_lp
from .weighted_set import WeightedSet

__all__ = ["ArmResult", "QueryResult", "evaluate_query", "window_center_costs", "coreset_error",
           "mean_sd", "StatusCounter"]


def mean_sd(x) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof = 1``; 0 for one value) of the finite entries
    (``nan, nan`` when there are none)."""
    a = np.asarray([v for v in x if v is not None and math.isfinite(v)], dtype=float)
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


class StatusCounter(Counter):
    """Solver statuses counted per arm and stage (``"sw/fit": {"optimal": 4, "infeasible": 1}``)."""

    def add(self, key: str, status: str) -> None:
        self[f"{key}|{status}"] += 1

    def table(self) -> dict:
        out: dict = {}
        for k, v in self.items():
            arm, st = k.split("|")
            out.setdefault(arm, {})[st] = v
        return out


@dataclass
class ArmResult:
    """One arm at one query.

    Attributes:
        name: ``offline`` / ``sw`` / ``uniform`` / ``insertion``.
        size: points in the summary; stored: points held in memory (``None`` when not tracked).
        fit_status: status of the fair LP on the summary (the solve that produced the assignment).
        eval: the exactly-fair LP on the true window with the arm's centres.
        ratio: ``eval.cost / offline.eval.cost`` (``nan`` if either is not optimal).
        coreset_error: per random centre set (``nan`` where an LP was not optimal); color_error: metric (c).
    """

    name: str
    size: int
    fit_status: str
    fit_cost: float
    eval: FairAssignmentResult | None
    ratio: float = math.nan
    coreset_error: list[float] = field(default_factory=list)
    coreset_error_status: list[str] = field(default_factory=list)
    color_error: float = math.nan
    stored: int | None = None
    centers: np.ndarray | None = None
    fit_message: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        def fin(v):
            return None if v is None or not math.isfinite(v) else float(v)

        ce = [fin(v) for v in self.coreset_error]
        return {"arm": self.name, "size": self.size, "stored": self.stored, "fit_status": self.fit_status,
                "fit_cost": fin(self.fit_cost), "fit_message": self.fit_message,
                "eval_status": None if self.eval is None else self.eval.status,
                "eval_cost": None if self.eval is None else fin(self.eval.cost), "ratio": fin(self.ratio),
                "coreset_error_mean": fin(mean_sd(self.coreset_error)[0]) if self.coreset_error else None,
                "coreset_error": ce, "coreset_error_status": self.coreset_error_status,
                "color_error": fin(self.color_error), "seconds": self.seconds}


@dataclass
class QueryResult:
    t: int
    window_size: int
    arms: dict[str, ArmResult]
    spec: FairnessSpec

    def to_dict(self) -> dict:
        return {"t": self.t, "window": self.window_size, "bounds": self.spec.to_dict(),
                "arms": {k: v.to_dict() for k, v in self.arms.items()}}


def window_center_costs(window: WeightedSet, k: int, z: int, spec: FairnessSpec, n_sets: int, seed: int
                        ) -> tuple[list[np.ndarray], list[FairAssignmentResult]]:
    """``n_sets`` random centre sets (``k`` window points each, seeded) and their exactly-fair LP on the window
    (shared by every arm and seed of a query, spec metric (b))."""
    cs = random_centers(window, k, n_sets, seed=seed)
    return cs, [fair_assignment_lp(window, C, spec, z) for C in cs]


def coreset_error(S: WeightedSet, centers: list[np.ndarray], window_lps: list[FairAssignmentResult], z: int,
                  spec: FairnessSpec) -> tuple[list[float], list[str]]:
    """Metric (b) for each centre set; ``nan`` (with its status) where either LP is not optimal."""
    errs, sts = [], []
    for C, ref in zip(centers, window_lps):
        r = fair_assignment_lp(S, C, spec, z)
        sts.append(r.status)
        if r.optimal and ref.optimal and ref.cost > 0:
            errs.append(abs(r.cost - ref.cost) / ref.cost)
        else:
            errs.append(math.nan)
    return errs, sts


def evaluate_query(t: int, window: WeightedSet, summaries: dict[str, WeightedSet], *, k: int, z: int, eta: float,
                   seed: int, relaxed: float | None = None, centers=None, window_lps=None,
                   stored: dict[str, int] | None = None, offline=None, status: StatusCounter | None = None,
                   n_init: int = 10) -> QueryResult:
    """Compare the arms at one query time on the same window, bounds, centre sets and seed.

    Args:
        t: stream position of the query; window: the true window (weights 1).
        summaries: arm name -> summary (the offline arm is the window itself and is always computed unless
            ``offline`` is given: a precomputed ``(centers, FairAssignmentResult)``).
        k, z, eta: clusters, objective, slack of the window-derived bounds (exact bounds for evaluation).
        seed: seeding randomness of every fit (same for all arms).
        relaxed: fit the summaries with the (1 + relaxed)-relaxed bounds (evaluation stays exact).
        centers, window_lps: random centre sets and their window LPs for metric (b) (None: skip (b)).
        status: counter of solver statuses per arm/stage (updated).
    """
    spec = FairnessSpec.proportional(window.colors, eta, n_colors=window.n_colors)
    fit_spec = spec.relaxed(relaxed) if relaxed else spec
    status = status if status is not None else StatusCounter()
    arms: dict[str, ArmResult] = {}
    if offline is None:
        off = fair_kclustering(window, k, z, spec, seed=seed, n_init=n_init)
        offC, offLP = off.centers, off.assignment
    else:
        offC, offLP = offline
    status.add("offline/fit", offLP.status)
    arms["offline"] = ArmResult("offline", len(window), offLP.status, offLP.cost, offLP, 1.0 if offLP.optimal
                                else math.nan, stored=len(window), centers=offC)
    truth = window.color_weights()
    for name, S in summaries.items():
        t0 = time.perf_counter()
        fit = fair_kclustering(S, k, z, fit_spec, seed=seed, n_init=n_init)
        status.add(f"{name}/fit", fit.status)
        ev = fair_assignment_lp(window, fit.centers, spec, z)
        status.add(f"{name}/eval", ev.status)
        ratio = ev.cost / offLP.cost if (ev.optimal and offLP.optimal and offLP.cost > 0) else math.nan
        a = ArmResult(name, len(S), fit.status, fit.cost, ev, ratio, color_error=color_weight_error(
            S.color_weights(), truth), stored=None if stored is None else stored.get(name), centers=fit.centers,
            fit_message="; ".join(fit.assignment.violations) if fit.assignment.violations else "")
        if centers is not None:
            a.coreset_error, a.coreset_error_status = coreset_error(S, centers, window_lps, z, spec)
            for s in a.coreset_error_status:
                status.add(f"{name}/coreset_error", s)
        a.seconds = time.perf_counter() - t0
        arms[name] = a
    return QueryResult(t, len(window), arms, spec)
