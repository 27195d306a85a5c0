"""Encoder throughput beside a plain GCN (same width/depth), PyG batching vs per-graph, one run.

    ICLR25_DATA=/path/to/data python packages/mgvga/benchmarks/bench_encoder.py [--hidden 64 --layers 7] [--graphs synthetic]

Prints the table and ratios of :func:`iclr25.mgvga.bench.run_bench` (means over the timed passes).
"""

import argparse
import json

from iclr25.core.threads import set_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-nodes", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--graphs", choices=("epfl", "synthetic"), default="epfl")
    ap.add_argument("--n-synthetic", type=int, default=64)
    ap.add_argument("--json", action="store_true", help="print the raw JSON too")
    a = ap.parse_args()
    set_threads(a.threads)
    from iclr25.mgvga.bench import format_bench, run_bench

    res = run_bench(hidden_size=a.hidden, num_layers=a.layers, batch_size=a.batch_size, max_nodes=a.max_nodes,
                    repeats=a.repeats, device=a.device, graphs=a.graphs,
                    n_synthetic=a.n_synthetic)
    if a.json:
        print(json.dumps(res, indent=1))
    print(format_bench(res))


if __name__ == "__main__":
    main()
