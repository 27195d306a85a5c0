"""Rebuild a finished ``iclr25-frs reproduce`` run's claims with this code, without training or certifying.

    python packages/frs/benchmarks/rebuild_claims.py RUN_DIR OUT_DIR

Reads ``RUN_DIR/metrics.json`` (the per-seed numbers every claim is computed from) and ``RUN_DIR/results.json``
(the run's metadata: wall and CPU seconds, seeds, environment), recomputes the claims with
:func:`iclr25.frs.claims.claims_from_metrics` and the figures with :func:`iclr25.frs.plots.write_plots`, and
writes ``OUT_DIR/results.json`` / ``results.md`` (the run's metadata kept, ``extra.rebuilt_from`` naming the
source and the rebuild) plus the figures. Used for the full run of the README, whose certificates came from
the same certification code.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from iclr25.core.results import read_report, write_report
from iclr25.frs._version import __version__
from iclr25.frs.claims import aggregate, claims_from_metrics
from iclr25.frs.plots import write_plots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished reproduce --out folder (metrics.json, results.json)")
    ap.add_argument("out", type=Path, help="where to write results.json / results.md / the figures")
    args = ap.parse_args(argv)
    for f in ("metrics.json", "results.json"):
        if not (args.run / f).is_file():
            print(f"error: {args.run / f} not found: give the --out folder of a finished 'iclr25-frs reproduce'",
                  file=sys.stderr)
            return 2
    meta = json.loads((args.run / "metrics.json").read_text())
    old = read_report(args.run / "results.json")
    claims = claims_from_metrics(meta)
    args.out.mkdir(parents=True, exist_ok=True)
    p = meta["preset"]
    write_plots(aggregate(meta["per_seed"]), args.out, len(meta["seeds"]),
                f"{p['data']}, d = {p['d_model']}, K = {p['k']}, n = {p['n_random']}")
    extra = {**old.extra, "rebuilt_from": {"run": str(args.run), "run_version": old.version,
                                           "claims_version": __version__,
                                           "how": "benchmarks/rebuild_claims.py: claims_from_metrics(metrics.json)"}}
    write_report(replace(old, claims=claims, extra=extra), args.out)
    held = sum(c.holds for c in claims)
    print(f"frs: {held}/{len(claims)} claims hold (rebuilt from {args.run}) -> {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
