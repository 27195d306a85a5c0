"""The cells of the page: a claim's row (paper, ours, baseline, rule, gap with seed spread, verdict,
note), a plot's figure and row, the run environment rows.

Part of :mod:`iclr25.core.report` (see its docstring)."""

from __future__ import annotations

import base64
import html
import math
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from ..results import Claim, _fmt, _paper_cell
from .compare import ClaimChange, _claim_seeds, _num
from .load import PackageResults, Plot

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
        f'<td class="metric">{_e(c.metric)}</td>',
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


