"""Run one method's ``reproduce`` and write its report (:func:`run_reproduction`).

Shared by the umbrella ``iclr25 reproduce`` (:mod:`iclr25.core.registry`) and every package's
``reproduce`` subcommand (:func:`iclr25.core.config.reproduce_command`); it sits below both so that
neither imports the other.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .results import Claim, Report, write_report

__all__ = ["ReproduceFn", "run_reproduction"]

log = logging.getLogger("iclr25")

ReproduceFn = Callable[[bool, Path], "list[Claim]"]


def _accepts(fn: Callable[..., object], name: str) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return name in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def run_reproduction(
    slug: str,
    fn: Callable[..., object],
    *,
    quick: bool,
    out_dir: str | Path,
    version: str = "?",
    seeds: Sequence[int] | None = None,
    device: str | None = None,
    strict: bool = False,
    **kwargs: object,
) -> Report:
    """Run one method's ``reproduce`` and write ``out_dir/results.{json,md}``.

    Args:
        slug: the method's slug (used in the report).
        fn: ``reproduce(quick, out_dir, **kw) -> list[Claim]``.
        quick: CPU-scale quick mode.
        out_dir: folder for the results (created).
        version: the package version recorded in the report.
        seeds: passed as ``seeds=`` when not ``None`` and ``fn`` accepts it.
        device: passed as ``device=`` when not ``None``/``"auto"`` and ``fn`` accepts it.
        strict: a ``seeds``/``device`` that ``fn`` cannot take is an error (package CLIs);
            otherwise it is logged and ignored (the umbrella over many methods).
        **kwargs: passed to ``fn`` as they are.

    Returns:
        The written :class:`Report`; it records wall and CPU seconds (this process and its
        children), the seeds and device asked for, and :func:`iclr25.core.runinfo.run_info`.

    Raises:
        TypeError: if ``fn`` returns anything but a sequence of :class:`Claim`.
        ValueError: with ``strict``, a ``seeds``/``device`` that ``fn`` does not accept.
        Whatever ``fn`` raises is propagated.
    """
    from .runinfo import cpu_seconds, run_info

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kw = dict(kwargs)
    for name, value, unset in (("seeds", seeds, None), ("device", device, "auto")):
        if value is None or value == unset:
            continue
        if _accepts(fn, name):
            kw[name] = list(value) if name == "seeds" else value
        elif strict:
            raise ValueError(f"{slug}: this reproduction does not take --{name}")
        else:
            log.warning("%s: reproduce() does not take %s=%r; running with its defaults", slug, name, value)
    t0 = time.perf_counter()
    c0 = cpu_seconds()
    claims = fn(quick, out, **kw)
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    claims = list(claims)  # type: ignore[call-overload]
    bad = [type(c).__name__ for c in claims if not isinstance(c, Claim)]
    if bad:
        raise TypeError(f"{slug}: reproduce() must return Claim objects, got {bad}")
    env = run_info(source=getattr(fn, "__module__", None))
    from .report import paper_title

    title = paper_title(slug)
    report = Report(method=slug, version=version, quick=quick, seconds=seconds, claims=claims,
                    cpu_seconds=cpu, seeds=kw.get("seeds"), device=kw.get("device", "default"), env=env,
                    extra={"paper_title": title} if title else {})
    write_report(report, out)
    return report
