"""iclr25-sw-fair-clustering: fair k-median / k-means over a sliding window from a small coreset.

Cohen-Addad, Jiang, Yang, Zhang, Zhou, *Fair Clustering in the Sliding Window Model* (ICLR 2025,
arXiv 2503.05173). A :class:`SlidingWindowCoreset` (Algorithm 3: merge-and-reduce of online coresets,
Algorithm 1, on the reversed stream) summarises the last ``W`` points of a coloured stream in sublinear
space; :func:`fair_kclustering` solves fair k-median / k-means on the summary (centres from weighted
seeding + Lloyd / Weiszfeld, assignment from the fair LP of Bera et al. on scipy's HiGHS).

The package namespace is lazy: importing it loads nothing heavy until a name is used.
"""

from __future__ import annotations

import importlib

from ._version import __version__

_EXPORTS = {
    "WeightedSet": "weighted_set",
    "FairnessSpec": "fairness",
    "exact_fair_feasible": "fairness",
    "fairness_violations": "fairness",
    "color_weight_error": "fairness",
    "fair_assignment_lp": "lp",
    "FairAssignmentResult": "lp",
    "dist_z": "lp",
    "round_plan": "lp",
    "plan_violation": "lp",
    "fair_kclustering": "clustering",
    "FairClusteringResult": "clustering",
    "kclustering": "clustering",
    "dz_seeding": "clustering",
    "fair_cost": "clustering",
    "random_centers": "clustering",
    "MeyersonSketch": "meyerson",
    "ring_coreset": "coreset",
    "OnlineCoreset": "coreset",
    "online_coreset": "coreset",
    "online_sample": "coreset",
    "uniform_sample": "coreset",
    "calibrate_weights": "coreset",
    "SlidingWindowCoreset": "sliding_window",
    "merge_summaries": "sliding_window",
    "fairlet_tree_solver": "fairlet",
    "FairletResult": "fairlet",
    "balance": "fairlet",
    "StreamData": "data",
    "load_dataset": "data",
    "load_csv": "data",
    "iter_csv_chunks": "data",
    "load_npz": "data",
    "from_iterator": "data",
    "drift_stream": "data",
    "offline_solution": "baselines",
    "uniform_baseline": "baselines",
    "insertion_only_summary": "baselines",
    "evaluate_query": "evaluation",
    "coreset_error": "evaluation",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'iclr25.sw_fair_clustering' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
