#!/usr/bin/env python3
"""Do two cold-cache quick runs of a package give the same verdicts?

usage: python scripts/verdict_stability.py <slug> [--runs 2] [--keep DIR] [--command CMD ...]

Runs ``iclr25-<slug> reproduce --quick --out OUT`` ``--runs`` times (default 2), one after the other, each
with a fresh ``ICLR25_CACHE`` temporary folder (nothing cached: pre-trained bases, downloads, features
are rebuilt) and a fresh output folder, then prints a Markdown table — claim, verdict per run, ``ours``
per run, whether the verdicts agree — and the CPU seconds of each run (user + system of the child process
tree, measured here, and the ``cpu_seconds`` its ``results.json`` records). Paste the output into the
package README (issue #45 §5: the same verdicts on another machine).

Exit 0 when every claim has the same verdict in every run, 1 when one differs (or a claim is missing from
a run), 2 when a run fails (its last lines of output are printed) or on a usage error.

``--command`` replaces ``iclr25-<slug>`` (e.g. ``--command python -m iclr25.tie``); the script appends
``reproduce --quick --out OUT``. Set ``OMP_NUM_THREADS=1`` as for any run on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from iclr25.core.results import Report, _fmt, read_report


@dataclass
class Run:
    """One quick run: its report, the CPU seconds of its process tree measured here, its wall time."""

    report: Report
    cpu_s: float
    wall_s: float


class RunFailed(Exception):
    """A run exited non-zero or wrote no readable results.json (exit 2)."""


def default_command(slug: str) -> list[str]:
    """``iclr25-<slug>`` from the running interpreter's environment (its bin folder), else from PATH."""
    name = f"iclr25-{slug}"
    here = Path(sys.executable).parent / name
    if here.is_file():
        return [str(here)]
    found = shutil.which(name)
    if not found:
        raise RunFailed(f"{name} is not installed here (run with the workspace's .venv/bin/python, or pass "
                        "--command)")
    return [found]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(command: list[str], work: Path, i: int, timeout: float | None) -> Run:
    """Run ``command reproduce --quick --out work/out-<i>`` with ``ICLR25_CACHE=work/cache-<i>`` (both new)."""
    out, cache = work / f"out-{i}", work / f"cache-{i}"
    cache.mkdir()
    env = dict(os.environ, ICLR25_CACHE=str(cache), ICLR25_PROGRESS="never")
    argv = [*command, "reproduce", "--quick", "--out", str(out)]
    c0, t0 = _children_cpu(), time.perf_counter()
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RunFailed(f"run {i}: {' '.join(argv)} ran over {timeout} s") from e
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise RunFailed(f"run {i}: {' '.join(argv)} exited {r.returncode}:\n{tail}")
    try:
        report = read_report(out)
    except (OSError, ValueError) as e:
        raise RunFailed(f"run {i}: no readable {out / 'results.json'} ({e})") from e
    return Run(report, cpu, wall)


def stability_table(runs: list[Run]) -> tuple[str, bool]:
    """The Markdown table over the runs' claims (in the first run's order, then any others) and whether
    every claim has the same verdict in every run (a claim missing from a run disagrees)."""
    n = len(runs)
    names: list[str] = []
    for r in runs:
        names += [c.name for c in r.report.claims if c.name not in names]
    by = [{c.name: c for c in r.report.claims} for r in runs]
    head = ["claim", *[f"holds (run {i + 1})" for i in range(n)], *[f"ours (run {i + 1})" for i in range(n)],
            "agree"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    all_agree = True
    for name in names:
        cs = [b.get(name) for b in by]
        verdicts = ["—" if c is None else ("yes" if c.holds else "no") for c in cs]
        ours = ["—" if c is None else _fmt(c.ours) for c in cs]
        agree = all(c is not None for c in cs) and len({c.holds for c in cs}) == 1
        all_agree &= agree
        lines.append("| " + " | ".join([name.replace("|", "\\|"), *verdicts, *ours, "yes" if agree else "**NO**"])
                     + " |")
    return "\n".join(lines), all_agree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="verdict_stability.py",
                                 description="Cold-cache quick runs of one package; do the verdicts agree?")
    ap.add_argument("slug", help="the package, e.g. tie")
    ap.add_argument("--runs", type=int, default=2, help="how many cold-cache runs (default 2)")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the runs' output and cache folders under this folder (default: a deleted temp dir)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a run may take (default: no limit)")
    ap.add_argument("--command", nargs=argparse.REMAINDER, default=None,
                    help="the CLI to run instead of iclr25-<slug> (the rest of the line)")
    args = ap.parse_args(argv)
    if args.runs < 2:
        print(f"verdict_stability: error: --runs must be >= 2, got {args.runs}", file=sys.stderr)
        return 2
    try:
        command = args.command or default_command(args.slug)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            work_ctx = None
            work = Path(tempfile.mkdtemp(prefix=f"stability-{args.slug}-", dir=args.keep))
        else:
            work_ctx = tempfile.TemporaryDirectory(prefix=f"stability-{args.slug}-")
            work = Path(work_ctx.name)
        try:
            runs = [run_once(command, work, i + 1, args.timeout) for i in range(args.runs)]
        finally:
            if work_ctx is not None:
                work_ctx.cleanup()
    except RunFailed as e:
        print(f"verdict_stability: error: {e}", file=sys.stderr)
        return 2
    table, agree = stability_table(runs)
    held = ", ".join(f"{sum(c.holds for c in r.report.claims)}/{len(r.report.claims)}" for r in runs)
    print(f"`python scripts/verdict_stability.py {args.slug} --runs {args.runs}`: {args.runs} quick runs of "
          f"iclr25-{args.slug} {runs[0].report.version}, each from a cold ICLR25_CACHE; claims holding: {held}; "
          f"verdicts {'agree' if agree else 'DIFFER'}.")
    print()
    print(table)
    print()
    for i, r in enumerate(runs, 1):
        rec = r.report.cpu_seconds
        print(f"- run {i}: {r.cpu_s:.1f} CPU-s (process tree), results.json cpu_seconds "
              f"{'—' if rec is None else f'{rec:.1f}'}, wall {r.wall_s:.1f} s")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
