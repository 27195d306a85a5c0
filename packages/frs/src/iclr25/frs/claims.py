"""The FRS claims, tables and aggregation: pure functions of the per-seed numbers (no model, no training).

:func:`aggregate` turns the per-seed results (one dict per smoothing seed, one entry per arm) into mean /
sd / per-seed values; :func:`build_claims` reads the aggregate, the single-model numbers and the preset and
returns the claims, each with the core record's fields (``kind``, ``paper_value``/``paper_ref``, ``spread``
= the seed standard deviation of the compared quantity, ``n_seeds``, ``plot``). :func:`claims_from_metrics`
rebuilds them from a finished run's ``metrics.json`` (what ``reproduce`` writes), so a claim change needs no
re-run.
"""

from __future__ import annotations

import math
import re

import numpy as np

from iclr25.core.results import Claim

__all__ = ["ARM_ORDER", "CLAIM_NAMES", "PLOT_ARMS", "PLOT_RADIUS", "aggregate", "arms_table", "class_table",
           "build_claims", "claims_from_metrics", "mean_sd", "fmt"]

CLAIM_NAMES = (
    "backdoor/survives_clean_finetune",
    "asr/frs_lt_uniform",
    "clean_acc/frs_cost",
    "mechanism/mcts_trigger_hit_rate",
    "ablation/frs_lt_no_bmps",
    "radius/frs_empirical_gt_uniform",
    "radius/frs_certified_gt_uniform",
    "radius/frs_unconditional_ge_uniform",
)
ARM_ORDER = ("none", "uniform", "frs", "ftr-only", "bmps-only")
#: the figures :mod:`iclr25.frs.plots` draws (relative to the results folder)
PLOT_ARMS = "arms.png"
PLOT_RADIUS = "radius.png"


def mean_sd(xs) -> tuple[float, float]:
    a = np.asarray([x for x in xs], dtype=float)
    if a.size == 0 or np.all(np.isnan(a)):
        return float("nan"), float("nan")
    return float(np.nanmean(a)), float(np.nanstd(a, ddof=1)) if a.size > 1 else 0.0


def fmt(m: float, s: float, d: int = 1) -> str:
    return f"{m:.{d}f} ± {s:.{d}f}"


_KEYS = ("CA", "PA", "ASR", "hit_rate", "random_segment_hit_rate", "hit_rate_c_sqrt2", "hit_rate_all_operators",
         "abstention_clean", "abstention_triggered", "mean_radius_clean", "mean_radius_triggered",
         "mean_radius_tokens_clean", "mean_radius_tokens_triggered", "mean_radius_unconditional_triggered",
         "mean_radius_unconditional_clean",
         "certified_rate_triggered", "empirical_radius", "empirical_radius_max", "tie_rate_clean",
         "tie_rate_triggered", "copy_agreement", "num_votes", "short_texts")


def _class_keys(per_seed: list[dict], arm: str) -> list[str]:
    """The per-class keys (``..._c<class>``) of an arm's results."""
    return sorted({k for r in per_seed for k in r[arm] if re.fullmatch(r".+_c\d+", k)})


def aggregate(per_seed: list[dict]) -> dict:
    agg: dict = {}
    for arm in ARM_ORDER:
        agg[arm] = {}
        for k in (*_KEYS, *_class_keys(per_seed, arm)):
            vals = [r[arm].get(k) for r in per_seed if r[arm].get(k) is not None]
            if vals and all(isinstance(v, (int, float)) for v in vals):
                m, s = mean_sd(vals)
                agg[arm][k] = {"mean": m, "sd": s, "values": vals}
    return agg


def _g(agg, arm, k, what="mean"):
    return agg[arm].get(k, {}).get(what, float("nan"))


def arms_table(agg: dict, seeds, p) -> str:
    rows = ["| arm | CA (%) | PA (%) | ASR (%) | hit rate | abstain clean / trig. (%) | mean cert. radius trig. "
            "(tokens) | empirical radius |", "|---|---|---|---|---|---|---|---|"]
    for arm in ARM_ORDER:
        def f(k, d=1, arm=arm):
            m, s = _g(agg, arm, k), _g(agg, arm, k, "sd")
            return "—" if not np.isfinite(m) else fmt(m, s, d)
        rows.append(f"| {arm} | {f('CA')} | {f('PA')} | {f('ASR')} | {f('hit_rate', 2)} | "
                    f"{f('abstention_clean')} / {f('abstention_triggered')} | {f('mean_radius_tokens_triggered', 3)} | "
                    f"{f('empirical_radius', 3)} |")
    return (f"Mean ± sd over smoothing seeds {list(seeds)}; K = {p['k']}, n = {p['n_random']}, I = {p['iterations']}, "
            f"ω_M = {p['w_mid']}, ω_H = {p['w_high']}, α = {p['alpha']}; {p['n_clean']} clean + {p['n_triggered']} "
            f"triggered texts.\n\n" + "\n".join(rows) + "\n")


def _classes(agg: dict, prefix: str, arm: str = "none") -> list[int]:
    """Class indices with a ``<prefix>_c<c>`` entry for ``arm``."""
    return sorted(int(k[len(prefix) + 2:]) for k in agg[arm] if k.startswith(prefix + "_c") and k[len(prefix) + 2:].isdigit())


def class_table(agg: dict, names: list[str]) -> str:
    """Per-class table (issue #40): clean accuracy, certified accuracy, abstention and mean certified radius on
    the clean texts, and the empirical radius, per true class and arm (mean ± sd over seeds)."""
    rows = ["Per true class (clean texts; certified accuracy = correct, not abstained, radius > 0; radius as a "
            "fraction of L, abstained / wrong texts count 0):", "",
            "| arm | class | n | CA (%) | certified acc. (%) | wrong label certified (%) | abstain (%) | mean cert. radius "
            "| empirical radius |",
            "|---|---|---|---|---|---|---|---|---|"]
    for arm in ARM_ORDER:
        for c in _classes(agg, "CA", arm):
            def f(k, d=1, arm=arm, c=c):
                m, sd = _g(agg, arm, f"{k}_c{c}"), _g(agg, arm, f"{k}_c{c}", "sd")
                return "—" if not np.isfinite(m) else fmt(m, sd, d)
            name = names[c] if c < len(names) else str(c)
            rows.append(f"| {arm} | {name} | {int(_g(agg, arm, f'n_clean_c{c}'))} | {f('CA')} | "
                        f"{f('certified_accuracy_clean')} | {f('wrong_certified_clean')} | {f('abstention_clean')} | {f('mean_radius_clean', 4)} | "
                        f"{f('empirical_radius', 3)} |")
    return "\n".join(rows) + "\n"


def arm_warnings(per_seed: list[dict]) -> dict[str, list[str]]:
    """Each arm's certifier warnings over the seeds (sorted, deduplicated), arms without any left out."""
    out = {arm: sorted({w for r in per_seed for w in r.get(arm, {}).get("warnings", [])}) for arm in ARM_ORDER}
    return {arm: ws for arm, ws in out.items() if ws}


def _warn_text(warns: dict[str, list[str]], arms: tuple[str, ...], what: str = "") -> str:
    """' Certifier warnings (ftr-only arm: ...).' for the given arms' warnings, each labelled with its arm;
    ``what`` says what the warnings do (and do not) touch in this claim."""
    parts = [f"{arm} arm: {'; '.join(warns[arm])}" for arm in arms if warns.get(arm)]
    return f" Certifier warnings ({' | '.join(parts)}){what}." if parts else ""


def build_claims(agg: dict, pre: dict, occl: float, p: dict, seeds, warns: dict[str, list[str]],
                 names: list[str] | None = None) -> list[Claim]:
    """The claims from aggregated per-seed numbers. ``warns`` maps an arm to its certifier warnings
    (:func:`arm_warnings`); each is attached, labelled with its arm, only to the claims that compare that arm."""
    if not isinstance(warns, dict):
        raise TypeError("build_claims: warns must map an arm to its warnings (use arm_warnings(per_seed))")

    def ms(arm, k):
        return _g(agg, arm, k), _g(agg, arm, k, "sd")

    n_seeds = len(list(seeds))

    def sd_of(values) -> float | None:
        """Seed standard deviation (ddof 1) of per-seed values; None with one seed or an undefined value."""
        a = np.asarray(values, dtype=float)
        return float(a.std(ddof=1)) if a.size > 1 and np.all(np.isfinite(a)) else None

    def per_seed(arm, k):
        return list(agg[arm].get(k, {}).get("values", []))

    def gap_spread(a, ka, b, kb=None):
        """Seed sd of the paired gap (arm a's ``ka`` minus arm b's ``kb``): both arms share each seed."""
        va, vb = per_seed(a, ka), per_seed(b, kb or ka)
        return sd_of([x - y for x, y in zip(va, vb)]) if len(va) == len(vb) == n_seeds else None

    def cname(c):
        return f"class {names[c] if names and c < len(names) else c}"

    def by_class(arm, k, d=1):
        """'neg 12.0 ± 1.0, pos 80.0 ± 2.0' for the per-class values of ``k`` (``k_c<c>``)."""
        return ", ".join(f"{cname(c)} {fmt(*ms(arm, f'{k}_c{c}'), d)}" for c in _classes(agg, k, arm)) or "n/a"

    def class_verdict(holds_by_class: dict[int, bool]) -> str:
        """Which classes a claim holds on, said outright when it is not all of them."""
        yes = [cname(c) for c, h in holds_by_class.items() if h]
        no = [cname(c) for c, h in holds_by_class.items() if not h]
        if not no:
            return f"holds on every class ({', '.join(yes)})"
        if not yes:
            return f"holds on no single class ({', '.join(no)})"
        return f"holds ONLY on {', '.join(yes)} (not on {', '.join(no)})"

    trig_classes = _classes(agg, "ASR", "frs")
    trig_scope = (f"Triggered texts are all of {', '.join(cname(c) for c in trig_classes)} (the non-target "
                  f"class{'es' if len(trig_classes) > 1 else ''}), so this claim speaks for "
                  f"{'those classes' if len(trig_classes) > 1 else 'that class'} only; per class ASR frs "
                  f"{by_class('frs', 'ASR')}, uniform {by_class('uniform', 'ASR')}.")

    def gap_note(a, b, k, d=1, lower=True):
        (ma, sa), (mb, sb) = ms(a, k), ms(b, k)
        gap = (mb - ma) if lower else (ma - mb)
        big = max(sa, sb)
        return (f"{a} {fmt(ma, sa, d)} vs {b} {fmt(mb, sb, d)} over seeds {list(seeds)}; gap {gap:.{d}f} "
                f"{'exceeds' if gap > big else 'does NOT exceed'} the larger sd {big:.{d}f}"), max(big, 1e-9)

    scale = (f"{p['data']}, tiny encoder d={p['d_model']}, attacker {p['n_attack']} phrases ({p['attack_epochs']} ep.), "
             f"BMPS FT on {p['n_finetune']} clean phrases (σ={p['sigma']}, H={p['top_layers']}), K={p['k']}, "
             f"n={p['n_random']}, I={p['iterations']}, N={p['k'] * p['n_random']}, α={p['alpha']}")
    claims = []
    b = pre["bmps_finetuned"]
    claims.append(Claim(
        "backdoor/survives_clean_finetune", "ASR after BMPS clean fine-tuning, no defense (%)", b["ASR"],
        baseline=pre["clean_only"]["ASR"], threshold=95.0, higher_is_better=True, paper="the backdoor survives clean fine-tuning (the paper's threat model)",
        kind="sanity", paper_value=None, paper_ref="Sec. 3 threat model, direction only", spread=None, n_seeds=1,
        plot=PLOT_ARMS,
        note=f"{scale}. Backdoored model before fine-tuning: CA {pre['backdoored']['CA']:.1f}, ASR "
             f"{pre['backdoored']['ASR']:.1f}; after: CA {b['CA']:.1f}, mean p(target | triggered) "
             f"{b['p_target_triggered']:.2f}. Baseline = same pipeline on unpoisoned phrases (CA "
             f"{pre['clean_only']['CA']:.1f})."))
    note, marg = gap_note("frs", "uniform", "ASR")
    claims.append(Claim(
        "asr/frs_lt_uniform", "ASR on triggered negatives (%)", _g(agg, "frs", "ASR"), baseline=_g(agg, "uniform", "ASR"),
        higher_is_better=False, margin=marg, paper="FRS has the lowest ASR of the defenses (Table 1)",
        kind="headline", paper_value=None, paper_ref="Table 1, direction only", spread=gap_spread("frs", "ASR", "uniform"),
        n_seeds=n_seeds, plot=PLOT_ARMS,
        note=f"{note}. Equal expected randomised tokens (ω_M·L). PA frs {fmt(*ms('frs', 'PA'))} vs uniform "
             f"{fmt(*ms('uniform', 'PA'))}; tie rate on triggered texts (ties -> class 0, the true class) frs "
             f"{fmt(*ms('frs', 'tie_rate_triggered'))}%, uniform {fmt(*ms('uniform', 'tie_rate_triggered'))}%. "
             + trig_scope))
    ca_none, ca_frs = ms("none", "CA"), ms("frs", "CA")
    drops = [a - b for a, b in zip(agg["none"]["CA"]["values"], agg["frs"]["CA"]["values"])]
    dm, dsd = mean_sd(drops)
    cls_drop = {c: _g(agg, "none", f"CA_c{c}") - _g(agg, "frs", f"CA_c{c}") for c in _classes(agg, "CA")}
    claims.append(Claim(
        "clean_acc/frs_cost", "CA drop none -> FRS (p.p.)", dm, threshold=5.0, higher_is_better=False,
        paper="CA roughly unchanged under FRS (Table 1)", kind="headline", paper_value=None,
        paper_ref="Table 1, direction only", spread=sd_of(drops), n_seeds=n_seeds, plot=PLOT_ARMS,
        note=f"CA none {fmt(*ca_none)}, frs {fmt(*ca_frs)}, uniform {fmt(*ms('uniform', 'CA'))}; drop "
             f"{fmt(dm, dsd)} p.p. on {p['n_clean']} clean texts (one text = {100 / p['n_clean']:.2f} p.p.). "
             f"Per class CA none {by_class('none', 'CA')}; frs {by_class('frs', 'CA')}; drop "
             + ", ".join(f"{cname(c)} {v:.1f}" for c, v in cls_drop.items())
             + f" p.p. — the <= 5 p.p. bound {class_verdict({c: v <= 5.0 for c, v in cls_drop.items()})}. "
             f"Certified accuracy (correct, not abstained, radius > 0) frs {by_class('frs', 'certified_accuracy_clean')}, "
             f"uniform {by_class('uniform', 'certified_accuracy_clean')}; certified on a WRONG label (not abstained, "
             f"radius > 0) frs {by_class('frs', 'wrong_certified_clean')}, uniform "
             f"{by_class('uniform', 'wrong_certified_clean')}."))
    hr, hsd = ms("frs", "hit_rate")
    claims.append(Claim(
        "mechanism/mcts_trigger_hit_rate", "share of triggered texts with the trigger inside T(x')", hr,
        baseline=_g(agg, "frs", "random_segment_hit_rate"), threshold=0.8, higher_is_better=True,
        paper="Corollary 1 rests on the trigger lying in T(x')", kind="mechanism", paper_value=None,
        paper_ref="Sec. 4 (Corollary 1 condition), direction only",
        spread=gap_spread("frs", "hit_rate", "frs", "random_segment_hit_rate"), n_seeds=n_seeds, plot=PLOT_ARMS,
        note=f"{fmt(hr, hsd, 2)} over seeds; baseline = random segment of equal length (exact expectation). "
             f"Single-token KL occlusion (exhaustive, one token at a time) finds the trigger in {occl:.2f}. "
             f"Design sensitivity at the same I={p['iterations']}: C=√2 -> {fmt(*ms('frs', 'hit_rate_c_sqrt2'), 2)}; "
             f"all four DL operators -> {fmt(*ms('frs', 'hit_rate_all_operators'), 2)}. Triggered texts are all of "
             f"{', '.join(cname(c) for c in trig_classes)}: the hit rate is measured on that class only."))
    note, marg = gap_note("frs", "ftr-only", "ASR")
    claims.append(Claim(
        "ablation/frs_lt_no_bmps", "ASR on triggered negatives (%), FRS vs FRS with σ = 0", _g(agg, "frs", "ASR"),
        baseline=_g(agg, "ftr-only", "ASR"), higher_is_better=False, margin=marg,
        paper="Table 3: removing BMPS raises ASR", kind="headline", paper_value=None,
        paper_ref="Table 3, direction only", spread=gap_spread("frs", "ASR", "ftr-only"), n_seeds=n_seeds,
        plot=PLOT_ARMS,
        note=f"{note}. σ=0: fine-tuned with σ=0 from the same backdoored weights; its K identical copies count once "
             f"(N = n = {p['n_random']}). BMPS copies vote alike on {fmt(100 * _g(agg, 'frs', 'copy_agreement'), 100 * _g(agg, 'frs', 'copy_agreement', 'sd'))}% "
             f"of randomised texts; bmps-only ASR {fmt(*ms('bmps-only', 'ASR'))}. Triggered texts are all of "
             f"{', '.join(cname(c) for c in trig_classes)}; the claim speaks for that class only."
             + _warn_text(warns, ("frs", "ftr-only"),
                          " — they concern that arm's certificates (abstention, radius), not the ASR compared here")))
    note, marg = gap_note("frs", "uniform", "empirical_radius", 3, lower=False)
    emp_cls = {c: _g(agg, "frs", f"empirical_radius_c{c}") > _g(agg, "uniform", f"empirical_radius_c{c}")
               for c in _classes(agg, "empirical_radius", "frs")}
    claims.append(Claim(
        "radius/frs_empirical_gt_uniform", "mean empirical radius (fraction of tokens)", _g(agg, "frs", "empirical_radius"),
        baseline=_g(agg, "uniform", "empirical_radius"), higher_is_better=True, margin=marg,
        paper="Table 2: FRS radius larger", kind="headline", paper_value=None, paper_ref="Table 2, direction only",
        spread=gap_spread("frs", "empirical_radius", "uniform"), n_seeds=n_seeds, plot=PLOT_RADIUS,
        note=f"{note}. Binary search over the number m of random-token substitutions; m passes if >= 95% of "
             f"{p['empirical_samples']} draws stay correct; up to {p['n_empirical']} clean texts the undefended model "
             f"gets right (per class n: {by_class('frs', 'n_empirical', 0)}). Per class frs "
             f"{by_class('frs', 'empirical_radius', 3)}, uniform {by_class('uniform', 'empirical_radius', 3)}: FRS > "
             f"uniform {class_verdict(emp_cls)}."))
    (mf, _), (mu, _) = ms("frs", "mean_radius_triggered"), ms("uniform", "mean_radius_triggered")
    note, marg = gap_note("frs", "uniform", "mean_radius_triggered", 4, lower=False)
    ratio = mf / mu if mu > 0 else float("inf")
    claims.append(Claim(
        "radius/frs_certified_gt_uniform",
        "mean certified radius on triggered texts (fraction of L): FRS at ω_H, conditional on the trigger lying "
        "in T(x'), vs uniform at ω_M (unconditional)", mf,
        baseline=mu, higher_is_better=True, margin=marg, paper="Corollary 1: ratio ln ω_M / ln ω_H = 11.43",
        kind="mechanism", paper_value=None, paper_ref="Corollary 1, direction only",
        spread=gap_spread("frs", "mean_radius_triggered", "uniform"), n_seeds=n_seeds, plot=PLOT_RADIUS,
        note=f"{note}. Correct and non-abstained texts count, others 0. Ratio {ratio:.2f} (Corollary 1 at equal p: "
             f"{math.log(p['w_mid']) / math.log(p['w_high']):.2f}). Abstention on triggered texts: frs "
             f"{fmt(*ms('frs', 'abstention_triggered'))}%, uniform {fmt(*ms('uniform', 'abstention_triggered'))}%; "
             f"N = {p['k'] * p['n_random']}. In tokens: frs {fmt(*ms('frs', 'mean_radius_tokens_triggered'), 3)}, uniform "
             f"{fmt(*ms('uniform', 'mean_radius_tokens_triggered'), 3)}. The FRS radius is conditional on the trigger "
             f"lying in T(x') (hit rate {hr:.2f}) and on Assumption 1; with ω_L (no location assumption) it is "
             f"{fmt(*ms('frs', 'mean_radius_unconditional_triggered'), 4)} (like-for-like comparison: the next claim). "
             f"Not like for like: FRS is credited ω_H = {p['w_high']} on T(x'), uniform ω_M = {p['w_mid']}. "
             f"{trig_scope}" + _warn_text(warns, ("frs", "uniform"))))
    (mfu, _), (mcu, _) = ms("frs", "mean_radius_unconditional_triggered"), ms("uniform", "mean_radius_triggered")
    note_u = (f"frs {fmt(*ms('frs', 'mean_radius_unconditional_triggered'), 4)} vs uniform "
              f"{fmt(*ms('uniform', 'mean_radius_triggered'), 4)} over seeds {list(seeds)}")
    big_u = max(_g(agg, "frs", "mean_radius_unconditional_triggered", "sd"), _g(agg, "uniform", "mean_radius_triggered", "sd"))
    (mfc, sfc), (mcc, scc) = ms("frs", "mean_radius_unconditional_clean"), ms("uniform", "mean_radius_clean")
    claims.append(Claim(
        "radius/frs_unconditional_ge_uniform",
        "mean certified radius on triggered texts without the location assumption (fraction of L): FRS at ω_L "
        "(the smallest probability any token gets) vs uniform at ω_M — like for like", mfu,
        baseline=mcu, higher_is_better=True, margin=max(big_u, 1e-9),
        paper="not in the paper: Corollary 1's comparison made like for like",
        kind="headline", paper_value=None, paper_ref="Corollary 1 (like-for-like variant), direction only",
        spread=gap_spread("frs", "mean_radius_unconditional_triggered", "uniform", "mean_radius_triggered"),
        n_seeds=n_seeds, plot=PLOT_RADIUS,
        note=f"{note_u}; gap {mfu - mcu:+.4f} {'exceeds' if mfu - mcu > big_u else 'does NOT exceed'} the larger sd "
             f"{big_u:.4f} (a wrong or abstained text counts 0, so a uniform radius of 0 here means it certified no "
             f"triggered text correctly). On clean texts, like for like: frs {fmt(mfc, sfc, 4)} vs uniform "
             f"{fmt(mcc, scc, 4)}. Both radii hold for a trigger anywhere in the "
             f"text (no assumption that it lies in T(x')); the budget-preserving ω_L is below ω_M by construction, so "
             f"FRS trades unconditional radius for the conditional one. Clean-text certified radius per class frs "
             f"{by_class('frs', 'mean_radius_clean', 4)}, uniform {by_class('uniform', 'mean_radius_clean', 4)}. "
             f"{trig_scope}" + _warn_text(warns, ("frs", "uniform"))))
    return claims


def claims_from_metrics(meta: dict, names: list[str] | None = None) -> list[Claim]:
    """The claims of a finished run, rebuilt from its ``metrics.json`` (no model, no training).

    Args:
        meta: the parsed ``metrics.json`` that ``reproduce`` writes (``per_seed``, ``single_models``,
            ``occlusion_rate``, ``preset``, ``seeds``, ``warnings``).
        names: the class names (default: ``meta["label_names"]``, else those of the preset's data set).

    Raises:
        ValueError: ``meta`` lacks a field the claims need (naming it).
    """
    missing = [k for k in ("per_seed", "single_models", "occlusion_rate", "preset", "seeds") if k not in meta]
    if missing:
        raise ValueError(f"metrics.json lacks {missing}: not a finished 'iclr25-frs reproduce' run")
    if names is None:
        names = meta.get("label_names")
    if names is None:
        from .data import load_dataset

        names = list(load_dataset(meta["preset"]["data"], "test").label_names)
    agg = aggregate(meta["per_seed"])
    return build_claims(agg, meta["single_models"], meta["occlusion_rate"], meta["preset"], meta["seeds"],
                        arm_warnings(meta["per_seed"]), names=list(names))
