"""The baselines of the spec's comparison (spec "CPU-scale reproduction", Compared (1), (3), (4)).

* *offline*: the fair solver on the whole window (linear space; the reference of metric (a));
* *uniform*: a uniform sample of the window with as many points as the summary, weights ``W / |S|``;
* *stratified uniform*: a uniform sample within each colour (sizes proportional to the colour counts), so its
  colour weights are the window's exactly -- the like-for-like baseline for a summary that keeps colour totals;
* *insertion-only*: an online coreset of everything seen so far that ignores expiry.
"""

from __future__ import annotations

from .clustering import FairClusteringResult, fair_kclustering
from .coreset import online_coreset, stratified_uniform_sample, uniform_sample
from .fairness import FairnessSpec
from .weighted_set import WeightedSet

__all__ = ["offline_solution", "uniform_baseline", "stratified_uniform_baseline", "insertion_only_summary"]


def offline_solution(window: WeightedSet, k: int, z: int = 1, fairness: FairnessSpec | None = None, *, seed=0,
                     **kw) -> FairClusteringResult:
    """Baseline (1): :func:`fair_kclustering` on the whole window (``window``: the exact last ``W`` points)."""
    return fair_kclustering(window, k, z, fairness, seed=seed, **kw)


def uniform_baseline(window: WeightedSet, size: int, seed=0) -> WeightedSet:
    """Baseline (3): ``size`` window points drawn uniformly without replacement, each of weight ``W / size``."""
    return uniform_sample(window, size, seed=seed)


def stratified_uniform_baseline(window: WeightedSet, size: int, seed=0) -> WeightedSet:
    """Baseline (3'): :func:`stratified_uniform_sample` of the window -- ``size`` points split over the colours
    in proportion to their counts, each colour's weights summing to its count."""
    return stratified_uniform_sample(window, size, seed=seed)


def insertion_only_summary(prefix: WeightedSet, k: int, z: int = 1, eps: float = 0.1, *, size: int,
                           seed=0) -> WeightedSet:
    """Baseline (4): the online coreset (Algorithm 1) of the whole stream prefix in arrival order, capped at
    ``size`` points; it never forgets, so it summarises expired points too (see also :class:`OnlineCoreset`
    for the incremental version)."""
    return online_coreset(prefix, k, z, eps, size=size, seed=seed)[0]
