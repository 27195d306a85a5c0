"""The page: one section per package, the overview, the filters; :func:`render_html` and
:func:`write_html_report`.

Part of :mod:`iclr25.core.report` (see its docstring)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from .._version import __version__
from .cells import (
    _CLAIM_HEAD,
    _DASH,
    _anchor,
    _claim_row,
    _dash,
    _e,
    _env_rows,
    _figure,
    _fmt_any,
    _is_headline,
    _plot_row,
    _seconds,
)
from .compare import DEFAULT_RTOL, ClaimChange, compare_results
from .load import PackageResults, load_results, paper_title
from .style import _CSS, _JS, _csp_hash


def _section(p: PackageResults, anchor: str, changes: Mapping[str, ClaimChange] | None,
             crashed: bool, reason: str = "") -> str:
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
        out.append('<p class="banner">This method crashed in the last run'
                   + (f" ({_e(reason)})" if reason else "") + " (see its traceback on "
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


def render_html(results: Sequence[PackageResults], *, title: str = "iclr25 reproduction report",
                source: str | None = None, compare: Sequence[PackageResults] | None = None,
                rtol: float = DEFAULT_RTOL, crashed: Iterable[str] | Mapping[str, str] = ()) -> str:
    """The page as a string (see the module docstring for what it holds).

    Args:
        results: :func:`load_results` of the run to show.
        title: the page title (escaped).
        source: where the results came from, shown in the header (escaped).
        compare: the *old* run's results; when given, every claim of ``results`` is marked
            against it (:func:`compare_results`) and a "changed only" filter is added.
        rtol: relative tolerance for numbers without a seed spread, in compare mode.
        crashed: slugs whose method crashed in the run that wrote ``results``; their sections
            carry a warning that what they show is older. A mapping ``{slug: reason}`` (one line, e.g.
            ``"DataNotFoundError: ..."``) also shows why.

    Returns:
        A complete HTML5 document (UTF-8 text).
    """
    changes = compare_results(compare, results, rtol=rtol) if compare is not None else None
    reasons = {k: " ".join(str(v).split()) for k, v in crashed.items()} if isinstance(crashed, Mapping) else {}
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
                  f'<td colspan="{ncol}" class="no">crashed before writing results.json'
                  + (f': <span class="muted">{_e(reasons[slug])}</span>' if reasons.get(slug) else "")
                  + "</td></tr>")
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
                         p.slug in crashed, reasons.get(p.slug, "")) for p in results]
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
                      crashed: Iterable[str] | Mapping[str, str] = ()) -> Path:
    """Read ``results_dir`` and write the page to ``out`` (default ``results_dir/report.html``).

    Args:
        results_dir: a folder of ``<slug>/results.json`` (the run shown).
        results: :func:`load_results` of ``results_dir`` when the caller already has it.
        out: the HTML file to write (parent folders are created); written atomically.
        compare: an *older* results folder to compare with (see :func:`compare_results`).
        rtol: relative tolerance for numbers without a seed spread (compare mode).
        crashed: slugs that crashed in the run (their sections say so), or ``{slug: reason}``.

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
