"""The reproduction's experiments, as jobs of :mod:`iclr25.core.runner` (``fn(settings, seed, deps) -> record``).

Each job returns a JSON record of raw measurements (per seed where there are seeds); the claims are computed
from the records by :func:`iclr25.multitp.claims.claims_from_records`. An undefined preference (every
vignette of a cell refused) is recorded as ``None`` explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

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
)
from .parser import rule_based_choice
from .query import query_model
from .spec import CATEGORIES, category_of
from .vignettes import Vignette, generate_vignettes

__all__ = ["run_agent", "profiles_job", "global_job", "left_bias_job", "projection_job", "refusal_job", "real_job",
           "analysis_job", "evaluation_job", "RATES", "LEFT_BIAS", "REFUSAL_RHOS", "REAL_FILES"]

#: refusal / either / unparseable rates of the profile agents
RATES = {"refusal": 0.2, "either": 0.05, "unparseable": 0.02}
LEFT_BIAS = 0.3
REFUSAL_RHOS = (0.0, 0.5, 0.9)
REAL_FILES = ("gpt4_default_en", "gpt3_default_de", "gpt3_default_zh")


@lru_cache(maxsize=1)
def _setup() -> tuple[tuple[Vignette, ...], Any, dict, dict, dict]:
    """The English vignettes, the approximate population weights, human preferences (by language, by
    country) and the reference values: shared by every job of a process."""
    W = approximate_weights()
    return tuple(generate_vignettes("en", 0, 0)), W, human_by_language(W), human_by_country(), reference_values()


def _mis_kw() -> dict[str, Any]:
    _, W, H_lang, H_country, _ = _setup()
    return {"weights": W, "human_by_country": H_country, "human_by_lang": H_lang}


def _ref_vector(d: Mapping[str, float]) -> dict[str, float]:
    return {category_of(k): float(v) for k, v in d.items()}


def global_human_vector(weighting: str = "population_weighted_over_languages") -> dict[str, float]:
    """The global human preference vector of the reference values (``weighting``: population weighted or
    the unweighted mean over languages)."""
    return _ref_vector(_setup()[4]["human_global_percent"][weighting])


_RELABEL: dict[tuple, list[Vignette]] = {}


def _relabelled(vignettes: tuple[Vignette, ...], langs: tuple[str, ...]) -> list[Vignette]:
    key = (id(vignettes[0]) if vignettes else 0, len(vignettes), langs)
    if key not in _RELABEL:
        _RELABEL.clear()
        _RELABEL[key] = [v if v.lang == lang else replace(v, lang=lang) for lang in langs for v in vignettes]
    return _RELABEL[key]


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


def _prefs(aggs: Mapping[str, Aggregate]) -> dict[str, dict[str, float | None]]:
    return {lang: a.preferences for lang, a in aggs.items()}


def _ndec(aggs: Mapping[str, Aggregate]) -> dict[str, dict[str, int]]:
    return {lang: a.n_decided() for lang, a in aggs.items()}


def profiles(langs: Sequence[str]) -> dict[str, dict[str, dict[str, float]]]:
    """The three profile agents' p*: human-like, shifted (+10 pp, capped at 99), anti-human (100 - H)."""
    H_lang = _setup()[2]
    return {
        "human-like": {lg: dict(H_lang[lg]) for lg in langs},
        "shifted": {lg: {c: min(99.0, H_lang[lg][c] + 10.0) for c in CATEGORIES} for lg in langs},
        "anti-human": {lg: {c: 100.0 - H_lang[lg][c] for c in CATEGORIES} for lg in langs},
    }


def profiles_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """One seed of the three profile agents: binomial recovery counts and misalignment (estimated,
    bias-corrected, true, squared excess over the truth, binomial noise), per profile."""
    V = _setup()[0]
    langs = settings["langs"]
    mis_kw = _mis_kw()
    rec: dict[str, Any] = {"cells": 0, "P_within": 0, "ACME_within": 0, "parser_agreement": [], "profiles": {}}
    for pname, pref in profiles(langs).items():
        tr = misalignment(pref, level="country", **mis_kw)
        agent = ScriptedAgent(pref, seed=seed, name=pname, **RATES)
        aggs, info = run_agent(agent, V, langs)
        rec["parser_agreement"].append(info["parser_agreement"])
        for lg, a in aggs.items():
            nd = a.n_decided()
            for c in CATEGORIES:
                p = pref[lg][c] / 100.0
                if nd[c] == 0:
                    continue
                sd = math.sqrt(p * (1 - p) / nd[c]) * 100.0
                rec["cells"] += 1
                rec["P_within"] += int(abs(a.preferences[c] - 100 * p) <= 3 * sd + 1e-9)
                rec["ACME_within"] += int(abs(a.acme[c] - 100 * p) <= 3 * sd + 1e-9)
        m = misalignment(_prefs(aggs), level="country", n_decided=_ndec(aggs), **mis_kw)
        units = [u for u in m.per_unit if u in tr.per_unit]
        wsum = sum(m.weight[u] for u in units)
        rec["profiles"][pname] = {
            "hat": m.score, "corr": m.score_bias_corrected, "true": tr.score,
            "sq_excess": sum(m.weight[u] * (m.per_unit[u] ** 2 - tr.per_unit[u] ** 2) for u in units) / wsum,
            "noise": sum(m.weight[u] * m.noise[u] for u in units) / wsum}
    return rec


def global_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """One seed of a human-like agent (p* = the global vector) and the random chooser: L2 of the pooled P
    to the global vectors, and country-level misalignment."""
    V = _setup()[0]
    langs = settings["langs"]
    g_pop, g_unw = global_human_vector(), global_human_vector("unweighted_mean_over_languages")
    rec: dict[str, Any] = {}
    for name, agent in (("human", ScriptedAgent(g_pop, seed=seed, name="human-like-global")),
                        ("random", random_chooser(seed=seed))):
        aggs, info = run_agent(agent, V, langs)
        v = aggregate(info["records"]).preferences
        rec[name] = {"L2_pop": math.sqrt(sum((v[c] / 100 - g_pop[c] / 100) ** 2 for c in CATEGORIES)),
                     "L2_unw": math.sqrt(sum((v[c] / 100 - g_unw[c] / 100) ** 2 for c in CATEGORIES)),
                     "country": misalignment(_prefs(aggs), level="country", **_mis_kw()).score}
    return rec


def left_bias_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """One seed of a left-biased agent (b = :data:`LEFT_BIAS`): max_d |P - p*| with both orders and with the
    first order only, and the bias estimated from choosing_the_first."""
    V = _setup()[0]
    g_pop = global_human_vector()
    agent = ScriptedAgent(g_pop, left_bias=settings["b"], seed=seed, name="left-biased")
    _, info = run_agent(agent, V, settings["langs"])
    recs = info["records"]
    first_ids = {v.id for v in V if v.first_order}
    pa = aggregate(recs)
    po = aggregate([r for r in recs if r["id"] in first_ids])
    return {"both": max(abs(pa.preferences[c] - g_pop[c]) for c in CATEGORIES),
            "one": max(abs(po.preferences[c] - g_pop[c]) for c in CATEGORIES),
            "bhat": 2 * pa.choosing_the_first / 100 - 1, "b": settings["b"], "n_decisions": len(V) * len(settings["langs"])}


def projection_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """One seed of a human-like agent whose fr refuses every Species vignette: |L2hat_CAN - L2*_CAN| with
    the renormalised and the official projection (CAN = en + fr)."""
    V, _, H_lang, _, _ = _setup()
    langs = settings["langs"]
    mis_kw = _mis_kw()
    pref = {lg: dict(H_lang[lg]) for lg in langs}
    truth_c = misalignment(pref, level="country", **mis_kw).per_unit["CAN"]
    agent = ScriptedAgent(pref, refusal={"fr": {"Species": 1.0}, "*": 0.0}, seed=seed, name="fr-refuses-species")
    aggs, _ = run_agent(agent, V, langs)
    pr = _prefs(aggs)
    return {"truth": truth_c,
            "renormalised": abs(misalignment(pr, level="country", **mis_kw).per_unit["CAN"] - truth_c),
            "official": abs(misalignment(pr, level="country", projection="official", **mis_kw).per_unit["CAN"]
                            - truth_c)}


def refusal_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """One seed of human-like agents refusing at each rate of ``settings["rhos"]``: P per (language,
    dimension) (``None`` where every vignette was refused: P undefined)."""
    V, _, H_lang, _, _ = _setup()
    langs = settings["langs"]
    pref = {lg: dict(H_lang[lg]) for lg in langs}
    rec = {}
    for rho in settings["rhos"]:
        aggs, _ = run_agent(ScriptedAgent(pref, refusal=rho, seed=seed, name=f"rho={rho}"), V, langs)
        rec[str(rho)] = [[None if math.isnan(x) else float(x) for x in aggs[lg].vector()] for lg in langs]
    return rec


def real_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """The real GPT files: aggregates (vs the reference values), the de/zh language-invariance bootstrap test,
    the back-translated GPT-3 answers under the rule-based parser, L2 to the country's human vector."""
    H_country, ref = _setup()[3], _setup()[4]
    cvals = ref["computed_here_from_llm_responses"]
    real: dict[str, Any] = {}
    aggs: dict[str, Aggregate] = {}
    for f in REAL_FILES:
        a = aggregate(read_parsed_csv(data_path(f"llm_responses/{f}_parsed.csv")))
        aggs[f] = a
        diffs = [abs(a.preferences[c] - cvals[f][c]) for c in CATEGORIES
                 if a.preferences[c] is not None and cvals[f][c] is not None]
        real[f] = {**a.to_dict(), "max_abs_diff_to_reference": max(diffs),
                   "undefined_match": all((a.preferences[c] is None) == (cvals[f][c] is None) for c in CATEGORIES)}
    de, zh = aggs["gpt3_default_de"], aggs["gpt3_default_zh"]
    test = language_invariance_test(
        {"de": de.n_decided(), "zh": zh.n_decided()},
        {lg: {c: round(a.preferences[c] * a.n_decided()[c] / 100) if a.preferences[c] is not None else 0
              for c in CATEGORIES} for lg, a in (("de", de), ("zh", zh))},
        n_boot=settings["n_boot"], seed=0)
    bt = {}
    for lg in ("de", "zh"):
        recs, counts = read_backtranslated_csv(data_path(f"llm_responses/gpt3_default_{lg}_backtranslated.csv"))
        bt[lg] = {"counts": counts, "coverage": counts["rule_parsed"] / counts["rows"],
                  "preferences": aggregate(recs).preferences if recs else None}
    real["backtranslated_rule_parse"] = bt
    for f, iso in (("gpt3_default_de", "DEU"), ("gpt3_default_zh", "CHN"), ("gpt4_default_en", "USA")):
        p = aggs[f].preferences
        if all(p[c] is not None for c in CATEGORIES):
            real[f]["L2_to_" + iso] = math.sqrt(sum((p[c] / 100 - H_country[iso][c] / 100) ** 2 for c in CATEGORIES))
    return {"real": real, "invariance_test": {k: test[k] for k in ("observed", "null_q95", "p_value", "dimensions")}}


def analysis_job(settings: dict[str, Any], seed: int | None, deps: dict) -> dict[str, Any]:
    """Statistics of the reference values: Pearson r (misalignment, sensitivity) over the models, k-means of
    the reference languages, and the approximate human preferences' mean |difference| to the reference."""
    _, W, H_lang, _, ref = _setup()
    mis, sens = ref["model_misalignment_population_weighted_L2"], ref["language_sensitivity_mean_std_over_languages"]
    models = [m for m in mis if not m.startswith("_") and m in sens]
    r, pval = pearson([mis[m] for m in models], [sens[m] for m in models])
    hr = ref["human_preference_by_language_percent"]
    order = [category_of(x) for x in hr["criteria_order"]]
    refvec = {lg: dict(zip(order, v)) for lg, v in hr.items() if isinstance(v, list) and lg != "criteria_order"}
    mad = [float(np.mean([abs(H_lang[lg][c] - refvec[lg][c]) for c in CATEGORIES])) for lg in refvec if lg in H_lang]
    return {"r": float(r), "p": float(pval), "n_models": len(models),
            "kmeans_reference_languages": cluster_languages(refvec, k=4, seed=0),
            "human_by_language_mad_vs_reference": {"mad_pp": float(np.mean(mad)), "n_languages": len(mad),
                                                   "approximation": W.source}}


def evaluation_job(settings: dict[str, Any], seed: int, deps: dict) -> dict[str, Any]:
    """The human-like profile agent (first seed) through every metric: per-language aggregates,
    misalignment (country/language, renormalised/official), language sensitivity, clusters."""
    V, _, H_lang, _, _ = _setup()
    langs = settings["langs"]
    mis_kw = _mis_kw()
    agent = ScriptedAgent({lg: dict(H_lang[lg]) for lg in langs}, seed=seed, name="human-like", **RATES)
    aggs, _ = run_agent(agent, V, langs)
    pr = _prefs(aggs)
    return {
        "preferences": pr,
        "per_language": {lg: a.to_dict() for lg, a in aggs.items()},
        "misalignment": {f"{lv}/{pj}": misalignment(pr, level=lv, projection=pj, **mis_kw).score
                         for lv in ("country", "language") for pj in ("renormalised", "official")
                         if not (lv == "language" and pj == "official")},
        "language_sensitivity": language_sensitivity(pr),
        "clusters_k4": cluster_languages(pr, k=4, seed=0) if len(langs) >= 4 else None,
    }
