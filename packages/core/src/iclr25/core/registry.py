"""Discovery of installed methods and the umbrella command ``iclr25``.

Every method package registers one callable in the ``iclr25.methods`` entry-point group::

    [project.entry-points."iclr25.methods"]
    agpd = "iclr25.agpd.reproduce:reproduce"

The callable has the signature ``reproduce(quick: bool, out_dir: Path) -> list[Claim]``.
It may write extra artefacts (plots, raw metrics) into ``out_dir``; :func:`run_reproduction`
(defined in :mod:`iclr25.core.reproduction`, re-exported here) writes ``results.json`` and ``results.md``
there from the claims it returns.

Command line::

    iclr25 list
    iclr25 --version
    iclr25 reproduce [--quick] [--out DIR] [--workers N] [--resume] [--report] [SLUG ...]
    iclr25 report [--results DIR] [--out FILE] [--compare OLD NEW] [--rtol X]

``reproduce`` ends with the CPU seconds of the whole run (this process and its children, e.g. the
runner's workers) and of each method, and writes them with every method's status and claims to
``OUT/summary.json`` and ``OUT/summary.md``. It exits 1 if a method crashed (its traceback is printed), 2 on a usage error
(an unknown slug) or when a method needs an extra that is not installed (one line names it);
a claim that does not hold is a result, not a failure, and does not change the exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from .reproduction import ReproduceFn, _accepts, run_reproduction
from .results import Claim, Report

__all__ = ["MethodEntry", "discover", "run_reproduction", "terminal_table", "main"]

GROUP = "iclr25.methods"
log = logging.getLogger("iclr25")

@dataclass(frozen=True)
class MethodEntry:
    """An installed method: its slug, distribution name and version, and entry point."""

    slug: str
    distribution: str
    version: str
    target: str  # "module:attr"
    _ep: object

    def load(self) -> ReproduceFn:
        """Import and return the ``reproduce`` callable."""
        return self._ep.load()  # type: ignore[attr-defined]


def discover() -> dict[str, MethodEntry]:
    """All methods registered in the ``iclr25.methods`` group, keyed and sorted by slug.

    Returns:
        ``{slug: MethodEntry}``. Importing a method's module is deferred to ``load()``.
    """
    found: dict[str, MethodEntry] = {}
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        name = dist.metadata["Name"] if dist is not None else "?"
        version = dist.version if dist is not None else "?"
        found[ep.name] = MethodEntry(ep.name, name, version, ep.value, ep)
    return dict(sorted(found.items()))


def _cmd_list(_: argparse.Namespace) -> int:
    methods = discover()
    if not methods:
        print("no iclr25 methods installed (pip install iclr25-<slug>)")
        return 0
    w = max(len(s) for s in methods)
    dw = max(len(m.distribution) for m in methods.values())
    for m in methods.values():
        print(f"{m.slug:<{w}}  {m.distribution:<{dw}}  {m.version}")
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from .progress import progress

    methods = discover()
    wanted = args.slugs or list(methods)
    unknown = [s for s in wanted if s not in methods]
    if unknown:
        print(
            f"error: unknown method(s) {unknown}; installed: {sorted(methods) or 'none'}",
            file=sys.stderr,
        )
        return 2
    if not wanted:
        print("no iclr25 methods installed; nothing to reproduce", file=sys.stderr)
        return 1
    if args.device is not None:
        from .config import validate_device

        try:
            validate_device(args.device)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.threads is not None and args.threads < 1:
        print(f"error: --threads must be >= 1, got {args.threads}", file=sys.stderr)
        return 2
    if Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"error: --out {args.out} is not a folder (a file of that name exists)", file=sys.stderr)
        return 2
    if args.threads is not None:
        from .threads import set_threads

        set_threads(args.threads)
    if args.quiet:
        import os

        os.environ["ICLR25_QUIET"] = "1"
    from .runinfo import cpu_seconds

    out_root = Path(args.out)
    passed = {"workers": args.workers, "resume": True if args.resume else None,
              "quiet": True if args.quiet else None}
    rows: list[tuple[str, Claim]] = []
    crashed: list[str] = []
    reasons: dict[str, str] = {}  # crashed slug -> its exception in one line, for the report page
    missing: list[str] = []  # methods whose extra is not installed
    runs: list[dict[str, object]] = []  # one entry per method, for summary.{json,md}
    t_all, c_all = time.perf_counter(), cpu_seconds()
    bar = progress(wanted, desc="reproduce", unit="method")
    for slug in bar:
        bar.set_postfix_str(slug)
        entry = methods[slug]
        t0, c0 = time.perf_counter(), cpu_seconds()
        done = _finished_report(out_root / slug, entry.version, args) if args.resume else None
        if done is not None:  # --resume: a method that already wrote its results with these settings
            bar.write(f"[{slug}] already finished with these settings ({out_root / slug}/results.json): "
                      "kept, not re-run (--resume)", file=sys.stderr)
            runs.append({**_run_entry(slug, "ok", done, t0, c0), "kept": True})
            rows += [(slug, c) for c in done.claims]
            continue
        try:
            fn = entry.load()
            report = run_reproduction(
                slug, fn, quick=args.quick, out_dir=out_root / slug, version=entry.version,
                seeds=args.seeds, device=args.device, **_pass_through(slug, fn, passed),
            )
        except ModuleNotFoundError as e:  # an extra this method needs is not installed: one line
            from .extras import missing_module_message

            missing.append(slug)
            print(f"[{slug}] not run: {missing_module_message(entry.distribution, e)}", file=sys.stderr)
            runs.append(_run_entry(slug, "not run", None, t0, c0))
            continue
        except Exception:  # noqa: BLE001 - report every method, fail at the end
            crashed.append(slug)
            err = sys.exc_info()[1]
            reasons[slug] = " ".join(f"{type(err).__name__}: {err}".split())[:500]
            print(f"\n[{slug}] crashed:\n{traceback.format_exc()}", file=sys.stderr)
            runs.append(_run_entry(slug, "crashed", None, t0, c0))
            continue
        runs.append(_run_entry(slug, "ok", report, t0, c0))
        rows += [(slug, c) for c in report.claims]
        log.info("%s: %d/%d claims hold (%.1f s)", slug, sum(c.holds for c in report.claims),
                 len(report.claims), report.seconds)
    # one table of all claims, grouped by method, within 100 columns (notes: results.md / report.html)
    if rows:
        print(terminal_table(rows))
    held = sum(c.holds for _, c in rows)
    summary = f"{held}/{len(rows)} claims hold across {len(wanted) - len(crashed) - len(missing)} method(s)"
    if crashed:
        summary += f"; CRASHED: {', '.join(crashed)}"
    if missing:
        summary += f"; NOT RUN (extra not installed): {', '.join(missing)}"
    total = {"wall_seconds": time.perf_counter() - t_all, "cpu_seconds": cpu_seconds() - c_all}
    cpu_line = cpu_summary(runs, total["cpu_seconds"])
    write_summary(out_root, runs, total, quick=args.quick, held=held, n_claims=len(rows))
    if getattr(args, "report", False):
        from .report import write_html_report

        try:
            summary += f"; page {write_html_report(out_root, crashed=reasons)}"
        except FileNotFoundError as e:
            if reasons:  # nothing finished, but the page still says which method crashed and why
                summary += f"; page {write_html_report(out_root, results=[], crashed=reasons)}"
            else:
                print(f"error: no report page written: {e}", file=sys.stderr)
    print(f"\n{cpu_line}")
    print(f"{summary}; results in {out_root}/<slug>/results.json, summary in {out_root}/summary.md")
    return 1 if crashed else 2 if missing else 0


def _finished_report(folder: Path, version: str | None, args: argparse.Namespace) -> Report | None:
    """The ``results.json`` in ``folder`` when it was written with the settings of this run (quick or
    full, package version, seeds, device), else ``None`` (missing, unreadable or other settings: re-run)."""
    from .results import read_report

    try:
        rep = read_report(folder)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    device = args.device if args.device not in (None, "auto") else "default"
    seeds = list(args.seeds) if args.seeds is not None else None
    same = (rep.quick == bool(args.quick) and rep.version == version and rep.device == device
            and (list(rep.seeds) if rep.seeds is not None else None) == seeds)
    return rep if same else None


def _run_entry(slug: str, status: str, report: Report | None, t0: float, c0: float) -> dict[str, object]:
    """One method's line of the umbrella summary: its status, claims, wall and CPU seconds (the report's
    own, this process and its children, when it ran; else measured here around the attempt)."""
    from .runinfo import cpu_seconds

    entry: dict[str, object] = {"method": slug, "status": status}
    if report is not None:
        entry.update(claims=len(report.claims), holding=sum(c.holds for c in report.claims),
                     wall_seconds=report.seconds, cpu_seconds=report.cpu_seconds)
    else:
        entry.update(claims=None, holding=None, wall_seconds=time.perf_counter() - t0,
                     cpu_seconds=cpu_seconds() - c0)
    return entry


def cpu_summary(runs: Sequence[dict[str, object]], total_cpu: float) -> str:
    """``CPU: 123.4 s in total (this process and its children); per method: a 12.3 s, b 111.1 s``."""
    per = ", ".join(f"{r['method']} {_cpu(r['cpu_seconds'])}" + (" (earlier run)" if r.get("kept") else "")
                    for r in runs)
    return f"CPU: {total_cpu:.1f} s in total (this process and its children); per method: {per or 'none'}"


def _cpu(x: object) -> str:
    return f"{x:.1f} s" if isinstance(x, (int, float)) else "n/a"


def write_summary(out_root: Path, runs: Sequence[dict[str, object]], total: dict[str, float], *, quick: bool,
                  held: int, n_claims: int) -> Path:
    """Write ``OUT/summary.json`` and ``OUT/summary.md`` of an umbrella run: one row per method (status,
    claims holding, wall and CPU seconds) and the totals (CPU: this process and every child, e.g. the
    runner's workers); return the JSON path."""
    import json

    from .checkpoint import atomic_write_json, atomic_write_text

    out_root.mkdir(parents=True, exist_ok=True)
    data = {"quick": quick, "claims": n_claims, "holding": held, "methods": list(runs),
            "total_wall_seconds": total["wall_seconds"], "total_cpu_seconds": total["cpu_seconds"]}
    json.dumps(data, allow_nan=False)  # refuse NaN before writing
    atomic_write_json(out_root / "summary.json", data)
    lines = [f"# iclr25 reproduce ({'quick' if quick else 'full'})", "",
             f"{held}/{n_claims} claims hold across {sum(r['status'] == 'ok' for r in runs)} method(s); "
             f"{total['wall_seconds']:.1f} s wall, {total['cpu_seconds']:.1f} s CPU in total (this process and "
             "its children).", "",
             "| method | status | claims holding | wall (s) | CPU (s) |", "|---|---|---|---|---|"]
    for r in runs:
        claims = f"{r['holding']}/{r['claims']}" if r["claims"] is not None else ""
        wall = f"{r['wall_seconds']:.1f}" if isinstance(r["wall_seconds"], (int, float)) else ""
        cpu = f"{r['cpu_seconds']:.1f}" if isinstance(r["cpu_seconds"], (int, float)) else ""
        status = f"{r['status']} (earlier run)" if r.get("kept") else r["status"]
        lines.append(f"| {r['method']} | {status} | {claims} | {wall} | {cpu} |")
    lines.append(f"| **total** | | {held}/{n_claims} | {total['wall_seconds']:.1f} | {total['cpu_seconds']:.1f} |")
    atomic_write_text(out_root / "summary.md", "\n".join(lines) + "\n")
    return out_root / "summary.json"


def _pass_through(slug: str, fn: Callable[..., object], passed: dict[str, object]) -> dict[str, object]:
    """The umbrella's ``--workers``/``--resume``/``--quiet`` as keywords ``fn`` takes (``workers`` also as
    ``jobs``, an older name); one a method cannot take is logged and left out."""
    kw: dict[str, object] = {}
    for name, value in passed.items():
        if value is None:
            continue
        if _accepts(fn, name):
            kw[name] = value
        elif name == "workers" and _accepts(fn, "jobs"):
            kw["jobs"] = value
        elif name != "quiet":
            log.warning("%s: reproduce() does not take --%s; running without it", slug, name)
    return kw


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def terminal_table(rows: Sequence[tuple[str, Claim]], width: int = 100) -> str:
    """A plain-text table of ``(slug, claim)`` rows that fits ``width`` columns: method, claim, ours,
    baseline or threshold, verdict. Long names are shortened with "…"; metrics and notes are in
    ``results.md`` and the HTML page."""
    def num(x: float | None) -> str:
        from .results import _fmt

        return "" if x is None else _fmt(x)

    body = [(slug, c.name, num(c.ours), num(c.baseline if c.baseline is not None else c.threshold),
             "yes" if c.holds else "NO") for slug, c in rows]
    head = ("method", "claim", "ours", "vs", "holds")
    fixed = [min(max(len(r[i]) for r in [head, *body]), cap) for i, cap in ((0, 18), (2, 10), (3, 10), (4, 5))]
    name_w = max(10, width - sum(fixed) - 2 * 4)
    widths = [fixed[0], name_w, fixed[1], fixed[2], fixed[3]]
    line = [f"{_clip(head[0], widths[0]):<{widths[0]}}  {head[1]:<{widths[1]}}  {head[2]:>{widths[2]}}  "
            f"{head[3]:>{widths[3]}}  {head[4]}"]
    line.append("-" * min(width, sum(widths) + 8))
    for r in body:
        line.append(f"{_clip(r[0], widths[0]):<{widths[0]}}  {_clip(r[1], widths[1]):<{widths[1]}}  "
                    f"{_clip(r[2], widths[2]):>{widths[2]}}  {_clip(r[3], widths[3]):>{widths[3]}}  {r[4]}")
    return "\n".join(x.rstrip() for x in line)


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import load_results, write_html_report

    if args.compare and args.results is not None:
        print("error: give --results or --compare OLD NEW, not both", file=sys.stderr)
        return 2
    old, new = args.compare if args.compare else (None, args.results or "results")
    try:
        shown = load_results(new)
        page = write_html_report(new, args.out, results=shown, compare=old, rtol=args.rtol)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [p for p in shown if p.report is None]
    for p in bad:
        print(f"error: {p.error}", file=sys.stderr)
    claims = [c for p in shown for c in p.claims]
    print(f"{sum(c.holds for c in claims)}/{len(claims)} claims hold across {len(shown)} package(s)"
          + (f"; {len(bad)} unreadable" if bad else "") + f"; page {page}")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="iclr25",
        description="ICLR 2025 methods as packages: list them, reproduce their claims.",
    )
    from ._version import __version__

    p.add_argument("--version", action="version", version=f"iclr25-core {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("list", help="installed methods: slug, distribution, version")
    sp.set_defaults(func=_cmd_list)
    sp = sub.add_parser(
        "reproduce",
        help="run the methods' reproductions and print one table of claims",
        description="Run each method's reproduce(), write OUT/<slug>/results.{json,md}, print "
        "one table. Exit 1 if a method crashed (not when a claim does not hold).",
    )
    sp.add_argument("slugs", nargs="*", metavar="SLUG", help="methods to run (default: all installed)")
    sp.add_argument("--quick", action="store_true", help="CPU-scale quick mode (minutes on 2 cores)")
    sp.add_argument("--out", default="results", help="output folder (default: ./results)")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--device", default=None,
                    help="auto|cpu|cuda|cuda:N|mps, passed to methods whose reproduce() takes it")
    sp.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="seeds, passed to methods whose reproduce() takes them")
    sp.add_argument("--threads", type=int, default=None, help="CPU threads for torch/BLAS")
    sp.add_argument("--workers", type=int, default=None,
                    help="worker processes, passed to methods whose reproduce() runs jobs in parallel")
    sp.add_argument("--resume", action="store_true",
                    help="continue an interrupted run in OUT (methods whose reproduce() can resume)")
    sp.add_argument("--report", action="store_true", help="then write OUT/report.html (see iclr25 report)")
    sp.set_defaults(func=_cmd_reproduce)
    sp = sub.add_parser(
        "report",
        help="one self-contained HTML page of every claim, with its plots",
        description="Read RESULTS/<slug>/results.json (and the PNGs beside them) and write one HTML "
        "page that works offline. Exit 1 if a results.json is unreadable (the page says which).",
    )
    sp.add_argument("--results", default=None, help="results folder (default: ./results)")
    sp.add_argument("--out", default=None,
                    help="HTML file to write (default: RESULTS/report.html; NEW/compare.html with --compare)")
    sp.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), default=None,
                    help="mark claims of NEW whose holds flipped or whose numbers moved since OLD")
    sp.add_argument("--rtol", type=float, default=0.05,
                    help="with --compare: relative tolerance for numbers that carry no seed spread (default 0.05)")
    sp.set_defaults(func=_cmd_report)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``iclr25`` console script; returns the exit code."""
    from .progress import setup_logging

    args = build_parser().parse_args(argv)
    if getattr(args, "workers", None) is not None and args.workers < 1:
        print(f"error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    setup_logging(logging.WARNING if getattr(args, "quiet", False) else logging.INFO)
    try:
        return args.func(args)
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM: one line (the runner's says what was kept), as each package
        detail = f" ({e})" if str(e) else ""
        print(f"iclr25 {args.command}: interrupted{detail}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
