"""CREAM's claims, tables and summaries from the per-seed results (pure functions of the records)."""

from __future__ import annotations

from typing import Any

import numpy as np

from iclr25.core.results import Claim

from .repro_settings import ACC_MARGIN, LABEL, ReproSettings

__all__ = ["compare", "summarize", "table", "claims_from", "PLOT"]

#: the figure (:mod:`iclr25.cream.plots`) the claims name, relative to the results folder
PLOT = "metrics.png"


def compare(ours: list[float], base: list[float], *, higher_is_better: bool = True) -> dict[str, Any]:
    """Mean ± sd over seeds of two paired per-seed series, the per-seed differences (ours - base),
    wins (seeds where ours is better), and whether the mean gap exceeds the spread (the sd of the
    per-seed differences)."""
    o, b = np.asarray(ours, float), np.asarray(base, float)
    d = o - b
    sd = lambda x: float(x.std(ddof=1)) if len(x) > 1 else 0.0  # noqa: E731
    better = d > 0 if higher_is_better else d < 0
    return {"ours_mean": float(o.mean()), "ours_sd": sd(o), "baseline_mean": float(b.mean()), "baseline_sd": sd(b),
            "diffs": [float(x) for x in d], "diff_mean": float(d.mean()), "diff_sd": sd(d),
            "wins": int(better.sum()), "n": int(len(d)),
            "gap_exceeds_spread": bool(abs(d.mean()) > sd(d)) if len(d) > 1 else False}


def _note(c: dict[str, Any], what: str, fmt: str = ".3f") -> str:
    diffs = ", ".join(f"{x:+{fmt}}" for x in c["diffs"])
    return (f"{what}: ours {c['ours_mean']:{fmt}} ± {c['ours_sd']:{fmt}} vs baseline {c['baseline_mean']:{fmt}} ± "
            f"{c['baseline_sd']:{fmt}} (mean ± sd over {c['n']} seeds); per-seed diff [{diffs}], wins "
            f"{c['wins']}/{c['n']}; mean gap {c['diff_mean']:+{fmt}} vs spread (sd of diffs) {c['diff_sd']:{fmt}}: "
            f"{'exceeds' if c['gap_exceeds_spread'] else 'within the spread'}")


def _series(results: list[dict[str, Any]], method: str, key: str) -> np.ndarray:
    """``(seeds, T+1)``: metric ``key`` of M1..M_{T+1} (accuracy, gt_tau) per seed."""
    rows = []
    for r in results:
        reps = r["methods"][method]["reports"]
        rows.append([reps[0]["start_metrics"][key]] + [x["metrics"][key] for x in reps])
    return np.asarray(rows, float)


def _consistency(results: list[dict[str, Any]], method: str) -> np.ndarray:
    """``(seeds, T)``: mean C_j per round."""
    return np.asarray([[x["consistency"]["mean"] if x["consistency"] else np.nan
                        for x in r["methods"][method]["reports"]] for r in results], float)


def summarize(results: list[dict[str, Any]], settings: ReproSettings) -> dict[str, Any]:
    """Per-method per-round mean and sd of accuracy, gt-tau and C."""
    out: dict[str, Any] = {}
    for m in settings.methods:
        acc, gt, c = _series(results, m, "accuracy"), _series(results, m, "gt_tau"), _consistency(results, m)
        sd = (lambda x: x.std(0, ddof=1).tolist()) if len(results) > 1 else (lambda x: [0.0] * x.shape[1])
        out[m] = {"accuracy_mean": acc.mean(0).tolist(), "accuracy_sd": sd(acc), "gt_tau_mean": gt.mean(0).tolist(),
                  "gt_tau_sd": sd(gt), "consistency_mean": c.mean(0).tolist(), "consistency_sd": sd(c),
                  "accuracy": acc.tolist(), "gt_tau": gt.tolist(), "consistency": c.tolist()}
    m0 = np.asarray([r["m0"]["accuracy"] for r in results])
    out["m0_accuracy"] = m0.tolist()
    return out


def table(summary: dict[str, Any], settings: ReproSettings, title: str) -> str:
    """Markdown: accuracy per model (mean ± sd), gt-tau at the last model and C per round."""
    T = settings.iterations
    head = ["method"] + [f"M{k + 1}" for k in range(T + 1)] + [f"gt-τ M{T + 1}"] + [f"C r{t + 1}" for t in range(T)]
    lines = [f"**{title}** (greedy test accuracy, mean ± sd over {len(summary['m0_accuracy'])} seeds; "
             f"M0 {np.mean(summary['m0_accuracy']):.3f})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in settings.methods:
        s = summary[m]
        cells = [LABEL[m]] + [f"{a:.3f} ± {d:.3f}" for a, d in zip(s["accuracy_mean"], s["accuracy_sd"])]
        cells.append(f"{s['gt_tau_mean'][-1]:.3f} ± {s['gt_tau_sd'][-1]:.3f}")
        cells += [f"{c:.3f}" if np.isfinite(c) else "—" for c in s["consistency_mean"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


_ACC_REF = "Table 1 (accuracy over iterations, Llama-3-8B / Llama-2-7B), direction only"


def claims_from(results: list[dict[str, Any]], settings: ReproSettings, *, plot: str = PLOT
                ) -> tuple[list[Claim], dict[str, Any]]:
    """The claims from per-seed results (``holds`` computed from the numbers; ``spread`` is the seed sd of the
    per-seed gap ``ours − baseline``).

    CREAM-avg is not compared with SRLM by accuracy: in a one-epoch stage the margins stay near 0, where the
    soft-label loss's gradient is (2C − 1) times DPO's, a set-level constant that Adam normalises away, so
    CREAM-avg and SRLM take nearly the same steps (a test, ``test_cream_avg_equals_srlm_in_a_short_adam_stage``).
    The long stage (``mechanism/margin_bound_long_stage``) is where the set-level C can matter; its note gives
    the two arms' margins after the first epoch and after the last, from the records.
    """
    T = settings.iterations
    last = f"M{T + 1}"
    comps: dict[str, Any] = {}
    claims: list[Claim] = []
    m0 = [r["m0"]["accuracy"] for r in results]
    m1 = [r["m1"]["accuracy"] for r in results]
    acc = {m: _series(results, m, "accuracy") for m in settings.methods}
    gt = {m: _series(results, m, "gt_tau") for m in settings.methods}
    cons = {m: _consistency(results, m) for m in settings.methods}
    n = len(results)

    def add(name, metric, ours, base, *, kind, hib=True, margin=0.0, threshold=None, paper="", ref=_ACC_REF,
            what="", extra="", fmt=".3f"):
        c = compare(ours, base, higher_is_better=hib)
        comps[name] = c
        note = _note(c, what, fmt) + (f". {extra}" if extra else "")
        claims.append(Claim(name, metric=metric, ours=c["ours_mean"], baseline=c["baseline_mean"], threshold=threshold,
                            higher_is_better=hib, margin=margin, paper=paper, note=note, kind=kind, paper_ref=ref,
                            spread=c["diff_sd"] if n > 1 else None, n_seeds=n, plot=plot))

    add("sft/m1_gt_m0", "greedy test accuracy, M1 (SFT) vs M0", m1, m0, margin=0.1, kind="sanity",
        paper="precondition: SFT on the seed data improves the base", ref="Table 1 (M0 vs M1), direction only",
        what="M1 vs M0",
        extra="If M1 learnt nothing over M0, self-rewarding has nothing to amplify; the loop warns then")
    if "srlm" in acc:
        add("drift/srlm_declines", f"SRLM greedy test accuracy, {last} vs M1 (lower = decline)",
            acc["srlm"][:, -1], acc["srlm"][:, 0], hib=False, margin=ACC_MARGIN, kind="headline",
            paper="SRLM's gains diminish or reverse over iterations (Llama-2-7B)", what=f"SRLM {last} vs M1")
    if "dyn" in acc and "srlm" in acc:
        add("accuracy/cream_dyn_gt_srlm", f"greedy test accuracy at {last}, CREAM-dyn vs SRLM", acc["dyn"][:, -1],
            acc["srlm"][:, -1], margin=ACC_MARGIN, kind="headline", paper="CREAM > SRLM after the last iteration",
            what=f"CREAM-dyn vs SRLM at {last}")
    if "dyn" in acc:
        add("accuracy/cream_gain_over_sft", f"greedy test accuracy, CREAM-dyn {last} vs M1", acc["dyn"][:, -1],
            acc["dyn"][:, 0], margin=ACC_MARGIN, kind="headline", paper="CREAM improves M1 -> M4",
            what=f"CREAM-dyn {last} vs M1",
            extra="See diagnostic/oracle_gain_over_sft for the ceiling of DPO at this scale")
    if "oracle" in acc:
        add("diagnostic/oracle_gain_over_sft", f"greedy test accuracy, oracle-ranked DPO {last} vs M1",
            acc["oracle"][:, -1], acc["oracle"][:, 0], margin=ACC_MARGIN, kind="sanity",
            paper="upper bound: DPO on truly ranked pairs (not in the paper)",
            ref="not in the paper (toy upper bound), direction only", what=f"oracle DPO {last} vs M1",
            extra="Whether DPO on correctly ranked (best, worst) pairs can beat M1 here at all")
    if "dyn" in gt and "srlm" in gt:
        add("mechanism/gt_tau_cream_gt_srlm", f"mean Kendall tau-b (self-reward vs true utility) at {last}, "
            "CREAM-dyn vs SRLM", gt["dyn"][:, -1], gt["srlm"][:, -1], kind="mechanism",
            paper="self-reward stays closer to the truth", ref="not in the paper (needs a known utility), direction only",
            what=f"gt-tau at {last}",
            extra=f"{settings.n_samples} samples per test prompt from each model, reward log pi - log pi_0")
    longs = [r.get("long_stage") for r in results]
    if longs and all(longs):
        la = [x["avg"]["final_margin_mean"] for x in longs]
        ls = [x["srlm"]["final_margin_mean"] for x in longs]
        a1 = float(np.mean([x["avg"]["margin_by_epoch"][0] for x in longs]))
        s1 = float(np.mean([x["srlm"]["margin_by_epoch"][0] for x in longs]))
        thr2 = float(np.mean([x["logit_c"] + 0.5 for x in longs]))
        cbar = float(np.mean([x["c_avg"] for x in longs]))
        add("mechanism/margin_bound_long_stage", f"mean DPO margin h after a {longs[0]['epochs']}-epoch stage "
            f"(lr {settings.long_stage_lr:g}) on the same round-1 pairs from M1, CREAM-avg vs SRLM (lower is better)",
            la, ls, hib=False, threshold=thr2, kind="mechanism",
            paper="the soft label bounds CREAM's margin at h* = logit(C); DPO's margin keeps growing",
            ref="Sec. 3 (consistency-regularised DPO loss), direction only", what="long-stage margin", fmt=".3f",
            extra=f"threshold mean logit(C)+0.5 = {thr2:.3f} (C = {cbar:.3f}); SRLM's margin "
                  f"{'exceeds' if np.mean(ls) > thr2 else 'stays below'} it. After its first epoch (as many steps as a loop "
                  f"stage) the margins are CREAM-avg {a1:.4f} vs SRLM {s1:.4f} (ratio {a1 / s1 if s1 else float('nan'):.2f}): "
                  f"near h = 0 the set-level C only scales the gradient, which Adam normalises, so in this toy's "
                  f"one-epoch stages CREAM-avg and SRLM cannot differ; the accuracy claim compares CREAM-dyn")
    if "dyn" in cons and "srlm" in cons and T >= 2:
        cd = np.nanmean(cons["dyn"][:, 1:], axis=1)
        cb = np.nanmean(cons["srlm"][:, 1:], axis=1)
        add("consistency/cream_gt_srlm", f"mean consistency C over rounds 2-{T}, CREAM-dyn vs SRLM", cd, cb,
            kind="mechanism", paper="CREAM raises rewarding consistency over iterations",
            ref="rewarding-consistency results (Kendall), direction only", what="C rounds 2+")
    return claims, {"comparisons": comps, "n_seeds": n}
