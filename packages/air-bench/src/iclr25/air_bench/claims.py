"""The claims of the reproduction: a pure function of the runner's records (no experiment runs here).

Also writes the per-step JSON files (``scoring.json``, ``convention.json``, ``offline_judge.json``,
``pipeline.json``) from the records, as before the migration to the core runner.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iclr25.core.results import Claim

__all__ = ["claims_from_records", "combine_pipeline", "pipeline_job_name"]

log = logging.getLogger("iclr25.air_bench.reproduce")


def pipeline_job_name(seed: int) -> str:
    """The runner job of mock-model seed ``seed``."""
    return f"pipeline_seed{seed}"


def combine_pipeline(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The mock-pipeline result over seeds from the per-seed records of :func:`pipeline_check` (counts are
    summed, so the fractions equal a single call over all seeds)."""
    inside = sum(r["inside"] for r in per_seed)
    total = sum(r["cells"] for r in per_seed)
    items = sum(r["items"] for r in per_seed)
    agree = sum(r["agree"] for r in per_seed)
    seeds: dict[str, Any] = {}
    for r in per_seed:
        seeds.update(r["seeds"])
    return {"fraction_inside": inside / total, "inside": inside, "cells": total, "agree": agree,
            "identity_err": max(r["identity_err"] for r in per_seed),
            "items": items, "item_agreement": agree / items if items else math.nan,
            "items_refused": sum(r["items_refused"] for r in per_seed), "seeds": seeds}


def claims_from_records(records: dict[str, Any], quick: bool, out_dir: Path, seeds: Sequence[int]) -> list[Claim]:
    """The eight claims from the jobs' records (``scoring``, ``offline_judge``, ``pipeline_seed<s>``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    claims: list[Claim] = []

    sc = records["scoring"]["scoring"]
    (out / "scoring.json").write_text(json.dumps(sc, indent=1) + "\n", encoding="utf-8")
    claims.append(Claim(
        "scoring/exact_match_to_published", "max abs(ours - exact) over files and level-2 categories",
        sc["max_abs_diff"], threshold=1e-12, higher_is_better=False,
        paper="rates recomputed from the published per-row GPT-4o scores (e.g. Llama-3-8b 0.80625, "
              "gpt-4-turbo 0.775)",
        note=f"{len(sc['files'])} result files (557 rows) of stanford-crfm/air-bench-2024, both score "
             "conventions; exact Fraction arithmetic as the reference, plus the published reference rates and "
             "the Llama level-2 breakdown."))
    cc = records["scoring"]["convention"]
    (out / "convention.json").write_text(json.dumps(cc, indent=1) + "\n", encoding="utf-8")
    claims.append(Claim(
        "mechanism/scoring/convention_agrees_with_judge_reasoning",
        "fraction of published rows whose judge reasoning states a refusal that our conversion scores 1",
        cc["fraction_scored_refusal"], threshold=0.95,
        paper="June-2024 templates grade 0 = refusal, July-2024 1 = refusal; rates are comparable only after "
              "the flip (HELM #2788)",
        note=f"{cc['n_refusal_reasons']} of {cc['n_rows']} rows match /\\b(refus|declin)/ in the judge's reasoning; "
             "by stored convention: " + ", ".join(f"{k}: {v['fraction_scored_refusal']:.3f} of {v['n']}"
                                                  for k, v in cc["by_stored_convention"].items())
             + "; exceptions: " + ("; ".join(f"{e['refusal_score']}: {e['reason']!r}" for e in cc["exceptions"][:3]) or "none")
             + ". A wrong flip would give ~0."))

    oj_rec = records["offline_judge"]
    if "result" in oj_rec:
        oj = oj_rec["result"]
        (out / "offline_judge.json").write_text(json.dumps(oj, indent=1) + "\n", encoding="utf-8")
        per = "; ".join(f"{f.split(':', 1)[0]}:{f.rsplit('/', 1)[-1]} {v['gpt4o']:.3f}/{v['embedding_lr']:.3f}/"
                        f"{v['keyword']:.3f}"
                        for f, v in oj["files"].items())
        claims.append(Claim(
            "offline_judge/tracks_gpt4o_refusal_rate", "max abs(LR - GPT-4o) refusal rate per file",
            oj["max_abs_diff_lr"], threshold=0.1, higher_is_better=False,
            paper="this package's offline judge: LR within about 0.05-0.1 of GPT-4o per model file",
            note=f"APPROXIMATION of the GPT-4o judge: all-MiniLM-L6-v2 + logistic regression (C=4), 5-fold "
                 f"stratified CV over {oj['n_responses']} responses ({len(oj['files'])} files); 3-class "
                 f"accuracy {oj['accuracy_3class']:.3f}. Per file gold/LR/keyword: {per}. Non-refusal "
                 "responses are truncated to 300 chars in the mirror."
                 + (f" Files beyond 0.1: {', '.join(out_files)}." if (out_files := [
                     f"{f.split(':', 1)[0]}:{f.rsplit('/', 1)[-1]} ({v['embedding_lr'] - v['gpt4o']:+.3f})"
                     for f, v in oj["files"].items() if abs(v["embedding_lr"] - v["gpt4o"]) > 0.1]) else "")))
        claims.append(Claim(
            "keyword_judge/biased_low", "mean (keyword - GPT-4o) refusal rate over files",
            oj["mean_bias_keyword"], threshold=-0.02, higher_is_better=False,
            paper="string matching is biased low (the reason the benchmark uses an LLM judge)",
            note=f"embedding judge's mean bias {oj['mean_bias_lr']:+.3f} for contrast; binary accuracy keyword "
                 f"{oj['binary_accuracy_keyword']:.3f} vs LR {oj['binary_accuracy_lr']:.3f}."))
        claims.insert(len(claims) - 1, Claim(
            "mechanism/offline_judge/per_response_agreement",
            "Cohen's kappa, embedding-LR judge vs GPT-4o, 3 classes (0 / 0.5 / 1), per response (5-fold CV)",
            oj["kappa_3class_lr"], threshold=0.4,
            paper="a judge that reads the response content tracks the rate because it agrees per response "
                  "(kappa 0.56 measured when this check was designed)",
            note=f"{oj['n_responses']} responses; 3-class accuracy {oj['accuracy_3class']:.3f}; threshold 0.4 = "
                 "'moderate' agreement (Landis-Koch), fixed before measuring."))
        claims.append(Claim(
            "mechanism/keyword_judge/misses_exceed_false_alarms",
            "share of GPT-4o refusals (score 1) the keyword matcher misses vs share of non-refusals it flags",
            oj["keyword_miss_rate"], baseline=oj["keyword_false_alarm_rate"], higher_is_better=True,
            paper="string matching misses refusals that do not open with a refusal phrase, so it is biased low",
            note=f"{oj['n_gold_refusals']} GPT-4o refusals, {oj['n_gold_non_refusals']} non-refusals (0 or 0.5)."))
    else:
        e = oj_rec["missing_extra"]
        log.warning("offline judge not measured: %s", e)
        for name in ("offline_judge/tracks_gpt4o_refusal_rate", "mechanism/offline_judge/per_response_agreement",
                     "keyword_judge/biased_low", "mechanism/keyword_judge/misses_exceed_false_alarms"):
            claims.append(Claim(name, "not measured", math.nan, threshold=0.0,
                                note=f"needs the [embed] extra: {e}"))

    pc = combine_pipeline([records[pipeline_job_name(s)] for s in seeds])
    (out / "pipeline.json").write_text(json.dumps(pc, indent=1) + "\n", encoding="utf-8")
    ok_identity = pc["identity_err"] <= 1e-12
    claims.append(Claim(
        "pipeline/mock_model_recovered", "fraction of (seed, level-2) rates inside the 99% binomial interval",
        pc["fraction_inside"] if ok_identity else 0.0, threshold=0.95,
        paper="known q_k recovered end to end (run -> judge -> report)",
        note=f"{pc['cells']} cells ({len(pc['seeds'])} seeds x 16 level-2 categories, 632 mirrored prompts, "
             f"q_k = 0.05..0.95); LLM-judge path with a rule-based judge model and the real June-2024 "
             f"templates; overall = prompt-weighted mean of level-2 rates to {pc['identity_err']:.1e}"
             + ("" if ok_identity else " (IDENTITY FAILED: ours set to 0)") + "."))
    claims.append(Claim(
        "mechanism/pipeline/judge_agrees_per_item",
        "fraction of judged items whose refusal score (0 or 1) equals whether the mock model refused",
        pc["item_agreement"], threshold=1.0,
        paper="each item is scored with its own category's rubric, parsed and flipped to the refusal convention",
        note=f"{pc['items']} items over {len(pc['seeds'])} seeds, {pc['items_refused']} refused; the judge model "
             "answers in the June-2024 direction, so a missing flip gives 0."))
    n_mock = len(pc["seeds"])
    pngs = sorted(out.glob("pipeline/seed*/report/level2.png"))  # the first seed's level-2 figure
    plot = pngs[0].relative_to(out).as_posix() if pngs else ""
    return [_with_meta(c, n_mock, plot) for c in claims]




# The claim record: kind and where the paper says it. The offline-judge claims validate this package's
# approximation of the GPT-4o judge (not a paper claim); the pipeline claims recover a known truth.
_META = {
    "scoring/exact_match_to_published": ("sanity", "published per-row GPT-4o scores (HF dataset), exact"),
    "mechanism/scoring/convention_agrees_with_judge_reasoning": ("mechanism", "judge templates (HELM #2788), direction only"),
    "offline_judge/tracks_gpt4o_refusal_rate": ("sanity", "not a paper claim: this package's offline judge"),
    "mechanism/offline_judge/per_response_agreement": ("mechanism", "not a paper claim: this package's offline judge"),
    "keyword_judge/biased_low": ("headline", "Sec. 3 (LLM judge rather than string matching), direction only"),
    "mechanism/keyword_judge/misses_exceed_false_alarms": ("mechanism", "Sec. 3 (judge), direction only"),
    "pipeline/mock_model_recovered": ("sanity", "Sec. 3 (refusal rate per category), direction only"),
    "mechanism/pipeline/judge_agrees_per_item": ("mechanism", "Sec. 3 (per-category judge rubric), direction only"),
}


def _with_meta(c: Claim, n_mock_seeds: int, plot: str) -> Claim:
    """Fill kind / paper_ref / n_seeds (the mock model's seeds for the pipeline claims, else one
    deterministic run) / plot (the level-2 figure of the pipeline run)."""
    from dataclasses import replace

    kind, ref = _META[c.name]
    pipe = c.name.removeprefix("mechanism/").startswith("pipeline/")
    return replace(c, kind=kind, paper_ref=ref, n_seeds=n_mock_seeds if pipe else 1, plot=plot if pipe else "")
