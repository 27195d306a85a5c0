"""Benchmark: runner throughput (sequential vs --concurrency 16 against a 50 ms stub server, cache writes
included), rule-based parse rate, and the analysis time for 107 languages x 460 vignettes.

    ICLR25_DATA=/path/to/shared/data python packages/multitp/benchmarks/bench_runner.py [OUT]

Same as ``iclr25-multitp bench``; prints one JSON object (targets: ratio >= 8, analysis < 2 s).
"""

import json
import sys
from pathlib import Path

from iclr25.multitp.bench import run_bench

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/multitp/bench")
    print(json.dumps(run_bench(out), indent=1))
