"""Reproduction claims and reports.

A :class:`Claim` is one of a paper's claims measured at the scale we can afford: the number we
measured (``ours``), and the comparison that decides whether the claim holds — against a
``baseline`` measured on the same data and seed (ours must beat it by ``margin`` in the stated
direction), against a fixed ``threshold`` (ours must be on its right side), or both.
``holds`` is a *computed* property: it is never stored by hand, and :func:`Claim.from_dict`
ignores (but cross-checks) a ``holds`` field it is given.

A :class:`Report` bundles a method's claims with run metadata and is written as
``results.json`` (machine-readable, round-trips through :meth:`Report.from_json`) and
``results.md`` (a Markdown table for READMEs).
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["Claim", "CLAIM_KINDS", "Report", "claims_table", "infer_kind", "write_report", "read_report"]

_CLAIM_FIELDS = (
    "name",
    "metric",
    "ours",
    "baseline",
    "threshold",
    "higher_is_better",
    "margin",
    "paper",
    "note",
    "kind",
    "paper_value",
    "paper_ref",
    "spread",
    "n_seeds",
    "plot",
)

#: What a claim is for: the paper's result (headline), the intermediate quantity its argument rests on
#: (mechanism), a check that the setup is what it should be (sanity), or a property of the software
#: (engineering: such checks belong in tests, and the report marks them).
CLAIM_KINDS = ("headline", "mechanism", "sanity", "engineering")
_KIND_FROM_PREFIX = {"mechanism": "mechanism", "sanity": "sanity", "invariant": "sanity"}


def infer_kind(name: str) -> str:
    """The kind a claim name's first segment implies: ``mechanism/...`` -> mechanism,
    ``sanity/...``/``invariant/...`` -> sanity, anything else -> headline."""
    return _KIND_FROM_PREFIX.get(name.split("/", 1)[0], "headline")


def _finite(x: float | None) -> bool:
    """Not None, NaN or ±inf (a censored or diverged measurement never supports a claim)."""
    return x is not None and math.isfinite(x)


@dataclass(frozen=True)
class Claim:
    """One reproduced claim.

    Args:
        name: stable identifier, ``group/short_name`` (e.g. ``"badnets/tpr_gt_spectral"``).
        metric: what ``ours`` measures, with its unit (e.g. ``"TPR (%)"``).
        ours: the measured value of our implementation of the paper's method (float; NaN
            when it could not be measured, in which case the claim does not hold).
        baseline: the same metric measured for the baseline the paper compares with, on the
            same data and seed; ``None`` for a threshold-only claim.
        threshold: a fixed bound ``ours`` must reach; ``None`` for a baseline-only claim.
        higher_is_better: direction of the comparison for both baseline and threshold.
        margin: with a baseline, ``ours`` must beat it by at least this much (same units);
            ``0`` means "at least as good".
        paper: the figure the paper reports for this claim, as text (e.g. ``"96.66 TPR"``).
        note: free text: scale, caveats, explanation when the claim does not hold (computed
            from the numbers, never fixed text).
        kind: one of :data:`CLAIM_KINDS`; ``""`` infers it from the name (:func:`infer_kind`).
        paper_value: the paper's number for ``ours`` (same metric and units), or ``None`` when the
            paper gives none (then ``paper_ref`` says ``"direction only"``).
        paper_ref: where the paper's number or statement is (``"Table 2"``, ``"Fig. 3"``,
            ``"Sec. 5.1, direction only"``).
        spread: the seed standard deviation (or standard error) of the compared quantity as the
            verdict uses it: of the gap ``ours - baseline`` for a baseline claim, of ``ours`` for a
            threshold-only claim. ``None`` when the run has one seed.
        n_seeds: how many seeds ``ours`` (and the spread) come from.
        plot: the PNG that shows this claim, as a path relative to the package's results folder
            (e.g. ``"asr_vs_sigma.png"``; ``""`` for none). The HTML report puts the plot beside the
            claim (:mod:`iclr25.core.report`); a claim names at most one plot, a plot may serve several.

    Raises:
        ValueError: if neither ``baseline`` nor ``threshold`` is given (nothing to decide),
            ``margin`` or ``spread`` is negative, ``n_seeds`` < 1, or ``kind`` is unknown.
    """

    name: str
    metric: str
    ours: float
    baseline: float | None = None
    threshold: float | None = None
    higher_is_better: bool = True
    margin: float = 0.0
    paper: str = ""
    note: str = ""
    kind: str = ""
    paper_value: float | None = None
    paper_ref: str = ""
    spread: float | None = None
    n_seeds: int | None = None
    plot: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Claim.name must be a non-empty string")
        if self.baseline is None and self.threshold is None:
            raise ValueError(
                f"Claim {self.name!r}: give a baseline or a threshold (or both); "
                "otherwise 'holds' cannot be computed"
            )
        if self.margin < 0:
            raise ValueError(f"Claim {self.name!r}: margin must be >= 0, got {self.margin}")
        # normalise numeric types (numpy / torch scalars -> float) so JSON round-trips
        for f in ("ours", "baseline", "threshold", "margin", "paper_value", "spread"):
            v = getattr(self, f)
            if v is not None:
                object.__setattr__(self, f, float(v))
        object.__setattr__(self, "higher_is_better", bool(self.higher_is_better))
        kind = self.kind or infer_kind(self.name)
        if kind not in CLAIM_KINDS:
            raise ValueError(f"Claim {self.name!r}: kind must be one of {CLAIM_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "kind", kind)
        if self.spread is not None and not (self.spread >= 0):  # NaN fails too
            raise ValueError(f"Claim {self.name!r}: spread must be a number >= 0 (or None), got {self.spread}")
        if self.n_seeds is not None:
            if isinstance(self.n_seeds, bool) or int(self.n_seeds) != self.n_seeds or self.n_seeds < 1:
                raise ValueError(f"Claim {self.name!r}: n_seeds must be an integer >= 1, got {self.n_seeds!r}")
            object.__setattr__(self, "n_seeds", int(self.n_seeds))
        if not isinstance(self.plot, str) or self.plot.startswith("/") or ".." in self.plot.split("/"):
            raise ValueError(f"Claim {self.name!r}: plot must be a path relative to the results folder "
                             f"(e.g. 'curve.png'), got {self.plot!r}")

    @property
    def gap(self) -> float | None:
        """The compared difference in the claim's direction: ``ours - baseline`` (``baseline - ours``
        when lower is better), or against the threshold for a threshold-only claim; ``None`` if not
        finite. Positive means ours is on the claimed side."""
        ref = self.baseline if self.baseline is not None else self.threshold
        if ref is None or not (_finite(self.ours) and _finite(ref)):
            return None
        return self.ours - ref if self.higher_is_better else ref - self.ours

    @property
    def within_spread(self) -> bool | None:
        """Whether the gap is inside the seed spread (``|gap| <= spread``): a verdict that seeds could
        flip. ``None`` when no spread was measured (one seed) or the gap is not finite."""
        g = self.gap
        if self.spread is None or g is None:
            return None
        return bool(abs(g) <= self.spread)

    @property
    def holds(self) -> bool:
        """Whether the measured numbers support the claim (computed, never stored).

        With a baseline: ``ours - baseline >= margin`` (or ``baseline - ours >= margin`` when
        lower is better). With a threshold: ``ours >= threshold`` (``<=`` when lower is better).
        Both must pass when both are given. A NaN or ±inf anywhere means the claim does not
        hold (JSON cannot store either; ``to_dict`` writes ``None``, so the JSON recomputes the same).
        The comparisons are exact floating-point ones, with no tolerance, so that anyone
        recomputing ``holds`` from the JSON numbers gets the same answer.
        """
        if not _finite(self.ours):
            return False
        ok = True
        if self.baseline is not None:
            if not _finite(self.baseline):
                return False
            diff = self.ours - self.baseline if self.higher_is_better else self.baseline - self.ours
            ok &= diff >= self.margin
        if self.threshold is not None:
            ok &= self.ours >= self.threshold if self.higher_is_better else self.ours <= self.threshold
        return bool(ok)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the fields above plus the computed ``holds``. NaN and ±inf become ``None``."""
        d = {k: getattr(self, k) for k in _CLAIM_FIELDS}
        for k in ("ours", "baseline", "threshold"):
            if d[k] is not None and not _finite(d[k]):
                d[k] = None
        if d["paper_value"] is not None and not _finite(d["paper_value"]):
            d["paper_value"] = None
        d["within_spread"] = self.within_spread
        d["holds"] = self.holds
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Claim:
        """Inverse of :meth:`to_dict`. ``holds`` is recomputed; a stored ``holds`` that
        disagrees with the numbers raises ``ValueError`` (a hand-edited result)."""
        unknown = set(d) - set(_CLAIM_FIELDS) - {"holds", "within_spread"}
        if unknown:
            raise ValueError(f"Claim: unknown field(s) {sorted(unknown)}")
        kw = {k: d[k] for k in _CLAIM_FIELDS if k in d}
        if kw.get("ours") is None:
            kw["ours"] = float("nan")
        if kw.get("baseline") is None and kw.get("threshold") is None:
            # a valid claim has one of them: a null here was a NaN/inf baseline written as null
            kw["baseline"] = float("nan")
        c = cls(**kw)
        if "holds" in d and bool(d["holds"]) != c.holds:
            raise ValueError(
                f"Claim {c.name!r}: stored holds={d['holds']} disagrees with the numbers ({c.holds})"
            )
        return c


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    if not _finite(x):
        return str(float(x))  # "nan", "inf", "-inf"
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


def _cell(text: str) -> str:
    """Escape a Markdown table cell: pipes and line breaks would break the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def _paper_cell(c: Claim) -> str:
    """The paper's value and where it is: ``"96.66 (Table 2)"``; the free-text ``paper`` when no number."""
    ref = f" ({c.paper_ref})" if c.paper_ref else ""
    if c.paper_value is not None:
        return f"{_fmt(c.paper_value)}{ref}"
    return (c.paper + ref) if c.paper else (c.paper_ref or "")


def _spread_cell(c: Claim) -> str:
    """``"±0.02 (3 seeds), gap inside"`` / ``"... gap beyond"``; ``""`` without a spread."""
    if c.spread is None:
        return "1 seed" if c.n_seeds == 1 else ""
    seeds = f" ({c.n_seeds} seeds)" if c.n_seeds else ""
    w = c.within_spread
    where = "" if w is None else (", gap inside" if w else ", gap beyond")
    return f"±{_fmt(c.spread)}{seeds}{where}"


def claims_table(claims: Sequence[Claim], slug: str | None = None) -> str:
    """Markdown table of claims (one row each); a ``method`` column when ``slug`` is given."""
    head = ["claim", "kind", "metric", "paper", "ours", "baseline", "margin", "threshold", "dir", "spread",
            "holds"]
    if slug is not None:
        head = ["method", *head]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in claims:
        row = [
            _cell(c.name),
            c.kind,
            _cell(c.metric),
            _cell(_paper_cell(c)),
            _fmt(c.ours),
            _fmt(c.baseline),
            _fmt(c.margin) if c.baseline is not None else "",
            _fmt(c.threshold),
            "higher" if c.higher_is_better else "lower",
            _spread_cell(c),
            "yes" if c.holds else "**no**",
        ]
        if slug is not None:
            row = [slug, *row]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


@dataclass
class Report:
    """A method's reproduction run.

    Args:
        method: the method's slug (e.g. ``"agpd"``).
        version: the package version that produced it.
        quick: whether the CPU-scale quick mode was used.
        seconds: wall time of the run in seconds.
        claims: the claims measured.
        extra: free-form JSON-serialisable metadata (library versions, raw metrics).
        cpu_seconds: CPU time of the run (user + system, this process and its children).
        seeds: the seeds the run was asked to use (``None``: the method's defaults).
        device: the device the run was asked to use (``"default"``: the method's own choice).
        env: the run environment (:func:`iclr25.core.runinfo.run_info`: Python, platform, CPU,
            GPU, library versions, git commit).
    """

    method: str
    version: str
    quick: bool
    seconds: float
    claims: list[Claim] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    cpu_seconds: float | None = None
    seeds: list[int] | None = None
    device: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    python: str = field(default_factory=platform.python_version)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "claims"}
        d["claims"] = [c.to_dict() for c in self.claims]
        d["n_claims"] = len(self.claims)
        d["n_holding"] = sum(c.holds for c in self.claims)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False, default=_json_default)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d and f.name != "claims"}
        return cls(claims=[Claim.from_dict(c) for c in d.get("claims", [])], **kw)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))

    def summary_line(self) -> str:
        """``iclr25-<slug> <version> at <commit>, <wall> s wall, <cpu> s CPU, <date>; N/M claims hold.``"""
        held = sum(c.holds for c in self.claims)
        cpu = f" wall, {self.cpu_seconds:.1f} s CPU" if self.cpu_seconds is not None else ""
        commit = self.env.get("git_commit") if isinstance(self.env, dict) else None
        at = f" at {commit[:10]}" if commit else ""
        return (f"iclr25-{self.method} {self.version}{at}, {self.seconds:.1f} s{cpu}, {self.created}; "
                f"{held}/{len(self.claims)} claims hold.")

    def results_block(self) -> str:
        """The summary line and the claims table, exactly as ``results.md`` writes them: the text a
        package README carries between ``<!-- results:quick -->`` and ``<!-- /results:quick -->``
        (``scripts/check_readme_results.py`` checks it against ``docs/results-quick.json``)."""
        return f"{self.summary_line()}\n\n{claims_table(self.claims)}"

    def to_markdown(self) -> str:
        mode = "quick (CPU scale)" if self.quick else "full"
        out = [
            f"# {self.method} — reproduction ({mode})",
            "",
            self.results_block(),
            "",
        ]
        notes = [f"- **{c.name}**: {c.note}" for c in self.claims if c.note]
        if notes:
            out += ["Notes:", "", *notes, ""]
        return "\n".join(out)


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_report(report: Report, out_dir: str | Path) -> Path:
    """Write ``results.json`` and ``results.md`` into ``out_dir`` (created); return the JSON path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = out / "results.json"
    p.write_text(report.to_json() + "\n", encoding="utf-8")
    (out / "results.md").write_text(report.to_markdown(), encoding="utf-8")
    return p


def read_report(path: str | Path) -> Report:
    """Read a ``results.json`` (or the folder holding it) back into a :class:`Report`."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    return Report.from_json(p.read_text(encoding="utf-8"))


def summarize(claims: Iterable[Claim]) -> str:
    """One line: ``k/n claims hold``."""
    cl = list(claims)
    return f"{sum(c.holds for c in cl)}/{len(cl)} claims hold"
