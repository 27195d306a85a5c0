"""Benchmark: zero-shot vs TIE on 100,000 float32 embeddings (D = 768, C = 62, A = 5; TIE fits λ on a
50k pool, translates and predicts), and TIE's share of the offline pair's embedding time on 2,000
test renders. Targets (issue #30): TIE <= 1.5x zero-shot; TIE < 5 % of the embedding time.

    OMP_NUM_THREADS=1 python packages/tie/benchmarks/bench_tie.py [--threads 1] [--repeats 3]

Same as ``iclr25-tie bench``; prints one JSON object and a one-line summary.
"""

from __future__ import annotations

import argparse
import json

from iclr25.tie.bench import run_bench
from iclr25.tie.config import BenchConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--renders", type=int, default=2000)
    a = ap.parse_args()
    res = run_bench(BenchConfig(repeats=a.repeats, threads=a.threads, renders=a.renders))
    print(json.dumps(res, indent=1))
    print(f"TIE / zero-shot = {res['tie_over_zero_shot']:.2f}x (target <= 1.5x); TIE* / zero-shot = "
          f"{res['tie_star_over_zero_shot']:.2f}x; TIE share of embedding = {100 * res.get('tie_share_of_embedding', 0):.2f} % "
          f"(target < 5 %); {res.get('images_per_s', 0):.0f} images/s")


if __name__ == "__main__":
    main()
