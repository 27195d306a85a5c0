"""The reproduction's claims: a pure function of the jobs' records (:mod:`iclr25.multitp.experiments`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from iclr25.core import Claim

from .metrics import random_chooser_misalignment

__all__ = ["claims_from_records", "PAPER_R", "CLAIM_NAMES"]

PAPER_R = 0.4287


def _ms(x: Sequence[float | None]) -> tuple[float, float]:
    a = np.asarray([v for v in x if v is not None and math.isfinite(v)], float)
    if len(a) == 0:
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def _fmt(m: float, s: float, d: int = 3) -> str:
    return f"{m:.{d}f} ± {s:.{d}f}"


def _gap_note(ours: tuple[float, float], base: tuple[float, float], lower_better: bool = True) -> tuple[float, str]:
    gap = (base[0] - ours[0]) if lower_better else (ours[0] - base[0])
    sd = max(ours[1], base[1])
    return sd, f"gap {gap:.4g} {'exceeds' if gap > sd else 'does not exceed'} the larger sd {sd:.4g}"


def claims_from_records(records: Mapping[str, Any], seeds: Sequence[int], langs: Sequence[str], quick: bool,
                        g_pop: Mapping[str, float], g_unw: Mapping[str, float],
                        plotted: bool) -> tuple[list[Claim], dict[str, Any]]:
    """The claims and the ``details.json`` content from the records (no experiment runs here).

    Args:
        records: ``{job name: record}`` of :func:`iclr25.multitp.reproduce.jobs`.
        seeds: the agent seeds; langs: the languages.
        quick: the preset (the bootstrap size is part of a note).
        g_pop, g_unw: the global human vectors (population weighted, unweighted), for the closed forms.
        plotted: whether ``radar.png`` was written.
    """
    claims: list[Claim] = []
    details: dict[str, Any] = {}
    prof = [records[f"profiles_seed{s}"] for s in seeds]
    n_cells = sum(r["cells"] for r in prof)
    within, within_acme = sum(r["P_within"] for r in prof), sum(r["ACME_within"] for r in prof)
    agree = [a for r in prof for a in r["parser_agreement"]]
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

    mis_rows = {p: {k: [r["profiles"][p][k] for r in prof] for k in ("hat", "corr", "true", "sq_excess", "noise")}
                for p in prof[0]["profiles"]}
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

    closed_pop, closed_unw = random_chooser_misalignment(g_pop), random_chooser_misalignment(g_unw)
    glob = [records[f"global_seed{s}"] for s in seeds]
    o, b = _ms([r["human"]["L2_pop"] for r in glob]), _ms([r["random"]["L2_pop"] for r in glob])
    sd, gn = _gap_note(o, b)
    claims.append(Claim(
        "misalignment/human_like_below_random", "L2 of pooled P to the population-weighted global human vector",
        o[0], baseline=b[0], margin=sd, higher_is_better=False,
        paper=f"random chooser closed form {closed_pop:.4f} (population weighted) / {closed_unw:.4f} (unweighted)",
        note=f"human-like (p* = global vector) {_fmt(*o, 4)} vs random chooser {_fmt(*b, 4)}; {gn}. Random measured "
             f"vs unweighted vector {_fmt(*_ms([r['random']['L2_unw'] for r in glob]), 4)} (closed form "
             f"{closed_unw:.4f}). Country level: human-like {_fmt(*_ms([r['human']['country'] for r in glob]), 4)}, "
             f"random {_fmt(*_ms([r['random']['country'] for r in glob]), 4)}"))
    details["random_closed_form"] = {"population_weighted": closed_pop, "unweighted": closed_unw}

    lb = [records[f"left_bias_seed{s}"] for s in seeds]
    b_true = records_setting_b(lb)
    o, b = _ms([r["both"] for r in lb]), _ms([r["one"] for r in lb])
    sd, gn = _gap_note(o, b)
    claims.append(Claim(
        "mechanism/both_orders_cancel_left_bias", f"max_d |P - p*| (percentage points), left bias b = {b_true}, "
        "P pooled over languages", o[0], baseline=b[0], margin=sd, higher_is_better=False,
        paper="paper design: every pair in both orders",
        note=f"both orders {_fmt(*o, 2)} vs one order only (the generator's first order, half the vignettes) "
             f"{_fmt(*b, 2)} (expected bias b/2 = {50 * b_true:g} pp); {gn}"))
    q = 0.5 + b_true / 2
    se = 2 * math.sqrt(q * (1 - q) / lb[0]["n_decisions"]) / math.sqrt(len(seeds))
    bm, bs = _ms([r["bhat"] for r in lb])
    claims.append(Claim(
        "mechanism/choosing_the_first_recovers_left_bias", "|mean bhat - b|, bhat = 2 choosing_the_first/100 - 1",
        abs(bm - b_true), threshold=3 * se, higher_is_better=False, paper="choosing_the_first (official metric)",
        note=f"bhat {_fmt(bm, bs, 4)} for b = {b_true}; threshold 3 x the binomial se of the mean ({se:.4f})"))

    if f"projection_seed{seeds[0]}" in records:
        pj = [records[f"projection_seed{s}"] for s in seeds]
        o, b = _ms([r["renormalised"] for r in pj]), _ms([r["official"] for r in pj])
        sd, gn = _gap_note(o, b)
        claims.append(Claim(
            "mechanism/renormalised_projection_vs_official", "|L2hat_CAN - L2*_CAN| (CAN = en + fr; fr refuses every "
            "Species vignette)", o[0], baseline=b[0], margin=sd, higher_is_better=False,
            paper="official code: un-renormalised sum (an undefined language counts as 0)",
            note=f"renormalised {_fmt(*o, 4)} vs official {_fmt(*b, 4)} (truth L2*_CAN {pj[0]['truth']:.4f}); {gn}"))

    rf = [records[f"refusal_seed{s}"] for s in seeds]
    sds: dict[float, float] = {}
    n_undef: dict[float, int] = {}
    for key in rf[0]:
        vals = np.array([[[np.nan if x is None else x for x in row] for row in r[key]] for r in rf], float)
        n_undef[float(key)] = int(np.isnan(vals).sum())
        ok = (~np.isnan(vals)).sum(0) >= 2
        sds[float(key)] = float(np.nanmean(np.nanstd(vals, axis=0, ddof=1)[ok]))
    ratio_r = sds[0.9] / sds[0.0]
    claims.append(Claim(
        "refusal/variance_grows_with_refusal", "mean over (language, dimension) of sd over seeds of P: rho = 0.9 / rho = 0",
        ratio_r, threshold=2.0, paper="theory sqrt(10) = 3.16 (P rests on 10 x fewer decisions)",
        note=f"sd of P: rho 0 {sds[0.0]:.2f}, rho 0.5 {sds[0.5]:.2f} (ratio {sds[0.5] / sds[0.0]:.2f}, theory 1.41), "
             f"rho 0.9 {sds[0.9]:.2f} pp; cells with every vignette refused (P undefined, left out): "
             f"{n_undef[0.9]} of {len(seeds) * len(langs) * 6} at rho 0.9"))
    details["refusal_sd"] = sds

    real, test = records["real"]["real"], records["real"]["invariance_test"]
    files = [f for f in real if f != "backtranslated_rule_parse"]
    n_boot = 500 if quick else 2000
    claims.append(Claim(
        "real/gpt3_de_zh_differ_beyond_noise", "language sensitivity (std over de, zh; mean over dimensions, pp)",
        test["observed"], baseline=test["null_q95"], margin=0.0,
        paper="paper: GPT-3 differs across languages (e.g. Age 34.6 vs 50.0, Fitness 82.1 vs 54.2)",
        note=f"observed {test['observed']:.2f} vs 95th percentile {test['null_q95']:.2f} of a language-invariant "
             f"agent with the pooled preferences and the same decided counts ({test['dimensions']}; bootstrap "
             f"{n_boot}; p = {test['p_value']:.3f}); about 18 decisions per category per language. "
             f"Aggregates match computed_here_from_llm_responses to "
             f"{max(real[f]['max_abs_diff_to_reference'] for f in files):.3f} pp (GPT-4 en: Gender undefined = "
             f"{real['gpt4_default_en']['undefined_match']}, refusal {real['gpt4_default_en']['refusal_rate']:.2f} %)"))
    details["real"] = real

    an = records["analysis"]
    claims.append(Claim(
        "analysis/sensitivity_misalignment_r", "|r - 0.4287|, Pearson r (misalignment, sensitivity) over the 19 models",
        abs(an["r"] - PAPER_R), threshold=5e-4, higher_is_better=False, paper="r = 0.4287, p = 0.067 (notebook)",
        note=f"r = {an['r']:.4f}, p = {an['p']:.3f} from the rounded sensitivities of reference_values.json "
             f"({an['n_models']} models)"))
    details["kmeans_reference_languages"] = an["kmeans_reference_languages"]
    details["human_by_language_mad_vs_reference"] = an["human_by_language_mad_vs_reference"]
    ev = dict(records["evaluation"])
    ev.pop("preferences")
    details["human_like_agent_evaluation"] = ev
    return [_with_meta(c, len(seeds), plotted) for c in claims], details


def records_setting_b(lb: Sequence[Mapping[str, Any]]) -> float:
    """The left bias b of the left-bias records (the same in every seed's record)."""
    bs = {r["b"] for r in lb}
    if len(bs) != 1:
        raise ValueError(f"left-bias records disagree on b: {sorted(bs)}")
    return bs.pop()


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
CLAIM_NAMES = tuple(_META)
_ONE_RUN = {"real/gpt3_de_zh_differ_beyond_noise", "analysis/sensitivity_misalignment_r"}


def _with_meta(c: Claim, n_seeds: int, plotted: bool) -> Claim:
    """Fill kind / paper_ref / n_seeds / spread (the larger arm sd, as the margin uses it) / plot."""
    kind, ref = _META[c.name]
    one = c.name in _ONE_RUN
    return replace(c, kind=kind, paper_ref=ref, n_seeds=1 if one else n_seeds,
                   spread=c.margin if (c.baseline is not None and c.margin > 0 and not one) else None,
                   plot="radar.png" if plotted and c.name == "misalignment/recovers_true_distance" else "")
