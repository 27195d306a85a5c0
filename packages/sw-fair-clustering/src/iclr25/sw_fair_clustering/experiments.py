"""The reproduction's experiment bodies, as jobs of :mod:`iclr25.core.runner` (issue #48).

:func:`run_config` runs every arm (SW-coreset, uniform, stratified uniform, offline, optionally insertion-only)
at the query times of one (stream, window, k) for every coreset size and seed. The runner jobs
(``fn(settings, seed, deps) -> record``, JSON records):

* :func:`config_job` -- one (data set, attribute, W, k) of the cost / mechanism / feasibility claims;
* :func:`drift_job` -- the drift stream with the insertion-only arm;
* :func:`space_job` -- stored points of the SW-coreset at W and 4W.

Each record keeps the job's solver statuses and its query rows explicitly (``runs``: a list of
``{"size", "seed", "rows"}``, so no integer key is turned into a string by JSON); undefined numbers are ``None``
(never NaN). The random centre sets and window LPs are shared by every size and seed of one job, as before
the migration, so the numbers are those of the in-process reproduction.
"""

from __future__ import annotations

import math

import numpy as np

from .baselines import insertion_only_summary, stratified_uniform_baseline, uniform_baseline
from .coreset import stratified_uniform_sample, uniform_sample
from .data import StreamData, load_dataset
from .evaluation import StatusCounter, evaluate_query, window_center_costs
from .fairness import FairnessSpec, color_weight_error
from .lp import fair_assignment_lp
from .sliding_window import SlidingWindowCoreset
from .weighted_set import WeightedSet

__all__ = ["Z", "EPS", "ETA", "run_config", "config_job", "drift_job", "space_job", "clean"]

Z, EPS, ETA = 1, 0.1, 0.2
"""Spec hyperparameters: k-median (the paper's curves), eps = 0.1, eta = 0.2."""


def _window(sd: StreamData, t: int, W: int) -> WeightedSet:
    lo = max(0, t - W)
    return WeightedSet(sd.X[lo:t], np.ones(t - lo), sd.colors[lo:t], np.arange(lo + 1, t + 1, dtype=np.float64),
                       sd.n_colors)


def run_config(sd: StreamData, W: int, k: int, sizes, seeds, *, n_queries: int, n_center_sets: int,
               start: int = 0, insertion: bool = False, status: StatusCounter | None = None,
               uniform_feasibility_draws: int = 0, cache: dict | None = None, records: list | None = None,
               tag: str = "", z: int = Z, eps: float = EPS, eta: float = ETA, relaxed: float | None = None,
               block_size: int | None = None, n_init: int = 10, query_every: int | None = None,
               progress=None) -> dict:
    """Run every arm at ``n_queries`` query times ``start + W + i W/5`` for every coreset size and seed.

    Returns ``{size: {seed: [query dicts]}}`` (each query dict: ``t``, per-arm ratio / coreset error / colour
    error / fit status / size, SW stored points, uniform feasibility draws).
    """
    status = status if status is not None else StatusCounter()
    cache = cache if cache is not None else {}
    qe = query_every or max(1, W // 5)
    times = [start + W + i * qe for i in range(n_queries)]
    if times[-1] > len(sd):
        raise ValueError(f"{sd.name}: the stream has {len(sd)} points, the last query needs {times[-1]}")
    out: dict = {}
    for t in times:  # shared by every size and seed: the random centre sets and their window LPs
        key = (tag, k, t)
        if key not in cache:
            win = _window(sd, t, W)
            spec = FairnessSpec.proportional(win.colors, eta, n_colors=win.n_colors)
            C, lps = window_center_costs(win, k, z, spec, n_center_sets, seed=10_000 + t) if n_center_sets else (None, None)
            for r in lps or []:
                status.add("window/coreset_error", r.status)
            cache[key] = (win, C, lps)
    for size in sizes:
        out[size] = {}
        for seed in seeds:
            sw = SlidingWindowCoreset(W, k, z, eps, n_colors=sd.n_colors, coreset_size=size, block_size=block_size,
                                      seed=seed)
            rng = np.random.default_rng([seed, 7])
            rows = []
            for t in times:
                sw.insert_many(sd.X[sw.t:t], sd.colors[sw.t:t])
                S = sw.query()
                win, C, lps = cache[(tag, k, t)]
                cc, sw.color_counts = sw.color_counts, False  # the coreset's own colour weights, for the notes
                raw_cw = color_weight_error(sw.query().color_weights(), win.color_weights())
                sw.color_counts = cc
                summ = {"sw": S, "uniform": uniform_baseline(win, len(S), seed=rng),
                        "stratified": stratified_uniform_baseline(win, len(S), seed=rng)}
                if insertion:
                    prefix = WeightedSet(sd.X[:t], np.ones(t), sd.colors[:t], np.arange(1, t + 1, dtype=float),
                                         sd.n_colors)
                    summ["insertion"] = insertion_only_summary(prefix, k, z, eps, size=len(S), seed=rng)
                off_key = (tag, k, t, seed)
                q = evaluate_query(t, win, summ, k=k, z=z, eta=eta, seed=seed, centers=C, window_lps=lps,
                                   stored={"sw": sw.stored_points}, offline=cache.get(off_key), status=status,
                                   relaxed=relaxed, n_init=n_init)
                cache[off_key] = (q.arms["offline"].centers, q.arms["offline"].eval)
                row = {"t": t, "stored": sw.stored_points, "window": len(win), "sw_color_error_coreset_only": raw_cw,
                       "arms": {a: r.to_dict() for a, r in q.arms.items()}}
                if uniform_feasibility_draws and size == min(sizes):  # used at the smallest size only
                    infe = 0
                    for _ in range(uniform_feasibility_draws):
                        U = uniform_sample(win, len(S), seed=rng)
                        st = fair_assignment_lp(U, q.arms["offline"].centers, q.spec, z).status
                        status.add("uniform/feasibility_draws", st)
                        infe += st == "infeasible"
                    row["uniform_infeasible_draws"] = [infe, uniform_feasibility_draws]
                    infe = 0
                    for _ in range(uniform_feasibility_draws):
                        U = stratified_uniform_sample(win, len(S), seed=rng)
                        st = fair_assignment_lp(U, q.arms["offline"].centers, q.spec, z).status
                        status.add("stratified/feasibility_draws", st)
                        infe += st == "infeasible"
                    row["stratified_infeasible_draws"] = [infe, uniform_feasibility_draws]
                rows.append(row)
                if progress is not None:
                    progress(size, seed, row)
                if records is not None:
                    records.append({"config": tag, "k": k, "size": size, "seed": seed, **row})
            out[size][seed] = rows
    return out


def _runs_record(runs: dict) -> list[dict]:
    return [{"size": int(size), "seed": int(seed), "rows": rows} for size, by_seed in runs.items()
            for seed, rows in by_seed.items()]


def config_job(settings: dict, seed: int, deps: dict) -> dict:
    """Runner job: one (data set, attribute, W, k) of the cost / mechanism / feasibility claims, every coreset
    size and seed of ``settings["seeds"]`` (the job's own ``seed`` is unused: the seeds share the window LPs)."""
    name, attr, W, k = settings["data"], settings["attr"], int(settings["window"]), int(settings["k"])
    sd = load_dataset(name, attr)
    status = StatusCounter()
    tag = f"{name}-{attr}-W{W}-k{k}"
    runs = run_config(sd, W, k, tuple(settings["sizes"]), tuple(settings["seeds"]), n_queries=settings["n_queries"],
                      n_center_sets=settings["n_center_sets"], status=status,
                      uniform_feasibility_draws=settings["uniform_feasibility_draws"], tag=tag)
    return clean({"tag": tag, "k": k, "status": dict(status), "runs": _runs_record(runs)})


def drift_job(settings: dict, seed: int, deps: dict) -> dict:
    """Runner job: the synthetic drift stream (queries after the drift) with the insertion-only arm."""
    n, Wd, k = int(settings["n"]), int(settings["window"]), int(settings["k"])
    dsd = load_dataset("drift", drift_n=n)
    status = StatusCounter()
    tag = f"drift-W{Wd}-k{k}"
    runs = run_config(dsd, Wd, k, tuple(settings["sizes"]), tuple(settings["seeds"]), n_queries=settings["n_queries"],
                      n_center_sets=settings["n_center_sets"], start=n // 2, insertion=True, status=status, tag=tag)
    return clean({"tag": tag, "k": k, "status": dict(status), "runs": _runs_record(runs)})


def space_job(settings: dict, seed: int, deps: dict) -> dict:
    """Runner job: stored points of the SW-coreset (k = 5) at window W and 4W, at ``n_queries`` times, per seed."""
    name, attr, Ws = settings["data"], settings["attr"], int(settings["window"])
    ssd = load_dataset(name, attr)
    stored = []
    for Wx in (Ws, 4 * Ws):
        vals = []
        for s in settings["seeds"]:
            sw = SlidingWindowCoreset(Wx, 5, Z, EPS, n_colors=ssd.n_colors, coreset_size=int(settings["size"]),
                                      seed=int(s))
            for i in range(settings["n_queries"]):
                t = 4 * Ws + Ws + i * (Ws // 5)
                sw.insert_many(ssd.X[sw.t:t], ssd.colors[sw.t:t])
                sw.query()
                vals.append(int(sw.stored_points))
        stored.append({"window": Wx, "stored": vals})
    return {"data": name, "attr": attr, "window": Ws, "stored": stored}


def clean(o):
    """JSON-ready copy: numpy scalars/arrays to Python, NaN/inf to None (no NaN in any record or report)."""
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return clean(o.tolist())
    if isinstance(o, (np.floating, float)):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    return o
