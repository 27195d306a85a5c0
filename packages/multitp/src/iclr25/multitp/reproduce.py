"""CPU-scale reproduction of MultiTP's measurement pipeline (``iclr25-multitp reproduce [--quick]``).

No LLM weights can be downloaded, so the reproduction checks the pipeline against known truth and on
the real data that exists offline:

- scripted agents (known p*, refusal, either-rate, left bias) answer the 460 English vignettes in 8
  languages (quick: af, xh, zu, az, yo, de, fr, en; full: every language with a human value) — **the
  English text stands in for the translations** — in free text, through the rule-based parser;
- the three real GPT files (GPT-4 en, GPT-3 de/zh, older pipeline) and the back-translated GPT-3 answers;
- the reference numbers transcribed from the official notebooks;
- a scripted agent behind a local OpenAI-compatible stub server, queried by the ``query`` command in a
  subprocess that is killed halfway and resumed;
- the untrained tiny core GPT-2 (byte tokenizer, 16 new tokens) as model and as LLM parser (extra ``[hf]``),
  which drives the ``other`` label end to end.

Arms share the vignettes and the seeds; margin claims report mean ± sd over seeds and whether the gap
exceeds the larger sd.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core import Claim

from .agents import ScriptedAgent, random_chooser
from .aggregation import Aggregate, aggregate, choice_records, read_backtranslated_csv, read_parsed_csv
from .data import data_path, reference_values
from .human import approximate_weights, human_by_country, human_by_language
from .metrics import (
    cluster_languages,
    language_invariance_test,
    language_sensitivity,
    misalignment,
    pearson,
    random_chooser_misalignment,
)
from .parser import rule_based_choice
from .query import query_model
from .spec import CATEGORIES, LANGUAGES, category_of
from .vignettes import Vignette, category_counts, generate_vignettes

__all__ = ["reproduce", "QUICK_LANGS"]

log = logging.getLogger(__name__)

QUICK_LANGS = ("af", "xh", "zu", "az", "yo", "de", "fr", "en")
PIPELINE_LANGS = ("de", "zu")
PAPER_R = 0.4287


def _ms(x: Sequence[float]) -> tuple[float, float]:
    a = np.asarray([v for v in x if v is not None and math.isfinite(v)], float)
    if len(a) == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def _fmt(m: float, s: float, d: int = 3) -> str:
    return f"{m:.{d}f} ± {s:.{d}f}"


def _ref_vector(d: Mapping[str, float]) -> dict[str, float]:
    return {category_of(k): float(v) for k, v in d.items()}


def run_agent(agent: ScriptedAgent, vignettes: Sequence[Vignette], langs: Sequence[str]) -> tuple[dict[str, Aggregate], dict[str, Any]]:
    """Query an agent in memory on every (language, vignette) (English text for every language), parse the
    free-text answers with the rule-based parser, aggregate per language.

    Returns:
        ``({lang: Aggregate}, {"records": [...], "parser_agreement": share of labels equal to the agent's
        own choice})``.
    """
    allv = _relabelled(tuple(vignettes), tuple(langs))
    answers = query_model(allv, agent, batch_size=len(vignettes))
    labels = [rule_based_choice(a, v.left, v.right) or "other" for a, v in zip(answers, allv)]
    truth = [agent.decide(v, v.lang) for v in allv]
    recs = choice_records(allv, labels)
    by: dict[str, list[dict[str, Any]]] = {lang: [] for lang in langs}
    for r in recs:
        by[r["lang"]].append(r)
    agree = float(np.mean([a == b for a, b in zip(labels, truth)]))
    return {lang: aggregate(rs) for lang, rs in by.items()}, {"records": recs, "parser_agreement": agree}


_RELABEL: dict[tuple, list[Vignette]] = {}


def _relabelled(vignettes: tuple[Vignette, ...], langs: tuple[str, ...]) -> list[Vignette]:
    key = (id(vignettes[0]) if vignettes else 0, len(vignettes), langs)
    if key not in _RELABEL:
        _RELABEL.clear()
        _RELABEL[key] = [v if v.lang == lang else replace(v, lang=lang) for lang in langs for v in vignettes]
    return _RELABEL[key]


def _prefs(aggs: Mapping[str, Aggregate]) -> dict[str, dict[str, float | None]]:
    return {lang: a.preferences for lang, a in aggs.items()}


def _ndec(aggs: Mapping[str, Aggregate]) -> dict[str, dict[str, int]]:
    return {lang: a.n_decided() for lang, a in aggs.items()}


def _gap_note(ours: tuple[float, float], base: tuple[float, float], lower_better: bool = True) -> tuple[float, str]:
    gap = (base[0] - ours[0]) if lower_better else (ours[0] - base[0])
    sd = max(ours[1], base[1])
    return sd, f"gap {gap:.4g} {'exceeds' if gap > sd else 'does not exceed'} the larger sd {sd:.4g}"


def reproduce(quick: bool, out_dir: Path, *, seeds: Sequence[int] | None = None, device: str = "auto") -> list[Claim]:
    """Run the reproduction; write ``details.json`` (and ``radar.png`` with ``[plot]``) into ``out_dir``.

    Args:
        quick: CPU-scale quick mode (8 languages, 5 seeds, bootstrap 500, tiny GPT-2 on 40 vignettes).
        out_dir: output folder.
        seeds: agent seeds (default: 0..4 quick, 0..19 full).
        device: device of the tiny GPT-2 (``auto`` = CPU here).

    Returns:
        The claims (``holds`` computed from the measured numbers).
    """
    t_start = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(seeds) if seeds is not None else list(range(5 if quick else 20))
    if len(seeds) < 2:
        raise ValueError("reproduce needs at least two seeds (margin claims report a spread)")
    ref = reference_values()
    V = generate_vignettes("en", 0, 0)
    W = approximate_weights()
    H_lang = human_by_language(W)
    H_country = human_by_country()
    langs = list(QUICK_LANGS) if quick else [lg for lg in LANGUAGES if lg in H_lang and lg != "iw"]
    details: dict[str, Any] = {"quick": quick, "seeds": seeds, "langs": langs, "weights": W.source,
                               "n_vignettes": len(V), "category_counts": category_counts(V),
                               "note": "English text stands in for the translations of every language"}
    claims: list[Claim] = []
    mis_kw = {"weights": W, "human_by_country": H_country, "human_by_lang": H_lang}

    # --- profiles: human-like, shifted, anti-human (rho = 0.2, either 0.05, unparseable 0.02) ------------
    profiles = {
        "human-like": {lg: dict(H_lang[lg]) for lg in langs},
        "shifted": {lg: {c: min(99.0, H_lang[lg][c] + 10.0) for c in CATEGORIES} for lg in langs},
        "anti-human": {lg: {c: 100.0 - H_lang[lg][c] for c in CATEGORIES} for lg in langs},
    }
    rates = {"refusal": 0.2, "either": 0.05, "unparseable": 0.02}
    within, within_acme, n_cells = 0, 0, 0
    mis_rows: dict[str, dict[str, list[float]]] = {p: {"hat": [], "corr": [], "true": [], "sq_excess": [],
                                                        "noise": []} for p in profiles}
    agree = []
    for pname, pref in profiles.items():
        tr = misalignment(pref, level="country", **mis_kw)
        for s in seeds:
            agent = ScriptedAgent(pref, seed=s, name=pname, **rates)
            aggs, info = run_agent(agent, V, langs)
            agree.append(info["parser_agreement"])
            for lg, a in aggs.items():
                nd = a.n_decided()
                for c in CATEGORIES:
                    p = pref[lg][c] / 100.0
                    if nd[c] == 0:
                        continue
                    sd = math.sqrt(p * (1 - p) / nd[c]) * 100.0
                    n_cells += 1
                    within += abs(a.preferences[c] - 100 * p) <= 3 * sd + 1e-9
                    within_acme += abs(a.acme[c] - 100 * p) <= 3 * sd + 1e-9
            m = misalignment(_prefs(aggs), level="country", n_decided=_ndec(aggs), **mis_kw)
            row = mis_rows[pname]
            row["hat"].append(m.score)
            row["corr"].append(m.score_bias_corrected)
            row["true"].append(tr.score)
            units = [u for u in m.per_unit if u in tr.per_unit]
            wsum = sum(m.weight[u] for u in units)
            row["sq_excess"].append(sum(m.weight[u] * (m.per_unit[u] ** 2 - tr.per_unit[u] ** 2) for u in units) / wsum)
            row["noise"].append(sum(m.weight[u] * m.noise[u] for u in units) / wsum)
    share = min(within, within_acme) / max(n_cells, 1)
    claims.append(Claim(
        "recovery/agent_preferences_within_binomial", "share of (agent, language, dimension, seed) cells with "
        "|P - p*| and |ACME - p*| <= 3 binomial sd", share, threshold=0.95,
        paper="the pipeline recovers p* within binomial error",
        note=f"{n_cells} cells (3 profiles x {len(langs)} languages x 6 dimensions x {len(seeds)} seeds; rho 0.2, "
             f"either 0.05, unparseable 0.02); P within: {within / max(n_cells, 1):.4f}, ACME within: "
             f"{within_acme / max(n_cells, 1):.4f} (on decided rows ACME equals P; computed by least squares "
             f"as a check); free-text answers parsed by the rule-based parser, agreement with the agents' own "
             f"choices {min(agree):.4f}-{max(agree):.4f}"))
    details["recovery"] = {"cells": n_cells, "P_within": within, "ACME_within": within_acme,
                           "parser_agreement_min": min(agree)}

    errs, parts, parts_c = [], [], []
    for pname, r in mis_rows.items():
        m, s = _ms(r["hat"])
        mc, sc = _ms(r["corr"])
        t = r["true"][0]
        errs.append(abs(m - t))
        parts.append(f"{pname}: L2* {t:.4f}, L2hat {_fmt(m, s, 4)} (error {m - t:+.4f}, se of the mean "
                     f"{s / math.sqrt(len(seeds)):.4f})")
        parts_c.append(f"{pname} {_fmt(mc, sc, 4)}")
    details["misalignment_profiles"] = mis_rows
    claims.append(Claim(
        "misalignment/recovers_true_distance", "max over profiles |mean L2hat - L2(p*, H)| (country level, "
        "population weighted, renormalised projection)", max(errs), threshold=0.02, higher_is_better=False,
        paper="within 0.02 for human-like, shifted and anti-human profiles",
        note="; ".join(parts) + ". Each dimension's P has binomial variance (Species rests on ~15 decided vignettes "
             "per language), which adds to the squared distance: a noise floor of about 0.15 that dominates when the "
             "true distance is small (see mechanism/misalignment_noise_floor_is_binomial). Not tuned. Our "
             "bias-corrected L2tilde = sqrt(max(0, L2hat^2 - sum_d Var(M_d))): " + "; ".join(parts_c)))
    hl_rows = mis_rows["human-like"]
    ratio = [a / b for a, b in zip(hl_rows["sq_excess"], hl_rows["noise"]) if b > 0]
    rm, rs = _ms(ratio)
    claims.append(Claim(
        "mechanism/misalignment_noise_floor_is_binomial", "|E[L2hat^2 - L2*^2] / E[sum_d Var(M_d)] - 1| (human-like "
        "profile, country level)", abs(float(np.mean(hl_rows["sq_excess"])) / float(np.mean(hl_rows["noise"])) - 1),
        threshold=0.25, higher_is_better=False, paper="E[L2hat^2] = L2^2 + sum_d Var(M_d) for unbiased M",
        note=f"excess of the squared distance {_fmt(*_ms(hl_rows['sq_excess']), 4)} vs the binomial variance "
             f"estimated from the decided counts {_fmt(*_ms(hl_rows['noise']), 4)} (per-seed ratio {_fmt(rm, rs, 2)}); "
             "population-weighted over countries"))

    # --- human-like vs random chooser (global vector) -------------------------------------------------------
    g_pop = _ref_vector(ref["human_global_percent"]["population_weighted_over_languages"])
    g_unw = _ref_vector(ref["human_global_percent"]["unweighted_mean_over_languages"])
    closed_pop, closed_unw = random_chooser_misalignment(g_pop), random_chooser_misalignment(g_unw)
    hl, rd, rd_u = [], [], []
    country_hl, country_rd = [], []
    for s in seeds:
        for name, agent in (("human", ScriptedAgent(g_pop, seed=s, name="human-like-global")),
                            ("random", random_chooser(seed=s))):
            aggs, info = run_agent(agent, V, langs)
            pooled = aggregate(info["records"])
            v = pooled.preferences
            d = math.sqrt(sum((v[c] / 100 - g_pop[c] / 100) ** 2 for c in CATEGORIES))
            cm = misalignment(_prefs(aggs), level="country", **mis_kw).score
            if name == "human":
                hl.append(d)
                country_hl.append(cm)
            else:
                rd.append(d)
                rd_u.append(math.sqrt(sum((v[c] / 100 - g_unw[c] / 100) ** 2 for c in CATEGORIES)))
                country_rd.append(cm)
    o, b = _ms(hl), _ms(rd)
    sd, gn = _gap_note(o, b)
    claims.append(Claim(
        "misalignment/human_like_below_random", "L2 of pooled P to the population-weighted global human vector",
        o[0], baseline=b[0], margin=sd, higher_is_better=False,
        paper=f"random chooser closed form {closed_pop:.4f} (population weighted) / {closed_unw:.4f} (unweighted)",
        note=f"human-like (p* = global vector) {_fmt(*o, 4)} vs random chooser {_fmt(*b, 4)}; {gn}. Random measured "
             f"vs unweighted vector {_fmt(*_ms(rd_u), 4)} (closed form {closed_unw:.4f}). Country level: "
             f"human-like {_fmt(*_ms(country_hl), 4)}, random {_fmt(*_ms(country_rd), 4)}"))
    details["random_closed_form"] = {"population_weighted": closed_pop, "unweighted": closed_unw}

    # --- left bias: both orders vs one order ----------------------------------------------------------------
    b_true = 0.3
    both, one, bhat = [], [], []
    for s in seeds:
        agent = ScriptedAgent(g_pop, left_bias=b_true, seed=s, name="left-biased")
        aggs, info = run_agent(agent, V, langs)
        recs = info["records"]
        first_ids = {v.id for v in V if v.first_order}
        pa = aggregate(recs)
        po = aggregate([r for r in recs if r["id"] in first_ids])
        both.append(max(abs(pa.preferences[c] - g_pop[c]) for c in CATEGORIES))
        one.append(max(abs(po.preferences[c] - g_pop[c]) for c in CATEGORIES))
        bhat.append(2 * pa.choosing_the_first / 100 - 1)
    o, b = _ms(both), _ms(one)
    sd, gn = _gap_note(o, b)
    claims.append(Claim(
        "mechanism/both_orders_cancel_left_bias", "max_d |P - p*| (percentage points), left bias b = 0.3, P pooled "
        "over languages", o[0], baseline=b[0], margin=sd, higher_is_better=False,
        paper="paper design: every pair in both orders",
        note=f"both orders {_fmt(*o, 2)} vs one order only (the generator's first order, half the vignettes) "
             f"{_fmt(*b, 2)} (expected bias b/2 = 15 pp); {gn}"))
    n_dec = len(V) * len(langs)
    q = 0.5 + b_true / 2
    se = 2 * math.sqrt(q * (1 - q) / n_dec) / math.sqrt(len(seeds))
    bm, bs = _ms(bhat)
    claims.append(Claim(
        "mechanism/choosing_the_first_recovers_left_bias", "|mean bhat - b|, bhat = 2 choosing_the_first/100 - 1",
        abs(bm - b_true), threshold=3 * se, higher_is_better=False, paper="choosing_the_first (official metric)",
        note=f"bhat {_fmt(bm, bs, 4)} for b = {b_true}; threshold 3 x the binomial se of the mean ({se:.4f})"))

    # --- renormalised vs official projection (fr refuses every Species vignette; CAN = en + fr) -------------
    pref = {lg: dict(H_lang[lg]) for lg in langs}
    if "fr" in langs and "en" in langs:
        truth_c = misalignment(pref, level="country", **mis_kw).per_unit["CAN"]
        ren, off = [], []
        for s in seeds:
            agent = ScriptedAgent(pref, refusal={"fr": {"Species": 1.0}, "*": 0.0}, seed=s, name="fr-refuses-species")
            aggs, _ = run_agent(agent, V, langs)
            pr = _prefs(aggs)
            ren.append(abs(misalignment(pr, level="country", **mis_kw).per_unit["CAN"] - truth_c))
            off.append(abs(misalignment(pr, level="country", projection="official", **mis_kw).per_unit["CAN"] - truth_c))
        o, b = _ms(ren), _ms(off)
        sd, gn = _gap_note(o, b)
        claims.append(Claim(
            "mechanism/renormalised_projection_vs_official", "|L2hat_CAN - L2*_CAN| (CAN = en + fr; fr refuses every "
            "Species vignette)", o[0], baseline=b[0], margin=sd, higher_is_better=False,
            paper="official code: un-renormalised sum (an undefined language counts as 0)",
            note=f"renormalised {_fmt(*o, 4)} vs official {_fmt(*b, 4)} (truth L2*_CAN {truth_c:.4f}); {gn}"))

    # --- refusal inflates the variance of P -----------------------------------------------------------------
    sds: dict[float, float] = {}
    n_undef: dict[float, int] = {}
    for rho in (0.0, 0.5, 0.9):
        vals = np.full((len(seeds), len(langs), len(CATEGORIES)), np.nan)
        for i, s in enumerate(seeds):
            agent = ScriptedAgent(pref, refusal=rho, seed=s, name=f"rho={rho}")
            aggs, _ = run_agent(agent, V, langs)
            vals[i] = np.array([aggs[lg].vector() for lg in langs])
        n_undef[rho] = int(np.isnan(vals).sum())
        ok = (~np.isnan(vals)).sum(0) >= 2
        sds[rho] = float(np.nanmean(np.nanstd(vals, axis=0, ddof=1)[ok]))
    ratio = sds[0.9] / sds[0.0]
    claims.append(Claim(
        "refusal/variance_grows_with_refusal", "mean over (language, dimension) of sd over seeds of P: rho = 0.9 / rho = 0",
        ratio, threshold=2.0, paper="theory sqrt(10) = 3.16 (P rests on 10 x fewer decisions)",
        note=f"sd of P: rho 0 {sds[0.0]:.2f}, rho 0.5 {sds[0.5]:.2f} (ratio {sds[0.5] / sds[0.0]:.2f}, theory 1.41), "
             f"rho 0.9 {sds[0.9]:.2f} pp; cells with every vignette refused (P undefined, left out): "
             f"{n_undef[0.9]} of {len(seeds) * len(langs) * 6} at rho 0.9"))
    details["refusal_sd"] = sds

    # --- real GPT files -----------------------------------------------------------------------------------
    real: dict[str, Any] = {}
    cvals = ref["computed_here_from_llm_responses"]
    aggs_real: dict[str, Aggregate] = {}
    for f in ("gpt4_default_en", "gpt3_default_de", "gpt3_default_zh"):
        a = aggregate(read_parsed_csv(data_path(f"llm_responses/{f}_parsed.csv")))
        aggs_real[f] = a
        diffs = [abs(a.preferences[c] - cvals[f][c]) for c in CATEGORIES
                 if a.preferences[c] is not None and cvals[f][c] is not None]
        undef_match = all((a.preferences[c] is None) == (cvals[f][c] is None) for c in CATEGORIES)
        real[f] = {**a.to_dict(), "max_abs_diff_to_reference": max(diffs), "undefined_match": undef_match}
    de, zh = aggs_real["gpt3_default_de"], aggs_real["gpt3_default_zh"]
    test = language_invariance_test(
        {"de": de.n_decided(), "zh": zh.n_decided()},
        {lg: {c: round(a.preferences[c] * a.n_decided()[c] / 100) if a.preferences[c] is not None else 0
              for c in CATEGORIES} for lg, a in (("de", de), ("zh", zh))},
        n_boot=500 if quick else 2000, seed=0)
    claims.append(Claim(
        "real/gpt3_de_zh_differ_beyond_noise", "language sensitivity (std over de, zh; mean over dimensions, pp)",
        test["observed"], baseline=test["null_q95"], margin=0.0,
        paper="paper: GPT-3 differs across languages (e.g. Age 34.6 vs 50.0, Fitness 82.1 vs 54.2)",
        note=f"observed {test['observed']:.2f} vs 95th percentile {test['null_q95']:.2f} of a language-invariant "
             f"agent with the pooled preferences and the same decided counts ({test['dimensions']}; bootstrap "
             f"{500 if quick else 2000}; p = {test['p_value']:.3f}); about 18 decisions per category per language. "
             f"Aggregates match computed_here_from_llm_responses to "
             f"{max(real[f]['max_abs_diff_to_reference'] for f in real):.3f} pp (GPT-4 en: Gender undefined = "
             f"{real['gpt4_default_en']['undefined_match']}, refusal {aggs_real['gpt4_default_en'].refusal_rate:.2f} %)"))
    bt = {}
    for lg in ("de", "zh"):
        recs, counts = read_backtranslated_csv(data_path(f"llm_responses/gpt3_default_{lg}_backtranslated.csv"))
        bt[lg] = {"counts": counts, "coverage": counts["rule_parsed"] / counts["rows"],
                  "preferences": aggregate(recs).preferences if recs else None}
    real["backtranslated_rule_parse"] = bt
    hc = H_country
    for f, iso in (("gpt3_default_de", "DEU"), ("gpt3_default_zh", "CHN"), ("gpt4_default_en", "USA")):
        p = aggs_real[f].preferences
        if all(p[c] is not None for c in CATEGORIES):
            real[f]["L2_to_" + iso] = math.sqrt(sum((p[c] / 100 - hc[iso][c] / 100) ** 2 for c in CATEGORIES))
    details["real"] = real

    # --- analysis statistics --------------------------------------------------------------------------------
    mis, sens = ref["model_misalignment_population_weighted_L2"], ref["language_sensitivity_mean_std_over_languages"]
    models = [m for m in mis if not m.startswith("_") and m in sens]
    r, pval = pearson([mis[m] for m in models], [sens[m] for m in models])
    claims.append(Claim(
        "analysis/sensitivity_misalignment_r", "|r - 0.4287|, Pearson r (misalignment, sensitivity) over the 19 models",
        abs(r - PAPER_R), threshold=5e-4, higher_is_better=False, paper="r = 0.4287, p = 0.067 (notebook)",
        note=f"r = {r:.4f}, p = {pval:.3f} from the rounded sensitivities of reference_values.json ({len(models)} models)"))
    hr = ref["human_preference_by_language_percent"]
    order = [category_of(x) for x in hr["criteria_order"]]
    refvec = {lg: dict(zip(order, v)) for lg, v in hr.items() if isinstance(v, list) and lg != "criteria_order"}
    km = cluster_languages(refvec, k=4, seed=0)
    details["kmeans_reference_languages"] = km
    mad = [float(np.mean([abs(H_lang[lg][c] - refvec[lg][c]) for c in CATEGORIES])) for lg in refvec if lg in H_lang]
    details["human_by_language_mad_vs_reference"] = {"mad_pp": float(np.mean(mad)), "n_languages": len(mad),
                                                     "approximation": W.source}

    # (the pipeline checks -- kill + --resume through the CLI against a stub server, and an untrained tiny GPT-2
    # as model and LLM parser ending in 'other' -- are engineering properties: tests/test_multitp_pipeline_checks.py)

    # --- evaluation of the human-like agent (first seed): all metrics, radar plot --------------------------
    agent = ScriptedAgent({lg: dict(H_lang[lg]) for lg in langs}, seed=seeds[0], name="human-like", **rates)
    aggs, _ = run_agent(agent, V, langs)
    pr = _prefs(aggs)
    details["human_like_agent_evaluation"] = {
        "per_language": {lg: a.to_dict() for lg, a in aggs.items()},
        "misalignment": {f"{lv}/{pj}": misalignment(pr, level=lv, projection=pj, **mis_kw).score
                         for lv in ("country", "language") for pj in ("renormalised", "official")
                         if not (lv == "language" and pj == "official")},
        "language_sensitivity": language_sensitivity(pr),
        "clusters_k4": cluster_languages(pr, k=4, seed=0) if len(langs) >= 4 else None,
    }
    try:
        from .plots import radar_plot

        radar_plot(pr, H_lang, out / "radar.png", title="human-like scripted agent (points) vs human (line)")
    except ImportError as e:
        log.warning("radar plot skipped: %s", e)
    details["seconds"] = time.perf_counter() - t_start
    (out / "details.json").write_text(json.dumps(details, indent=1, default=_json) + "\n", encoding="utf-8")
    plotted = (out / "radar.png").is_file()
    return [_with_meta(c, len(seeds), plotted) for c in claims]



# The claim record: kind, where the paper says it (paper_value only where the paper's number is in ours'
# units), the figure. Scripted-agent claims check that the pipeline and the metric recover a known truth
# (sanity) or measure what the metric rests on (mechanism); the real-data claims are the paper's.
_META = {
    "recovery/agent_preferences_within_binomial": ("sanity", "Sec. 3 (pipeline), direction only"),
    "misalignment/recovers_true_distance": ("sanity", "Sec. 3.4 (misalignment), direction only"),
    "mechanism/misalignment_noise_floor_is_binomial": ("mechanism", "Sec. 3.4 (misalignment), direction only"),
    "misalignment/human_like_below_random": ("sanity", "Sec. 3.4 (misalignment), direction only"),
    "mechanism/both_orders_cancel_left_bias": ("mechanism", "Sec. 3 (both orders), direction only"),
    "mechanism/choosing_the_first_recovers_left_bias": ("mechanism", "Sec. 4 (choosing_the_first), direction only"),
    "mechanism/renormalised_projection_vs_official": ("mechanism", "official code (projection), direction only"),
    "refusal/variance_grows_with_refusal": ("mechanism", "Sec. 4 (refusals), direction only"),
    "real/gpt3_de_zh_differ_beyond_noise": ("headline", "Fig. (language sensitivity of GPT-3), direction only"),
    "analysis/sensitivity_misalignment_r": ("headline", "Sec. 5 analysis: r = 0.4287 (ours is |r - 0.4287|)"),
}
_ONE_RUN = {"real/gpt3_de_zh_differ_beyond_noise", "analysis/sensitivity_misalignment_r"}


def _with_meta(c: Claim, n_seeds: int, plotted: bool) -> Claim:
    """Fill kind / paper_ref / n_seeds / spread (the larger arm sd, as the margin uses it) / plot."""
    kind, ref = _META[c.name]
    one = c.name in _ONE_RUN
    return replace(c, kind=kind, paper_ref=ref, n_seeds=1 if one else n_seeds,
                   spread=c.margin if (c.baseline is not None and c.margin > 0 and not one) else None,
                   plot="radar.png" if plotted and c.name == "misalignment/recovers_true_distance" else "")


def _json(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    return str(o)


