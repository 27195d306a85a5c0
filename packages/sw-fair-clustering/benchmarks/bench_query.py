"""Benchmark: one query on the summary vs the offline fair solve on the whole window, in one run.

Streams Adult-sex (or the synthetic drift stream with --dataset drift) through a SlidingWindowCoreset with
W = 5000, k = 5, z = 1 and reports, over --repeats query times:

* query time: ``query()`` + fair k-median on the stored points (seeding, Weiszfeld iterations, fair LP);
* offline time: the same fair k-median + LP on the whole window (linear space);
* their ratio (means of wall time, and of CPU time in a second timed pass; target: the query at least 5x
  faster);
* the memory ratio stored points / W (target <= 20 %);
* insertion throughput of ``insert_many`` in points/s (mean over the stream, including every block build and
  merge).

Usage (from a repository checkout, with ICLR25_DATA pointing at the data mirrors)::

    python packages/sw-fair-clustering/benchmarks/bench_query.py [--dataset adult|drift] [--out bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from iclr25.sw_fair_clustering import (  # noqa: E402
    FairnessSpec,
    SlidingWindowCoreset,
    WeightedSet,
    fair_assignment_lp,
    fair_kclustering,
)
from iclr25.sw_fair_clustering.data import load_dataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="adult", choices=["adult", "drift"])
    ap.add_argument("--window", type=int, default=5000)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--coreset-size", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sd = load_dataset("adult", "sex") if a.dataset == "adult" else load_dataset("drift", drift_n=40_000)
    W, k = a.window, a.k
    import scipy.optimize  # noqa: F401 - import HiGHS before timing (not part of either arm)
    sw = SlidingWindowCoreset(W, k, 1, 0.1, n_colors=sd.n_colors, coreset_size=a.coreset_size, seed=a.seed)
    # insertion throughput over the stream (the first query time and the later ones)
    times = [2 * W + i * (W // 5) for i in range(a.repeats)]
    t_ins = 0.0
    q_t, off_t, stored, ratios, q_cpu, off_cpu = [], [], [], [], [], []
    for t in times:
        t0 = time.perf_counter()
        sw.insert_many(sd.X[sw.t:t], sd.colors[sw.t:t])
        t_ins += time.perf_counter() - t0
        win = WeightedSet(sd.X[t - W:t], np.ones(W), sd.colors[t - W:t], np.arange(t - W + 1, t + 1.0), sd.n_colors)
        spec = FairnessSpec.proportional(win.colors, 0.2, n_colors=sd.n_colors)
        t0 = time.perf_counter()
        S = sw.query()
        res = fair_kclustering(S, k, 1, spec, seed=a.seed)
        q_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        off = fair_kclustering(win, k, 1, spec, seed=a.seed)
        off_t.append(time.perf_counter() - t0)
        c0 = time.process_time()
        fair_kclustering(S, k, 1, spec, seed=a.seed)
        q_cpu.append(time.process_time() - c0)
        c0 = time.process_time()
        fair_kclustering(win, k, 1, spec, seed=a.seed)
        off_cpu.append(time.process_time() - c0)
        stored.append(sw.stored_points)
        assert res.status == off.status == "optimal", (res.status, off.status)
        ev = fair_assignment_lp(win, res.centers, spec, 1)
        ratios.append(ev.cost / off.cost)
    n_ins = times[-1]
    out = {
        "dataset": sd.name, "window": W, "k": k, "coreset_size": a.coreset_size, "repeats": a.repeats,
        "query_seconds_mean": float(np.mean(q_t)), "offline_seconds_mean": float(np.mean(off_t)),
        "time_ratio_offline_over_query": float(np.mean(off_t) / np.mean(q_t)),
        "cpu_ratio_offline_over_query": float(np.mean(off_cpu) / np.mean(q_cpu)),
        "query_cpu_seconds_mean": float(np.mean(q_cpu)), "offline_cpu_seconds_mean": float(np.mean(off_cpu)),
        "stored_points_mean": float(np.mean(stored)), "memory_ratio_stored_over_W": float(np.mean(stored) / W),
        "insert_points_per_second": float(n_ins / t_ins),
        "end_to_end_cost_ratio_mean": float(np.mean(ratios)),
    }
    print(json.dumps(out, indent=1))
    print(f"query {out['query_seconds_mean']:.3f} s vs offline {out['offline_seconds_mean']:.3f} s "
          f"-> {out['time_ratio_offline_over_query']:.1f}x faster (CPU {out['cpu_ratio_offline_over_query']:.1f}x; "
          f"target >= 5x); stored / W = "
          f"{out['memory_ratio_stored_over_W']:.3f} (target <= 0.20); insert_many {out['insert_points_per_second']:.0f} "
          f"points/s; cost ratio {out['end_to_end_cost_ratio_mean']:.3f}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
