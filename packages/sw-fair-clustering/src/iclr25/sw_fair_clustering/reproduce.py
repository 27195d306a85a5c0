"""Reproduction of the paper's claims at CPU scale (spec "CPU-scale reproduction").

``reproduce(quick, out_dir, *, seeds=None, workers=None, resume=False)`` returns the claims

* ``cost/sw_coreset_near_offline`` -- mean end-to-end fair-cost ratio ``fcost(W_t, C_sw) / fcost(W_t, C_offline)``
  <= 1.1 (the paper's "close to running the solver on the full window");
* ``cost/sw_coreset_lt_uniform`` -- the same ratio, SW-coreset vs a uniform sample of the window of equal size;
* ``mechanism/coreset_error_lt_uniform`` -- empirical coreset error over 10 random centre sets, SW vs uniform;
* ``cost/sw_coreset_lt_stratified_uniform`` -- the same ratio, SW vs a colour-stratified uniform sample of equal
  size (its colour weights are exact: the like-for-like baseline);
* ``mechanism/coreset_color_weight_error_within_eps`` -- worst colour-weight error of the coreset's own weights
  (before the chunked colour counters recalibrate them, which makes the error 0 by construction) <= eps;
* ``space/sublinear_in_window`` -- stored points at window 4W over stored points at W <= 2;
* ``drift/sw_lt_insertion_only`` -- on the drift stream, SW-coreset vs an insertion-only online coreset;
* ``feasibility/coreset_lt_uniform_infeasible`` -- share of exactly-fair LPs on the summary that are infeasible
  at the smallest size, SW vs uniform (must be lower by at least one percentage point: a tie at zero shows
  nothing and does not hold); ``feasibility/coreset_le_stratified_uniform_infeasible`` -- the same share, SW vs
  stratified uniform (SW must not be infeasible more often);

all arms on the same windows, bounds, random centre sets and seeds; margin claims carry mean +- sd over the
seeds per arm and say whether the gap exceeds the larger sd. ``details.json`` holds every query of every arm,
the solver statuses per arm (infeasible and failed solves are counted, never fatal) and the timings;
``queries.jsonl`` one line per (config, seed, query); ``cost_ratios.png`` each arm's mean ± sd over seeds
(:mod:`.plots`, with matplotlib).

The experiments run as jobs of :mod:`iclr25.core.runner` (:func:`jobs`: one per (data set, attribute, W, k),
one for the drift stream, one for the space measurement; bodies in :mod:`.experiments`), one JSON record each
under ``out_dir/records/``; the claims are a pure function of the records (:mod:`.claims`), so ``--resume``
with every record there re-runs no clustering.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import claims_from_records
from .experiments import EPS, ETA, Z, run_config

__all__ = ["reproduce", "settings", "jobs", "run_config", "Z", "EPS", "ETA"]

log = logging.getLogger("iclr25.sw_fair_clustering")


def settings(quick: bool) -> dict:
    """The quick (2 seeds, Adult-sex) and full (Adult, Diabetes, Bank, drift; k in {5, 10}; three sizes;
    3 seeds) configurations."""
    if quick:
        return dict(configs=[("adult", "sex", 2000)], ks=(5,), sizes=(200,), seeds=(0, 1), n_queries=5,
                    n_center_sets=10, space=("adult", "sex", 2000), drift=dict(n=16_000, window=2000),
                    uniform_feasibility_draws=50)
    return dict(configs=[("adult", "sex", 5000), ("diabetes", "gender", 5000), ("bank", "married", 1000)],
                ks=(5, 10), sizes=(100, 200, 400), seeds=(0, 1, 2), n_queries=5, n_center_sets=10,
                space=("adult", "sex", 5000), drift=dict(n=30_000, window=5000), uniform_feasibility_draws=50)


def jobs(st: dict, quick: bool) -> list[Job]:
    """The reproduction's runner jobs for the settings ``st`` (no dependencies between them)."""
    common = dict(seeds=list(st["seeds"]), n_queries=st["n_queries"], n_center_sets=st["n_center_sets"])
    out = [Job(f"{name}-{attr}-W{W}-k{k}", "iclr25.sw_fair_clustering.experiments:config_job", seed=0,
               settings=dict(data=name, attr=attr, window=W, k=k, sizes=list(st["sizes"]),
                             uniform_feasibility_draws=st["uniform_feasibility_draws"], **common))
           for name, attr, W in st["configs"] for k in st["ks"]]
    small = min(st["sizes"]) if quick else 200
    dcfg = st["drift"]
    out += [Job(f"drift-W{dcfg['window']}-k{k}", "iclr25.sw_fair_clustering.experiments:drift_job", seed=0,
                settings=dict(n=dcfg["n"], window=dcfg["window"], k=k, sizes=[small], **common))
            for k in st["ks"][:1]]
    name, attr, Ws = st["space"]
    out.append(Job("space", "iclr25.sw_fair_clustering.experiments:space_job", seed=0,
                   settings=dict(data=name, attr=attr, window=Ws, size=small, seeds=list(st["seeds"]),
                                 n_queries=st["n_queries"])))
    return out


def reproduce(quick: bool, out_dir: Path, *, seeds: tuple[int, ...] | None = None, workers: int | None = None,
              resume: bool = False, quiet: bool = False) -> list[Claim]:
    """Run the reproduction on the core runner; write ``records/``, ``details.json``, ``queries.jsonl`` (and
    ``cost_ratios.png``) to ``out_dir``.

    Args:
        quick: the quick settings (Adult-sex, 2 seeds) instead of the full ones.
        out_dir: output folder.
        seeds: the seeds (at least 2: margin claims report mean ± sd).
        workers: processes the jobs run in (default: the runner's, from the cores; 1 = in this process).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused by name).
        quiet: no progress bar.
    """
    from iclr25.core.runner import run_jobs

    t_start = time.perf_counter()
    out_dir = Path(out_dir)
    st = settings(quick)
    if seeds is not None:
        seeds = tuple(int(s) for s in seeds)
        if len(seeds) < 2:
            raise ValueError("reproduce needs at least 2 seeds (margin claims report mean ± sd)")
        st["seeds"] = seeds
    js = jobs(st, quick)
    res = run_jobs(js, out_dir, workers=workers, resume=resume, desc="sw-fair reproduce",
                   quiet=True if quiet else None)
    kinds = {j.name: j.fn.rsplit(":", 1)[1] for j in js}
    timings = {n: res.job_wall_seconds[n] for n in kinds}  # wall seconds per job, as recorded when it ran
    for name, secs in timings.items():
        log.info("%s: %.1f s", name, secs)
    return claims_from_records(res.records, st, out_dir,
                               config_jobs=[n for n, f in kinds.items() if f == "config_job"],
                               drift_jobs=[n for n, f in kinds.items() if f == "drift_job"],
                               space_job="space", timings=timings, seconds=time.perf_counter() - t_start)
