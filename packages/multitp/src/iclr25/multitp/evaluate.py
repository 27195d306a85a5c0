"""Evaluation of parsed answers: everything ``iclr25-multitp evaluate`` reports, as one JSON-ready dict."""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .aggregation import aggregate
from .human import LanguageWeights, human_by_country, human_by_language
from .metrics import cluster_languages, language_sensitivity, misalignment, sensitivity_per_dimension
from .spec import CATEGORIES, HUMAN_LABEL

__all__ = ["evaluate_choices", "write_evaluation", "markdown_report"]

log = logging.getLogger(__name__)


def evaluate_choices(records: Sequence[Mapping[str, Any]], *, weights: LanguageWeights, k: int = 4,
                     seed: int = 0) -> dict[str, Any]:
    """Per model: per-language aggregates, misalignment (country/renormalised, country/official,
    language), language sensitivity, k-means clusters, refusal, consistency, ``n_other``.

    Args:
        records: choice records with ``lang`` (and ``model``; default ``"model"``).
        weights: country x language weights (an approximation is labelled in the output).
        k: clusters (skipped with a note when fewer complete languages).

    Returns:
        ``{"weights": ..., "models": {model: {...}}}``.
    """
    by: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by[r.get("model", "model")][r["lang"]].append(r)
    hc, hl = human_by_country(), human_by_language(weights)
    out: dict[str, Any] = {"weights": {"source": weights.source, "approximation": weights.approximation},
                           "models": {}}
    for model, per in by.items():
        aggs = {lang: aggregate(rs) for lang, rs in sorted(per.items())}
        prefs = {lang: a.preferences for lang, a in aggs.items()}
        nd = {lang: a.n_decided() for lang, a in aggs.items()}
        mis = {}
        for lv, pj in (("country", "renormalised"), ("country", "official"), ("language", "renormalised")):
            mis[f"{lv}/{pj}"] = misalignment(prefs, level=lv, projection=pj, weights=weights, human_by_country=hc,
                                             human_by_lang=hl, n_decided=nd).to_dict()
        try:
            sens = language_sensitivity(prefs)
        except ValueError:
            sens = None
        try:
            clusters: Any = cluster_languages(prefs, k=k, seed=seed)
        except ValueError as e:
            clusters = f"not computed: {e}"
        warns = []
        if len(aggs) > 1 and sens is not None and sens == 0.0:
            warns.append(f"all {len(aggs)} languages have identical preferences (language sensitivity 0.00 pp): "
                         "were the vignettes translated? A query with the identity translator sends English to "
                         "every language")
        n_all = sum(a.n_vignettes for a in aggs.values())
        n_oth = sum(a.n_other for a in aggs.values())
        if n_all and n_oth == n_all:
            warns.append(f"all {n_all} answers are `other` (no rule parsed them and no LLM parser labelled them): "
                         "nothing is decided, so preferences and misalignment are undefined; parse with "
                         "--llm-parser-model, or check that the answers are in English (back-translated)")
        for w_ in warns:
            log.warning("%s: %s", model, w_)
        ref = [a.refusal_rate for a in aggs.values() if a.refusal_rate is not None]
        con = [a.consistency_by_swapping for a in aggs.values() if a.consistency_by_swapping is not None]
        out["models"][model] = {
            "languages": list(aggs),
            "per_language": {lang: a.to_dict() for lang, a in aggs.items()},
            "misalignment": mis,
            "language_sensitivity": sens,
            "sensitivity_per_dimension": sensitivity_per_dimension(prefs) if len(aggs) > 1 else None,
            "clusters": clusters,
            "refusal_rate_mean": float(np.mean(ref)) if ref else float("nan"),
            "consistency_by_swapping_mean": float(np.mean(con)) if con else None,
            "n_other": sum(a.n_other for a in aggs.values()),
            "human_by_language": {lang: hl.get(lang) for lang in aggs},
            "warnings": warns,
        }
    return out


def _f(x: Any, d: int = 1) -> str:
    return "undefined" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{d}f}"


def _finite_or_none(x: Any) -> Any:
    """``x`` with every non-finite float (an undefined score, mean or preference) replaced by ``None``, so that
    ``results.json`` is strict JSON (``null``), never a bare ``NaN``."""
    if isinstance(x, Mapping):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_or_none(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def markdown_report(res: Mapping[str, Any]) -> str:
    """Markdown tables of :func:`evaluate_choices` output."""
    lines = ["# MultiTP evaluation", "", f"Human weights: {res['weights']['source']}"
             + (" (**approximation**)" if res["weights"]["approximation"] else ""), ""]
    for model, r in res["models"].items():
        lines += [f"## {model}", ""]
        head = ["lang", *[HUMAN_LABEL[c] for c in CATEGORIES], "refusal %", "consistency %", "first %", "n_other"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for lang, a in r["per_language"].items():
            lines.append("| " + " | ".join([lang, *[_f(a["preferences"][c]) for c in CATEGORIES], _f(a["refusal_rate"]),
                                            _f(a["consistency_by_swapping"]), _f(a["choosing_the_first"]),
                                            str(a["n_other"])]) + " |")
        lines += [""]
        for key, m in r["misalignment"].items():
            lines.append(f"- misalignment {key}: {_f(m['score'], 4)} over {m['n_units']} units "
                         f"(bias-corrected {_f(m['score_bias_corrected'], 4)}; {len(m['excluded'])} excluded)")
        lines.append(f"- language sensitivity: {_f(r['language_sensitivity'], 2)} pp")
        lines.append(f"- clusters: {r['clusters']}")
        lines += [f"- **warning**: {w}" for w in r.get("warnings", [])]
        lines.append("")
    return "\n".join(lines)


def write_evaluation(res: Mapping[str, Any], out: str | Path, *, plot: bool = True) -> list[Path]:
    """Write ``results.json``, ``results.md`` and (with matplotlib) ``radar.png`` per model."""
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    paths = [o / "results.json", o / "results.md"]
    paths[0].write_text(json.dumps(_finite_or_none(res), indent=1, default=float, allow_nan=False) + "\n",
                        encoding="utf-8")
    paths[1].write_text(markdown_report(res), encoding="utf-8")
    if plot:
        try:
            from .plots import radar_plot

            for i, (model, r) in enumerate(res["models"].items()):
                name = "radar.png" if i == 0 else f"radar_{i}.png"
                prefs = {lang: a["preferences"] for lang, a in r["per_language"].items()}
                hl = {k: v for k, v in r["human_by_language"].items() if v is not None}
                paths.append(radar_plot(prefs, hl, o / name, title=model))
        except ImportError as e:
            log.warning("no radar plot: %s", e)
    return paths
