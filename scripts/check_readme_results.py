#!/usr/bin/env python3
"""Check a package README's results block against its committed results snapshot.

usage: python scripts/check_readme_results.py packages/<slug> [RESULTS_DIR] [--write]

A package commits the ``results.json`` of a quick run of its final code as
``packages/<slug>/docs/results-quick.json`` and carries, in its README, the block that ``results.md``
writes for it (the summary line ``iclr25-<slug> ... N/M claims hold.`` and the claims table) between

    <!-- results:quick -->
    ...
    <!-- /results:quick -->

(and likewise ``<!-- results:full -->`` for ``docs/results-full.json``, when either is present). The block
is built by the core itself (``Report.from_json`` then ``Report.results_block``: the summary line and
``claims_table``), so there is no second formatter to drift.

Checks:
  * each block is exactly what the snapshot gives (exit 1 with a per-line diff otherwise);
  * with RESULTS_DIR (a run's folder holding ``results.json``, or a results root holding
    ``<slug>/results.json``): the snapshot of that run's mode (quick or full) has the same claims with the
    same verdicts (exit 1, one line per difference).

``--write`` rewrites the README block(s) from the snapshot(s) instead of checking them (the markers
must already be in the README). Exit 2 on a usage error (no such package, no snapshot, no markers).
Needs ``iclr25-core`` importable (run it with the workspace's ``.venv/bin/python``).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from iclr25.core.results import Report, read_report

MODES = ("quick", "full")


class UsageError(Exception):
    """A problem with the arguments or the package layout (exit 2)."""


def markers(mode: str) -> tuple[str, str]:
    """The README markers that open and close the ``mode`` block."""
    return f"<!-- results:{mode} -->", f"<!-- /results:{mode} -->"


def snapshot_path(pkg: Path, mode: str) -> Path:
    """``packages/<slug>/docs/results-<mode>.json``."""
    return pkg / "docs" / f"results-{mode}.json"


def expected_block(snapshot: Path) -> str:
    """The README block for a snapshot: the summary line and claims table, as ``results.md`` has them."""
    try:
        report = Report.from_json(snapshot.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UsageError(f"{snapshot}: not a valid results.json ({e})") from e
    return report.results_block()


def find_block(text: str, mode: str, readme: Path) -> tuple[int, int] | None:
    """(start, end) offsets of the text between the ``mode`` markers; ``None`` when neither marker is there."""
    open_, close = markers(mode)
    i, j = text.find(open_), text.find(close)
    if i < 0 and j < 0:
        return None
    if i < 0 or j < 0 or j < i or text.count(open_) != 1 or text.count(close) != 1:
        raise UsageError(f"{readme}: the markers {open_} ... {close} must each appear once, in that order")
    return i + len(open_), j


def block_text(text: str, span: tuple[int, int]) -> str:
    return text[span[0]:span[1]].strip("\n")


def check_package(pkg: Path, *, write: bool = False) -> list[str]:
    """Check (or with ``write`` rewrite) the README blocks of ``pkg``; return the problems found (one
    string each, a diff for a block that differs). Raises :class:`UsageError` for a layout problem."""
    readme = pkg / "README.md"
    if not readme.is_file():
        raise UsageError(f"{readme} does not exist (give the package folder, e.g. packages/lotos)")
    text = readme.read_text(encoding="utf-8")
    problems: list[str] = []
    checked = 0
    for mode in MODES:
        snap = snapshot_path(pkg, mode)
        span = find_block(text, mode, readme)
        if span is None and not snap.is_file():
            if mode == "quick":
                raise UsageError(f"{pkg.name}: no {snap} and no {markers(mode)[0]} block in {readme}; commit a "
                                 "quick run's results.json there and add the markers")
            continue
        if span is None:
            raise UsageError(f"{readme}: no {markers(mode)[0]} ... {markers(mode)[1]} block for {snap}; "
                             "add the two markers (then --write fills them)")
        if not snap.is_file():
            raise UsageError(f"{readme} has a {markers(mode)[0]} block but {snap} does not exist; commit the "
                             f"results.json of a {mode} run there")
        want = expected_block(snap)
        checked += 1
        if write:
            text = text[:span[0]] + "\n" + want + "\n" + text[span[1]:]
            continue
        have = block_text(text, span)
        if have != want:
            diff = difflib.unified_diff(have.splitlines(), want.splitlines(), f"{readme} ({mode} block)",
                                        f"{snap} (as results.md writes it)", lineterm="", n=0)
            problems.append("\n".join(diff))
    if write and checked:
        readme.write_text(text, encoding="utf-8")
    return problems


def run_report(results_dir: Path, slug: str) -> tuple[Path, Report]:
    """The run's ``results.json`` under ``results_dir`` (the folder itself or ``<slug>/``) and its report."""
    for cand in (results_dir / "results.json", results_dir / slug / "results.json"):
        if cand.is_file():
            try:
                return cand, read_report(cand)
            except ValueError as e:
                raise UsageError(f"{cand}: not a valid results.json ({e})") from e
    raise UsageError(f"no results.json in {results_dir} or {results_dir / slug}")


def compare_with_run(pkg: Path, results_dir: Path) -> list[str]:
    """Differences between the snapshot of the run's mode and the run: claim names and verdicts."""
    path, run = run_report(results_dir, pkg.name)
    mode = "quick" if run.quick else "full"
    snap = snapshot_path(pkg, mode)
    if not snap.is_file():
        raise UsageError(f"{path} is a {mode} run but {snap} does not exist")
    ref = Report.from_json(snap.read_text(encoding="utf-8"))
    problems = []
    if run.method != ref.method:
        problems.append(f"method: snapshot {ref.method!r}, run {run.method!r}")
    a = {c.name: c for c in ref.claims}
    b = {c.name: c for c in run.claims}
    for name in a.keys() - b.keys():
        problems.append(f"{name}: in {snap} only")
    for name in b.keys() - a.keys():
        problems.append(f"{name}: in {path} only")
    for name in sorted(a.keys() & b.keys()):
        if a[name].holds != b[name].holds:
            problems.append(f"{name}: holds {a[name].holds} in {snap} (ours {a[name].ours:.4g}), "
                            f"{b[name].holds} in {path} (ours {b[name].ours:.4g})")
    return sorted(problems)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="check_readme_results.py",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("package", type=Path, help="the package folder, e.g. packages/lotos")
    ap.add_argument("results_dir", type=Path, nargs="?", default=None,
                    help="a run's results folder: also check the snapshot's claims and verdicts equal it")
    ap.add_argument("--write", action="store_true", help="rewrite the README block(s) from the snapshot(s)")
    args = ap.parse_args(argv)
    pkg = args.package
    try:
        problems = check_package(pkg, write=args.write)
        if args.results_dir is not None:
            problems += compare_with_run(pkg, args.results_dir)
    except UsageError as e:
        print(f"check_readme_results: error: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"{pkg.name}: the README results block(s) or snapshot disagree (a block: "
              f"python scripts/check_readme_results.py {pkg} --write rewrites it from the snapshot; a verdict: "
              f"commit the run's results.json as {snapshot_path(pkg, 'quick')}):")
        for p in problems:
            print(p)
        return 1
    print(f"{pkg.name}: README results {'written' if args.write else 'match the snapshot'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
