"""One self-contained HTML page of every reproduced claim (``iclr25 report``).

:func:`load_results` reads every ``<results>/<slug>/results.json`` (written by
:func:`iclr25.core.results.write_report`) with :func:`iclr25.core.results.read_report`, so
``holds`` is recomputed from the numbers and a hand-edited ``holds`` is refused, and collects
the PNG plots the run wrote in that folder. :func:`render_html` turns them into one HTML page
that needs nothing but a browser: inline CSS, plots embedded as ``data:`` URIs, a small inline
script for the "not holding only" filter, and a Content-Security-Policy that forbids every
remote load (the only links out are the papers' pages, followed only when clicked). Every
string taken from a result (claim names, metrics, notes, paths, metadata) is HTML-escaped.

:func:`compare_results` matches the claims of two result folders by package and claim name and
marks claims whose ``holds`` flipped and numbers (``ours``, ``baseline``) that moved by more than
their seed spread — or, for a number without a spread, by more than a relative tolerance; the
page says which rule applied to each mark.

Optional metadata is read defensively, so results written by older cores still render (absent
fields show "—"): ``cpu_seconds``, ``env`` (python, platform, CPU, GPU, torch, git commit, ...)
and ``seeds`` on the report (looked up on the :class:`~iclr25.core.results.Report`, then in the
JSON, then in ``extra``), and ``spread`` / ``seeds`` on a claim. A claim's ``spread`` is the
standard deviation over seeds of ``ours`` (a number) or a mapping ``{"ours": sd, "baseline": sd}``.

Torch-free: standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._version import __version__
from .results import Claim, Report, _fmt, _paper_cell, read_report

__all__ = [
    "DEFAULT_RTOL",
    "Plot",
    "PackageResults",
    "ClaimChange",
    "load_results",
    "paper_url",
    "compare_results",
    "render_html",
    "write_html_report",
]

#: Relative tolerance for "moved" when a number has no seed spread: |new - old| > rtol * max(|old|, |new|).
DEFAULT_RTOL = 0.05
#: Plots larger than this are listed but not embedded (the page would become unwieldy).
MAX_PLOT_BYTES = 16 * 1024 * 1024
#: Claim fields a newer core may write that only this page reads.
OPTIONAL_CLAIM_KEYS = ("spread", "seeds")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_DASH = "\u2014"
_ENV_ORDER = (
    ("python", "Python"),
    ("platform", "platform"),
    ("cpu", "CPU"),
    ("gpu", "GPU"),
    ("torch", "torch"),
    ("git_commit", "git commit"),
)
_ENV_ALIASES = {
    "python": ("python", "python_version"),
    "platform": ("platform", "os"),
    "cpu": ("cpu", "processor", "cpu_model"),
    "gpu": ("gpu", "gpus", "cuda_device", "device"),
    "torch": ("torch", "torch_version"),
    "git_commit": ("git_commit", "commit", "git", "git_sha"),
}


# ---------------------------------------------------------------------------------------------
# reading


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


# ---------------------------------------------------------------------------------------------
# spread and comparison


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def claim_spread(raw_claim: Mapping[str, Any], claim: Claim | None, key: str) -> float | None:
    """The seed spread (sd) of ``key`` (``"ours"`` or ``"baseline"``) of a claim, if given.

    ``spread`` is read from the :class:`Claim` when it has such a field, else from the JSON
    dict. A number is the spread of ``ours``; a mapping gives one per key. Negative or
    non-finite spreads are ignored (treated as absent).
    """
    s = getattr(claim, "spread", None) if claim is not None else None
    if s is None:
        s = raw_claim.get("spread")
    elif key != "ours":
        return None  # Claim.spread is the sd of the compared quantity (the gap, or ours), not of the baseline
    if isinstance(s, Mapping):
        v = _num(s.get(key))
    else:
        v = _num(s) if key == "ours" else None
    if v is None or not math.isfinite(v) or v < 0:
        return None
    return v


def _claim_seeds(raw_claim: Mapping[str, Any], claim: Claim | None) -> Any:
    s = getattr(claim, "seeds", None) if claim is not None else None
    return s if s is not None else raw_claim.get("seeds")


@dataclass(frozen=True)
class ClaimChange:
    """How one claim differs between an old and a new run.

    Args:
        status: ``"same"``, ``"changed"`` (flipped or moved), ``"new"`` (not in the old run)
            or ``"removed"`` (only in the old run).
        was_holds: ``holds`` in the old run (``None`` for a new claim).
        flipped: whether ``holds`` differs.
        moved: one text per number that moved, naming the rule (seed spread or relative
            tolerance), e.g. ``"ours 0.91 → 0.72: |Δ| 0.19 > spread 0.03 (seed sd)"``.
        old: the old claim (``None`` for a new claim).
    """

    status: str
    was_holds: bool | None = None
    flipped: bool = False
    moved: tuple[str, ...] = ()
    old: Claim | None = None


def _moved(key: str, old: float | None, new: float | None, s_old: float | None,
           s_new: float | None, rtol: float) -> str | None:
    def finite(x: float | None) -> bool:
        return x is not None and math.isfinite(x)

    if not finite(old) and not finite(new):
        return None  # unmeasured (or absent) in both runs
    if not finite(old) or not finite(new):
        return f"{key} {_fmt(old) or 'none'} → {_fmt(new) or 'none'}: measured in one run only"
    assert old is not None and new is not None
    diff = abs(new - old)
    spreads = [s for s in (s_old, s_new) if s is not None]
    if spreads:
        tol = max(spreads)
        if diff > tol:
            return f"{key} {_fmt(old)} → {_fmt(new)}: |Δ| {_fmt(diff)} > spread {_fmt(tol)} (seed sd)"
        return None
    tol = rtol * max(abs(old), abs(new))
    if diff > tol:
        return (f"{key} {_fmt(old)} → {_fmt(new)}: |Δ| {_fmt(diff)} > {rtol:.0%} relative tolerance "
                f"({_fmt(tol)}; no seed spread given)")
    return None


def compare_results(old: Sequence[PackageResults], new: Sequence[PackageResults], *,
                    rtol: float = DEFAULT_RTOL) -> dict[str, dict[str, ClaimChange]]:
    """Compare two runs claim by claim.

    Claims are matched by package slug and claim name. A number (``ours``, ``baseline``) has
    *moved* when ``|new - old|`` exceeds the larger of the two runs' seed spreads for it
    (:func:`claim_spread`), or, when neither run gives a spread, ``rtol * max(|old|, |new|)``;
    a number measured in one run only (NaN or absent in the other) has moved too.

    Args:
        old, new: :func:`load_results` of the two folders.
        rtol: relative tolerance for numbers without a spread (finite, ``>= 0``).

    Returns:
        ``{slug: {claim name: ClaimChange}}`` for every package of ``new``, including
        ``"removed"`` entries for claims only in ``old`` (a package only in ``old`` has all
        its claims removed).

    Raises:
        ValueError: ``rtol`` is negative or not finite.
    """
    if not (isinstance(rtol, (int, float)) and math.isfinite(rtol) and rtol >= 0):
        raise ValueError(f"rtol must be a finite number >= 0, got {rtol!r}")
    old_by = {p.slug: p for p in old}
    out: dict[str, dict[str, ClaimChange]] = {}
    slugs = list(dict.fromkeys([p.slug for p in new] + [p.slug for p in old]))
    new_by = {p.slug: p for p in new}
    for slug in slugs:
        changes: dict[str, ClaimChange] = {}
        o = old_by.get(slug)
        n = new_by.get(slug)
        o_claims = {c.name: (i, c) for i, c in enumerate(o.claims)} if o else {}
        for i, c in enumerate(n.claims if n else []):
            if c.name not in o_claims:
                changes[c.name] = ClaimChange("new")
                continue
            j, oc = o_claims[c.name]
            assert o is not None and n is not None
            moved = []
            for key in ("ours", "baseline"):
                m = _moved(key, getattr(oc, key), getattr(c, key),
                           claim_spread(o.claim_raw(j), oc, key), claim_spread(n.claim_raw(i), c, key), rtol)
                if m:
                    moved.append(m)
            flipped = oc.holds != c.holds
            changes[c.name] = ClaimChange("changed" if flipped or moved else "same", oc.holds,
                                          flipped, tuple(moved), oc)
        for name, (_, oc) in o_claims.items():
            if name not in changes:
                changes[name] = ClaimChange("removed", oc.holds, old=oc)
        out[slug] = changes
    return out


# ---------------------------------------------------------------------------------------------
# rendering

_CSS = """
:root { --ok: #1a7f37; --bad: #c62828; --warn: #9a6700; --line: #d0d7de; --muted: #57606a; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
  max-width: 1400px; padding: 1rem 1.5rem 4rem; color: #1f2328; background: #fff; }
h1 { font-size: 1.6rem; margin: 0.5rem 0; }
h2 { font-size: 1.25rem; margin: 2.5rem 0 0.5rem; padding-top: 0.5rem; border-top: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
.muted, .meta { color: var(--muted); }
table { border-collapse: collapse; width: 100%; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid var(--line); padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f6f8fa; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.note, div.note { white-space: pre-wrap; max-width: 36rem; }
td.note { min-width: 16rem; }
td.name { min-width: 13rem; max-width: 18rem; overflow-wrap: normal; word-break: normal; hyphens: none; }
td.holds .why { font-weight: 400; color: #1f2328; font-size: 0.9em; }
.inside { color: var(--warn); font-size: 0.85em; } .beyond { color: var(--ok); font-size: 0.85em; }
td.note details summary { cursor: pointer; }
.wide { overflow-x: auto; }
code, .name { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.92em; }
.yes { color: var(--ok); font-weight: 600; }
.no { color: var(--bad); font-weight: 600; }
tr.claim.fails td.holds { background: #ffebe9; }
tr.claim.holds td.holds { background: #dafbe1; }
tr.changed td:first-child { border-left: 5px solid var(--warn); }
tr.changed td.change { background: #fff8c5; }
.flip { color: var(--bad); font-weight: 600; }
.moved { color: var(--warn); }
.sd { color: var(--muted); }
.seeds { color: var(--muted); font-size: 0.85em; white-space: normal; }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; border: 1px solid var(--line); padding: 0.5rem; flex: 0 1 640px; max-width: 100%; }
figure img { max-width: 100%; height: auto; display: block; }
tr.plotrow td { background: #fafbfc; }
figure .close { display: none; }
figure:target { position: fixed; inset: 2vh 2vw; z-index: 10; background: #fff; overflow: auto; max-width: none;
  box-shadow: 0 0 0 100vmax rgba(0, 0, 0, 0.5); }
figure:target img { max-width: none; }
figure:target .close { display: block; text-align: right; }
tr.plotrow figure { flex: 0 1 900px; }
figure.broken { border-color: var(--bad); }
figcaption { color: var(--muted); font-size: 0.85em; margin-top: 0.3rem; }
.banner { padding: 0.5rem 0.8rem; border: 1px solid var(--bad); background: #ffebe9; margin: 0.5rem 0; }
.controls { margin: 0.8rem 0; display: flex; gap: 1.5rem; }
dl.env { display: grid; grid-template-columns: max-content 1fr; gap: 0.1rem 1rem; margin: 0.3rem 0; }
dl.env dt { color: var(--muted); }
dl.env dd { margin: 0; font-family: ui-monospace, monospace; font-size: 0.9em; word-break: break-all; }
.only-failing tr.claim.holds, .only-failing tr.plotrow.holds, .only-failing tr.pkg-row.all-hold, .only-failing section.pkg.all-hold,
.only-changed tr.claim:not(.changed), .only-changed tr.plotrow, .only-changed section.pkg:not(.has-changes) { display: none; }
""".strip()

_JS = """
(function () {
  var body = document.body;
  var controls = document.getElementById("controls");
  if (controls) { controls.hidden = false; }
  [["only-failing", "only-failing"], ["only-changed", "only-changed"]].forEach(function (p) {
    var box = document.getElementById(p[0]);
    if (box) { box.addEventListener("change", function () { body.classList.toggle(p[1], box.checked); }); }
  });
  window.addEventListener("load", function () {
    var imgs = Array.prototype.slice.call(document.querySelectorAll("img.plot"));
    Promise.all(imgs.map(function (img) {
      var ok = img.complete && img.naturalWidth > 0;
      var check = ok && img.decode ? img.decode().then(function () { return true; }, function () { return false; })
                                   : Promise.resolve(ok);
      return check.then(function (good) {
        img.setAttribute("data-decoded", good ? "1" : "0");
        img.setAttribute("data-natural-size", img.naturalWidth + "x" + img.naturalHeight);
        if (!good) { img.parentNode.classList.add("broken"); }
        return good;
      });
    })).then(function (res) {
      var bad = res.filter(function (g) { return !g; }).length;
      body.setAttribute("data-images-decoded", (imgs.length - bad) + "/" + imgs.length);
      if (bad) {
        var w = document.getElementById("image-warning");
        w.textContent = bad + " plot(s) on this page could not be decoded by this browser.";
        w.hidden = false;
      }
    });
  });
})();
""".strip()


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _e(x: Any) -> str:
    """HTML-escape any value as text (quotes too, so it is safe in attributes)."""
    return html.escape("" if x is None else str(x), quote=True)


def _dash(x: Any) -> str:
    return _DASH if x in (None, "", [], {}) else _e(x)


def _anchor(slug: str, used: set[str]) -> str:
    base = "pkg-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", slug).strip("-") or "x")
    a, k = base, 2
    while a in used:
        a, k = f"{base}-{k}", k + 1
    used.add(a)
    return a


def _seconds(x: Any) -> str:
    v = _num(x)
    if v is None or not math.isfinite(v):
        return _DASH
    if v < 60:
        return f"{v:.1f} s"
    m, s = divmod(round(v), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def _value(x: float | None, sd: float | None = None) -> str:
    if x is None:
        return ""
    if not math.isfinite(x):
        return '<span class="no">nan</span>'
    s = _e(_fmt(x))
    if sd is not None:
        s += f' <span class="sd">± {_e(_fmt(sd))}</span>'
    return s


def _fmt_any(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return _fmt(v)
    if isinstance(v, Mapping):
        return ", ".join(f"{k}: {_fmt_any(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt_any(x) for x in v)
    return str(v)


def _is_headline(c: Claim) -> bool:
    return c.kind == "headline"


def _claim_id(name: str) -> str:
    """A claim id that wraps only after ``/`` or ``_`` (never mid-word): escaped, with ``<wbr>`` there."""
    return re.sub(r"([/_])", r"\1<wbr>", _e(name))


def _rule(c: Claim) -> str:
    """The comparison that decides the claim, in words: ``"≥ baseline + 0.02"``, ``"≤ 0.05"``."""
    op = "≥" if c.higher_is_better else "≤"
    parts = []
    if c.baseline is not None:
        m = f" {'+' if c.higher_is_better else '−'} {_fmt(c.margin)}" if c.margin else ""
        parts.append(f"{op} baseline{m}")
    if c.threshold is not None:
        parts.append(f"{op} {_fmt(c.threshold)}")
    return " and ".join(parts)


def _gap_cell(c: Claim) -> str:
    g = c.gap
    if g is None:
        return _DASH
    out = _e(_fmt(g))
    if c.spread is not None:
        out += f' <span class="sd">± {_e(_fmt(c.spread))}</span>'
        w = c.within_spread
        out += ('<div class="inside">inside the seed spread</div>' if w else
                '<div class="beyond">beyond the seed spread</div>')
    if c.n_seeds:
        out += f'<div class="seeds">{c.n_seeds} seed{"s" if c.n_seeds != 1 else ""}</div>'
    return out


def _note_cell(note: str) -> str:
    """A short note as text; a long one folded (its first line as the summary)."""
    if not note:
        return ""
    if len(note) <= 160 and "\n" not in note:
        return _e(note)
    first = note.split("\n", 1)[0]
    head = first if len(first) <= 120 else first[:117].rsplit(" ", 1)[0] + " …"
    return f"<details><summary>{_e(head)}</summary>{_e(note)}</details>"


def _why_not(c: Claim) -> str:
    """Which comparison failed, in words computed from the numbers."""
    if c.ours is None or not math.isfinite(c.ours):
        return "not measured (ours is NaN)"
    parts = []
    if c.baseline is not None:
        if not math.isfinite(c.baseline):
            parts.append("baseline not measured (NaN)")
        else:
            diff = c.ours - c.baseline if c.higher_is_better else c.baseline - c.ours
            if diff < c.margin:
                parts.append(f"{'ours − baseline' if c.higher_is_better else 'baseline − ours'} = "
                             f"{_fmt(diff)} < margin {_fmt(c.margin)}")
    if c.threshold is not None:
        ok = c.ours >= c.threshold if c.higher_is_better else c.ours <= c.threshold
        if not ok:
            parts.append(f"ours {_fmt(c.ours)} {'<' if c.higher_is_better else '>'} threshold {_fmt(c.threshold)}")
    return "; ".join(parts)


def _env_rows(p: PackageResults) -> list[tuple[str, str]]:
    env = p.meta("env")
    env = env if isinstance(env, Mapping) else {}
    libs = next((env[k] for k in ("libraries", "versions", "packages") if isinstance(env.get(k), Mapping)), {})
    rows: list[tuple[str, str]] = []
    used = {a for aliases in _ENV_ALIASES.values() for a in aliases}
    for key, label in _ENV_ORDER:
        val = None
        for alias in _ENV_ALIASES[key]:
            if env.get(alias) not in (None, ""):
                val = env[alias]
                break
        if val is None and key == "torch" and libs.get("torch"):
            val = libs["torch"]
        if val is None and key == "python" and p.report is not None:
            val = p.report.python  # written by every core since 0.1.0
        rows.append((label, _fmt_any(val)))
    for k, v in env.items():
        if k not in used:
            rows.append((str(k), _fmt_any(v)))
    return rows


def _claim_row(p: PackageResults, i: int, c: Claim, change: ClaimChange | None, compare: bool) -> str:
    raw = p.claim_raw(i)
    seeds = _claim_seeds(raw, c)
    legacy = raw.get("spread") if isinstance(raw.get("spread"), Mapping) else {}
    ours = _value(c.ours, _num(legacy.get("ours")) if legacy else None)
    if seeds not in (None, [], {}):
        ours += f'<div class="seeds">seeds: {_e(_fmt_any(seeds))}</div>'
    cls = ["claim", "holds" if c.holds else "fails", f"kind-{c.kind}"]
    verdict = "holds" if c.holds else "does not hold"
    why = "" if c.holds else _why_not(c)
    if c.within_spread:
        why = (why + "; " if why else "") + "the gap is inside the seed spread"
    paper = _e(_paper_cell(c)) or _DASH
    cells = [
        f'<td class="name">{_claim_id(c.name)}</td>',
        f'<td class="kind">{_e(c.kind)}</td>',
        f"<td>{_e(c.metric)}</td>",
        f'<td class="paper">{paper}</td>',
        f'<td class="num ours">{ours}</td>',
        f'<td class="num">{_value(c.baseline, _num(legacy.get("baseline")) if legacy else None)}</td>',
        f'<td class="rule">{_e(_rule(c))}</td>',
        f'<td class="num gap">{_gap_cell(c)}</td>',
        f'<td class="holds {"yes" if c.holds else "no"}">{verdict}'
        + (f'<div class="why">{_e(why)}</div>' if why else "") + "</td>",
        f'<td class="note">{_note_cell(c.note)}</td>',
    ]
    if compare:
        marks = []
        if change is None or change.status == "new":
            marks.append('<span class="moved">new claim (not in the old run)</span>')
        else:
            if change.flipped:
                marks.append(f'<span class="flip">holds flipped: {"yes" if change.was_holds else "no"} → '
                             f'{"yes" if c.holds else "no"}</span>')
            marks += [f'<span class="moved">{_e(m)}</span>' for m in change.moved]
        if marks:
            cls.append("changed")
        cells.append(f'<td class="change">{"<br>".join(marks)}</td>')
    return (f'<tr class="{" ".join(cls)}" data-claim="{_e(c.name)}">' + "".join(cells) + "</tr>")


_CLAIM_HEAD = ["claim", "kind", "metric", "paper", "ours", "baseline", "rule", "gap ± seed spread", "verdict",
               "note"]


def _section(p: PackageResults, anchor: str, changes: Mapping[str, ClaimChange] | None,
             crashed: bool) -> str:
    compare = changes is not None
    claims = p.claims
    held = sum(c.holds for c in claims)
    cls = ["pkg"]
    if p.report is not None and held == len(claims):
        cls.append("all-hold")
    if compare and any(ch.status != "same" for ch in (changes or {}).values()):
        cls.append("has-changes")
    name = p.meta("paper_title") or paper_title(p.slug)
    label = _e(name) if name else "paper"
    title = (f'<a href="{_e(p.paper)}" rel="noopener noreferrer" target="_blank">{label}</a>' if p.paper
             else (label if name else ""))
    out = [f'<section class="{" ".join(cls)}" id="{anchor}" data-slug="{_e(p.slug)}">',
           f'<h2>{_e(p.slug)} <span class="muted">{title}</span></h2>']
    if crashed:
        out.append('<p class="banner">This method crashed in the last run (see its traceback on '
                   "stderr); what is shown below, if anything, is from an earlier run — check its "
                   "date.</p>")
    if p.report is None:
        out.append(f'<p class="banner">results.json could not be read: {_e(p.error)}</p></section>')
        return "\n".join(out)
    r = p.report
    dist = f"iclr25-{r.method}" if r.method else p.slug
    out.append(f'<p class="meta">{_e(dist)} {_e(r.version)} · {"quick (CPU scale)" if r.quick else "full"} · '
               f"{held}/{len(claims)} claims hold · wall {_seconds(r.seconds)} · CPU "
               f"{_seconds(p.meta('cpu_seconds'))} · {_e(r.created)} · <code>{_e(p.folder)}</code></p>")
    head = _CLAIM_HEAD + (["change"] if compare else [])
    by_name = {pl.name: pl for pl in p.plots}
    shown: set[str] = set()
    rows = []
    for i, c in enumerate(claims):
        rows.append(_claim_row(p, i, c, (changes or {}).get(c.name), compare))
        if c.plot and c.plot not in shown:  # the plot sits under the first claim that names it
            shown.add(c.plot)
            users = [d for d in claims if d.plot == c.plot]
            rows.append(_plot_row(anchor, c.plot, by_name.get(c.plot), users, len(head)))
    out.append('<div class="wide"><table class="claims"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head)
               + "</tr></thead><tbody>")
    out += rows
    out.append("</tbody></table></div>")
    if compare:
        removed = [(n, ch) for n, ch in (changes or {}).items() if ch.status == "removed"]
        if removed:
            out.append("<h3>Claims only in the old run</h3><ul class=\"removed\">")
            out += [f'<li><span class="name">{_e(n)}</span> (held: {"yes" if ch.was_holds else "no"})</li>'
                    for n, ch in removed]
            out.append("</ul>")
    rest = [pl for pl in p.plots if pl.name not in shown]
    out.append("<h3>Other plots</h3>" if shown else "<h3>Plots</h3>")
    if rest:
        out.append('<div class="plots">')
        out += [_figure(anchor, pl) for pl in rest]
        out.append("</div>")
    elif shown:
        out.append('<p class="muted">None: every plot of this run is shown beside its claim above.</p>')
    else:
        out.append('<p class="muted">No PNG in this results folder.</p>')
    out.append("<h3>Run environment</h3><dl class=\"env\">")
    seeds = p.meta("seeds")
    env = [("package", f"{dist} {r.version}"), *_env_rows(p),
           ("seeds", _fmt_any(seeds) if seeds is not None else ""),
           ("mode", "quick (CPU scale)" if r.quick else "full"),
           ("wall time", _seconds(r.seconds)), ("CPU time", _seconds(p.meta("cpu_seconds"))),
           ("written", r.created)]
    out += [f"<dt>{_e(k)}</dt><dd>{_dash(v)}</dd>" for k, v in env]
    out.append("</dl></section>")
    return "\n".join(out)


def _figure_id(anchor: str, name: str) -> str:
    return f"{anchor}-fig-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "x")


def _figure(anchor: str, pl: Plot, caption: str = "") -> str:
    """One embedded plot; clicking it shows it full size over the page (CSS ``:target``, no script), so a
    multi-panel figure stays readable; "close" (or the browser's back) returns."""
    fid = _figure_id(anchor, pl.name)
    cap = _e(pl.name) + (f" — {caption}" if caption else "")
    if pl.data is None:
        return f'<figure class="broken" id="{fid}"><figcaption>{_e(pl.name)}: {_e(pl.problem)}</figcaption></figure>'
    uri = "data:image/png;base64," + base64.b64encode(pl.data).decode("ascii")
    wh = _png_size(pl.data)
    size = f' width="{wh[0]}" height="{wh[1]}"' if wh else ""
    return (f'<figure id="{fid}"><a class="close" href="#{anchor}">close ✕</a>'
            f'<a class="enlarge" href="#{fid}" title="click to enlarge">'
            f'<img class="plot" src="{uri}" alt="{_e(pl.name)}"{size}></a>'
            f"<figcaption>{cap}</figcaption></figure>")


def _plot_row(anchor: str, name: str, pl: Plot | None, users: Sequence[Claim], ncols: int) -> str:
    """A table row under a claim holding the plot it names (hidden by the filter when all its claims hold)."""
    state = "holds" if all(c.holds for c in users) else "fails"
    names = ", ".join(c.name for c in users)
    if pl is None:
        fig = (f'<figure class="broken" id="{_figure_id(anchor, name)}"><figcaption>{_e(name)}: named by '
               f"{_e(names)} but not found in this results folder</figcaption></figure>")
    else:
        fig = _figure(anchor, pl, f"supports {names}")
    return f'<tr class="plotrow {state}"><td colspan="{ncols}"><div class="plots">{fig}</div></td></tr>'


def _png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR chunk, or ``None`` if it has none."""
    if len(data) >= 24 and data[12:16] == b"IHDR":
        w, h = struct.unpack(">II", data[16:24])
        if 0 < w < 2**31 and 0 < h < 2**31:
            return int(w), int(h)
    return None


def render_html(results: Sequence[PackageResults], *, title: str = "iclr25 reproduction report",
                source: str | None = None, compare: Sequence[PackageResults] | None = None,
                rtol: float = DEFAULT_RTOL, crashed: Iterable[str] = ()) -> str:
    """The page as a string (see the module docstring for what it holds).

    Args:
        results: :func:`load_results` of the run to show.
        title: the page title (escaped).
        source: where the results came from, shown in the header (escaped).
        compare: the *old* run's results; when given, every claim of ``results`` is marked
            against it (:func:`compare_results`) and a "changed only" filter is added.
        rtol: relative tolerance for numbers without a seed spread, in compare mode.
        crashed: slugs whose method crashed in the run that wrote ``results``; their sections
            carry a warning that what they show is older.

    Returns:
        A complete HTML5 document (UTF-8 text).
    """
    changes = compare_results(compare, results, rtol=rtol) if compare is not None else None
    crashed = set(crashed)
    used: set[str] = set()
    anchors = {p.slug: _anchor(p.slug, used) for p in results}
    all_claims = [c for p in results for c in p.claims]
    held = sum(c.holds for c in all_claims)

    ov = ['<table class="overview"><thead><tr><th>package</th><th>paper</th><th>claims holding</th>'
          "<th>headline claims hold</th><th>mode</th><th>wall time</th><th>CPU time</th>"
          + ("<th>changes</th>" if changes is not None else "") + "</tr></thead><tbody>"]
    for p in results:
        ptitle = p.meta("paper_title") or paper_title(p.slug)
        text = _e(ptitle) if ptitle else (_e(_short_url(p.paper)) if p.paper else "")
        link = (f'<a href="{_e(p.paper)}" rel="noopener noreferrer" target="_blank">{text}</a>' if p.paper
                else (text or _DASH))
        name = f'<a href="#{anchors[p.slug]}">{_e(p.slug)}</a>' + (' <span class="no">crashed</span>'
                                                                   if p.slug in crashed else "")
        if p.report is None:
            ov.append(f'<tr class="pkg-row unreadable"><td>{name}</td><td>{link}</td>'
                      f'<td colspan="{6 if changes is not None else 5}" class="no">results.json unreadable (see below)</td></tr>')
            continue
        cl = p.claims
        k = sum(c.holds for c in cl)
        heads = [c for c in cl if _is_headline(c)]
        hk = sum(c.holds for c in heads)
        if not heads:
            head_cell = f"<td>{_DASH}</td>"
        else:
            ok = hk == len(heads)
            head_cell = f'<td class="{"yes" if ok else "no"}">{"yes" if ok else "no"} ({hk}/{len(heads)})</td>'
        row_cls = "pkg-row all-hold" if k == len(cl) else "pkg-row"
        cells = [f"<td>{name}</td>", f"<td>{link}</td>",
                 f'<td class="num {"yes" if k == len(cl) else "no"}">{k}/{len(cl)}</td>', head_cell,
                 f"<td>{'quick' if p.report.quick else 'full'}</td>",
                 f'<td class="num">{_seconds(p.report.seconds)}</td>',
                 f'<td class="num">{_seconds(p.meta("cpu_seconds"))}</td>']
        if changes is not None:
            ch = changes.get(p.slug, {})
            flips = sum(c.flipped for c in ch.values())
            moved = sum(bool(c.moved) for c in ch.values())
            new = sum(c.status == "new" for c in ch.values())
            gone = sum(c.status == "removed" for c in ch.values())
            bits = [f"{n} {w}" for n, w in ((flips, "flipped"), (moved, "moved"), (new, "new"), (gone, "removed")) if n]
            cells.append(f'<td class="{"flip" if flips else ""}">{_e(", ".join(bits)) or "none"}</td>')
        ov.append(f'<tr class="{row_cls}" data-slug="{_e(p.slug)}">' + "".join(cells) + "</tr>")
    ncol = 6 if changes is not None else 5
    for slug in sorted(crashed - {p.slug for p in results}):
        ov.append(f'<tr class="pkg-row crashed"><td>{_e(slug)} <span class="no">crashed</span></td><td>{_DASH}</td>'
                  f'<td colspan="{ncol}" class="no">crashed before writing results.json</td></tr>')
    ov.append("</tbody></table>")

    compare_note = ""
    if changes is not None:
        old_slugs = {p.slug for p in compare or ()}
        gone_pkgs = sorted(old_slugs - {p.slug for p in results})
        compare_note = (
            '<p class="meta">Compared with an older run: <span class="flip">holds flipped</span> marks '
            "a claim whose verdict changed; a number is marked <span class=\"moved\">moved</span> when "
            "|new − old| exceeds its seed spread (the larger sd of the two runs) where a claim gives one, "
            f"else {rtol:.0%} of max(|old|, |new|) (relative tolerance); each mark says which rule applied.</p>"
        )
        if gone_pkgs:
            compare_note += ('<p class="meta">Packages only in the old run: '
                             + ", ".join(f"<code>{_e(s)}</code>" for s in gone_pkgs) + "</p>")

    sections = [_section(p, anchors[p.slug], changes.get(p.slug) if changes is not None else None,
                         p.slug in crashed) for p in results]
    controls = ['<div class="controls" id="controls" hidden>',
                '<label><input type="checkbox" id="only-failing"> not holding only</label>']
    if changes is not None:
        controls.append('<label><input type="checkbox" id="only-changed"> changed only</label>')
    controls.append("</div>")
    csp = (f"default-src 'none'; img-src data:; style-src {_csp_hash(_CSS)}; "
           f"script-src {_csp_hash(_JS)}; base-uri 'none'; form-action 'none'")
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">',
        '<meta name="referrer" content="no-referrer">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{held}/{len(all_claims)} claims hold across {len(results)} package(s). '
        f"Generated {_e(generated)} by iclr25-core {_e(__version__)}"
        + (f" from <code>{_e(source)}</code>" if source else "") + ". "
        "<code>holds</code> is computed from the measured numbers; each claim shows the paper's value "
        "(or \u201cdirection only\u201d), ours, the baseline, the rule, and the gap with its seed spread. "
        "Headline claims are those of kind <code>headline</code>.</p>",
        compare_note,
        '<p class="banner" id="image-warning" hidden></p>',
        *controls,
        *ov,
        *sections,
        f"<script>{_JS}</script>",
        "</body></html>",
    ]
    return "\n".join(x for x in parts if x) + "\n"


def _short_url(url: str) -> str:
    u = urlsplit(url)
    return (u.netloc + u.path).rstrip("/") + (("?" + u.query) if u.query else "")


def write_html_report(results_dir: str | Path, out: str | Path | None = None, *,
                      results: Sequence[PackageResults] | None = None,
                      compare: str | Path | None = None, rtol: float = DEFAULT_RTOL,
                      crashed: Iterable[str] = ()) -> Path:
    """Read ``results_dir`` and write the page to ``out`` (default ``results_dir/report.html``).

    Args:
        results_dir: a folder of ``<slug>/results.json`` (the run shown).
        results: :func:`load_results` of ``results_dir`` when the caller already has it.
        out: the HTML file to write (parent folders are created); written atomically.
        compare: an *older* results folder to compare with (see :func:`compare_results`).
        rtol: relative tolerance for numbers without a seed spread (compare mode).
        crashed: slugs that crashed in the run (their sections say so).

    Returns:
        The path written.

    Raises:
        FileNotFoundError: a results folder is missing or holds no ``results.json``.
        ValueError: ``rtol`` is negative or not finite.
    """
    root = Path(results_dir)
    new = list(results) if results is not None else load_results(root)
    old = load_results(compare) if compare is not None else None
    source = str(root) if old is None else f"{compare} → {root}"
    page = render_html(new, source=source, compare=old, rtol=rtol, crashed=crashed,
                       title="iclr25 reproduction report" + (" (comparison)" if old is not None else ""))
    dest = Path(out) if out is not None else root / ("compare.html" if compare is not None else "report.html")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, dest)
    return dest
