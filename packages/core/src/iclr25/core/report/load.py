"""Reading a results folder: every ``<slug>/results.json`` and the PNGs beside it, and the paper's
URL and title of an installed method.

Part of :mod:`iclr25.core.report` (see its docstring)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..results import Claim, Report, read_report

#: Plots larger than this are listed but not embedded (the page would become unwieldy).
MAX_PLOT_BYTES = 16 * 1024 * 1024
#: Claim fields a newer core may write that only this page reads.
OPTIONAL_CLAIM_KEYS = ("spread", "seeds")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"



@dataclass(frozen=True)
class Plot:
    """A PNG the run wrote into its results folder.

    Args:
        name: path relative to the package's results folder (e.g. ``"pretrain_loss.png"``).
        data: the file's bytes, or ``None`` when it is not embedded (see ``problem``).
        problem: why it is not embedded (not a PNG, too large, unreadable); empty otherwise.
    """

    name: str
    data: bytes | None
    problem: str = ""


@dataclass
class PackageResults:
    """One package's results folder as the page shows it.

    Args:
        slug: the folder name (the method's slug).
        folder: the folder holding ``results.json``.
        report: the parsed report, or ``None`` when ``results.json`` could not be read.
        raw: the JSON object as written (for optional fields the current :class:`Report`
            and :class:`Claim` do not know).
        plots: the PNGs found under ``folder``, sorted by path.
        paper: the paper's URL from the installed distribution's metadata, if any.
        error: why ``results.json`` could not be read (empty when it was).
    """

    slug: str
    folder: Path
    report: Report | None
    raw: dict[str, Any] = field(default_factory=dict)
    plots: list[Plot] = field(default_factory=list)
    paper: str | None = None
    error: str = ""

    @property
    def claims(self) -> list[Claim]:
        return list(self.report.claims) if self.report is not None else []

    def claim_raw(self, i: int) -> dict[str, Any]:
        """The JSON dict of claim ``i`` (same order as ``report.claims``); ``{}`` if absent."""
        cl = self.raw.get("claims")
        if isinstance(cl, list) and i < len(cl) and isinstance(cl[i], dict):
            return cl[i]
        return {}

    def meta(self, key: str) -> Any:
        """Optional run metadata ``key``: the report's attribute, else the JSON field, else
        ``extra[key]``; ``None`` when absent."""
        if self.report is not None:
            v = getattr(self.report, key, None)
            if v not in (None, {}, []):
                return v
        v = self.raw.get(key)
        if v not in (None, {}, []):
            return v
        extra = self.raw.get("extra")
        if isinstance(extra, dict) and extra.get(key) not in (None, {}, []):
            return extra[key]
        return None


def _read_report_tolerant(path: Path, raw: dict[str, Any]) -> Report:
    """:func:`read_report`, except that claim fields in :data:`OPTIONAL_CLAIM_KEYS` that this
    core's :class:`Claim` does not know are set aside (kept in ``raw``) instead of refused."""
    known = {f.name for f in fields(Claim)}
    drop = set(OPTIONAL_CLAIM_KEYS) - known
    claims = raw.get("claims")

    def aside(c: dict[str, Any]) -> set[str]:
        # a per-key spread mapping {"ours": sd, "baseline": sd} (written before Claim.spread was a number)
        return (drop & set(c)) | ({"spread"} if isinstance(c.get("spread"), Mapping) else set())

    if not isinstance(claims, list) or not any(isinstance(c, dict) and aside(c) for c in claims):
        return read_report(path)
    cleaned = dict(raw)
    cleaned["claims"] = [
        {k: v for k, v in c.items() if k not in aside(c)} if isinstance(c, dict) else c for c in claims
    ]
    return Report.from_dict(cleaned)


def _find_plots(folder: Path) -> list[Plot]:
    plots = []
    for p in sorted(folder.rglob("*.png")):
        rel = p.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in p.relative_to(folder).parts) or not p.is_file():
            continue
        try:
            size = p.stat().st_size
            if size > MAX_PLOT_BYTES:
                plots.append(Plot(rel, None, f"not embedded: {size / 2**20:.1f} MiB is over the "
                                             f"{MAX_PLOT_BYTES // 2**20} MiB limit"))
                continue
            data = p.read_bytes()
        except OSError as e:
            plots.append(Plot(rel, None, f"unreadable: {e}"))
            continue
        if not data.startswith(_PNG_SIGNATURE):
            plots.append(Plot(rel, None, "not embedded: not a PNG file (bad signature)"))
            continue
        plots.append(Plot(rel, data))
    return plots


def paper_url(slug: str, distribution: str | None = None) -> str | None:
    """The paper's URL of an installed method, from its distribution's metadata.

    Looks at ``distribution`` (default ``iclr25-<slug>``, then the distribution that registers
    ``slug`` in the ``iclr25.methods`` entry-point group): the ``Project-URL`` labelled
    ``Paper``, else the one labelled ``Homepage``, else ``Home-page``. Only ``http(s)`` URLs
    are returned.

    Returns:
        The URL, or ``None`` when the distribution is not installed or names no such URL.
    """
    names = [distribution] if distribution else [f"iclr25-{slug}"]
    if not distribution:
        try:
            for ep in metadata.entry_points(group="iclr25.methods"):
                dist = getattr(ep, "dist", None)
                if ep.name == slug and dist is not None:
                    names.append(dist.metadata["Name"])
        except Exception:  # noqa: BLE001 - a broken entry point must not break the page
            pass
    for name in names:
        try:
            md = metadata.metadata(name)
        except metadata.PackageNotFoundError:
            continue
        urls: dict[str, str] = {}
        for entry in md.get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            urls.setdefault(label.strip().lower().replace("-", "").replace(" ", ""), url.strip())
        for cand in (urls.get("paper"), urls.get("homepage"), md.get("Home-page")):
            if cand and urlsplit(cand).scheme in ("http", "https") and urlsplit(cand).netloc:
                return cand
        return None
    return None


def paper_title(slug: str) -> str | None:
    """The title of the paper an installed method implements: ``TITLE`` of its ``_paper`` module (found
    through the method's entry point, else ``iclr25.<slug_with_underscores>._paper``); ``None`` if absent."""
    import importlib

    modules = []
    try:
        for ep in metadata.entry_points(group="iclr25.methods"):
            if ep.name == slug:
                modules.append(ep.value.split(":")[0].rsplit(".", 1)[0])
    except Exception:  # noqa: BLE001 - a broken entry point must not break the page
        pass
    modules.append("iclr25." + slug.replace("-", "_"))
    for mod in modules:
        try:
            title = getattr(importlib.import_module(mod + "._paper"), "TITLE", None)
        except Exception:  # noqa: BLE001 - not installed, or an older package without _paper
            continue
        if isinstance(title, str) and title.strip():
            return title.strip()
    return None


def load_results(results_dir: str | Path) -> list[PackageResults]:
    """Read every ``<results_dir>/<slug>/results.json`` (or ``results_dir/results.json``).

    A ``results.json`` that cannot be read (bad JSON, unknown fields, a stored ``holds`` that
    disagrees with the numbers) becomes a :class:`PackageResults` with ``report=None`` and
    ``error`` saying why, so that the page shows it instead of hiding it.

    Returns:
        One entry per folder, sorted by slug.

    Raises:
        FileNotFoundError: ``results_dir`` does not exist or holds no ``results.json``.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"results folder {root} does not exist; run `iclr25 reproduce --quick` first "
            "(it writes results/<slug>/results.json) or pass --results DIR"
        )
    if (root / "results.json").is_file():
        folders = [root]
    else:
        folders = sorted(d for d in root.iterdir() if d.is_dir() and (d / "results.json").is_file())
    if not folders:
        raise FileNotFoundError(
            f"no <slug>/results.json under {root}; run `iclr25 reproduce --quick --out {root}` first"
        )
    out = []
    for folder in folders:
        path = folder / "results.json"
        slug = folder.name
        raw: dict[str, Any] = {}
        report = None
        error = ""
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(loaded, dict):
                raise ValueError("the top level is not a JSON object")
            raw = loaded
            report = _read_report_tolerant(path, raw)
        except (OSError, ValueError, TypeError, KeyError) as e:
            error = f"{path}: {type(e).__name__}: {e}"
        if report is not None and report.method:
            slug = report.method
        out.append(PackageResults(slug=slug, folder=folder, report=report, raw=raw,
                                  plots=_find_plots(folder), paper=paper_url(slug), error=error))
    return sorted(out, key=lambda r: r.slug)


