"""AGPD's claims, a pure function of the experiment records (no training, no detection).

:func:`claims_from_experiments` reads the records of :func:`~iclr25.agpd.experiments.experiment_job`
(one dict per attack and seed) and returns the claims; :func:`experiments_markdown` the per-seed table.

Every claim fills the core record: ``kind``, ``paper_value``/``paper_ref`` (Table 1 of the paper where it
gives a number in the same units, "direction only" otherwise), ``spread`` (the seed standard deviation of
the compared quantity: of ``ours - baseline`` for a baseline claim, of ``ours`` for a threshold-only claim;
``None`` with one seed), ``n_seeds`` and ``plot`` (:mod:`iclr25.agpd.plots`).
"""

from __future__ import annotations

import numpy as np

from iclr25.core.results import Claim

__all__ = ["claims_from_experiments", "experiments_markdown", "ATTACKS", "DEFAULT", "MIN_TPR_FOR_FPR", "PAPER",
           "PAPER_TABLE1", "PLOT_DETECTION", "PLOT_TARGET"]

ATTACKS = ("badnets", "blended")
#: The detector setting of the headline claims: the package default (AGPDConfig(): the backdoorbench variant).
DEFAULT = "backdoorbench"
#: An FPR claim is read only when AGPD found at least this share (%) of the poisoned samples in every seed:
#: a detector that flags a handful of samples has a low FPR without detecting anything.
MIN_TPR_FOR_FPR = 50.0
PAPER = {"badnets": "TPR 90.06 / FPR 0.03 / F1 94.65; Spectral TPR 16.76 / FPR 1.30",
         "blended": "TPR 99.98 / FPR 0.02 / F1 99.88",
         "avg": "average over 12 attacks: TPR 96.66 / FPR 0.17 / F1 97.44"}
#: Table 1 of the paper (CIFAR-10, Preact-ResNet18, %): the no-defense ASR and AGPD's TPR / FPR / F1.
PAPER_TABLE1 = {"badnets": {"ASR": 93.79, "TPR": 90.06, "FPR": 0.03, "F1": 94.65},
                "blended": {"ASR": 99.75, "TPR": 99.98, "FPR": 0.02, "F1": 99.88}}
#: the figures :func:`iclr25.agpd.plots.write_plots` draws (relative to the results folder)
PLOT_DETECTION = "detection.png"
PLOT_TARGET = "target_z.png"


def _pct(x: float) -> float:
    return 100.0 * float(x)


def _ms(vals: list[float]) -> str:
    a = np.asarray([v for v in vals if v is not None and np.isfinite(v)], dtype=float)
    if not len(a):
        return "n/a"
    return f"{a.mean():.2f}" + (f" ± {a.std(ddof=1):.2f}" if len(a) > 1 else "")


def _mean(vals: list[float]) -> float:
    a = np.asarray([np.nan if v is None else v for v in vals], dtype=float)
    return float(a.mean()) if len(a) else float("nan")


def _sd(vals: list[float]) -> float | None:
    """The seed standard deviation (ddof 1) of finite values; ``None`` with fewer than two seeds or if any
    value is undefined (then no spread can be read)."""
    a = np.asarray([np.nan if v is None else v for v in vals], dtype=float)
    if len(a) < 2 or not np.all(np.isfinite(a)):
        return None
    return float(a.std(ddof=1))


def _zmax(z: list) -> float | None:
    """The largest robust z of one run (rounded), ignoring undefined (``None``) entries."""
    v = [x for x in z if x is not None]
    return round(max(v), 2) if v else None


def _gap_sd(ours: list[float], base: list[float]) -> float | None:
    return _sd([o - b for o, b in zip(ours, base)])


def _gap_note(ours: list[float], base: list[float]) -> str:
    d = np.asarray(ours, dtype=float) - np.asarray(base, dtype=float)
    sd = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
    exceeds = "n/a (one seed)" if not np.isfinite(sd) else ("yes" if abs(d.mean()) > sd else "no")
    return (f"paired gap {d.mean():+.2f}" + ("" if not np.isfinite(sd) else f" ± {sd:.2f}")
            + f", per seed {[round(float(x), 2) for x in d]}; gap exceeds seed spread: {exceeds}")


def _how(targets, fallback) -> str:
    """How the targets of one run were named: 'none named', 'rho fallback' or 'z-score'."""
    return "none named" if not targets else ("rho fallback" if fallback else "z-score")


def _given(e: dict, v: str) -> dict | None:
    return e["agpd"][v].get("given_target")


def claims_from_experiments(runs: dict[str, dict] | list[dict[str, dict]], scale: str) -> list[Claim]:
    """Build the claims from :func:`~iclr25.agpd.pipeline.run_experiment` outputs keyed by attack
    (``badnets``, ``blended``, ``clean``), one dict per seed (a single dict = one seed).

    The detector of the headline claims is the package default, ``DEFAULT`` (the backdoorbench
    variant: the official code's choices); the paper variant's numbers are in the notes. Values are
    means over seeds; notes give mean ± sd, per-seed values and, for margin claims, the paired gap
    and whether it exceeds its seed spread. ``target_identified`` is the fraction of seeds where
    exactly the true target was named (threshold 1: every seed); the note says whether the z-score
    or the ``rho`` fallback named it. ``mechanism/stage3_given_target_<attack>_{tpr,fpr}`` measure
    Stage 3 alone, told the true target (at the layer where the target's z is highest), so a
    failure of Stage 2 and one of Stage 3 are told apart. ``clean/no_target_class`` is paired with
    ``clean/target_named_when_planted``: the same detector on the clean model's gradients with a
    certain target planted in class 0 (:func:`~iclr25.agpd.pipeline.planted_target_check`), so "no
    target named" cannot hold merely because nothing is ever named. An FPR claim is only meaningful
    when the detector found most of the poison: with TPR < ``MIN_TPR_FOR_FPR`` (50 %) in any seed
    its value is NaN (not holding).
    """
    runs = [runs] if isinstance(runs, dict) else list(runs)
    n = len(runs)
    claims: list[Claim] = []
    for a in ATTACKS:
        if a not in runs[0]:
            continue
        E = [r[a] for r in runs]
        D = [e["agpd"][DEFAULT] for e in E]
        P = [e["agpd"]["paper"] for e in E]
        M10 = [e["agpd"].get("backdoorbench-m10") for e in E]
        SP = [e["baselines"]["spectral"] for e in E]
        AC = [e["baselines"]["ac"] for e in E]
        t1 = PAPER_TABLE1[a]
        how = [_how(d.get("target_classes"), d.get("fallback")) for d in D]
        ctx = (f"{scale}; {n} seed(s); ACC {_ms([_pct(e['acc']) for e in E])}, ASR {_ms([_pct(e['asr']) for e in E])}; "
               f"{DEFAULT} (default) targets per seed {[d['target_classes'] for d in D]} (true: 0; named by "
               f"{how}), z of the target {[round(d['target_z'], 2) for d in D if 'target_z' in d]}; paper variant "
               f"targets {[p['target_classes'] for p in P]}, TPR {_ms([_pct(p['TPR']) for p in P])}")
        if M10[0] is not None:
            ctx += (f"; backdoorbench + m = 10 % targets {[m['target_classes'] for m in M10]}, TPR "
                    f"{_ms([_pct(m['TPR']) for m in M10])} FPR {_ms([_pct(m['FPR']) for m in M10])}")
        asr = [_pct(e["asr"]) for e in E]
        tpr = [_pct(d["TPR"]) for d in D]
        fpr = [_pct(d["FPR"]) for d in D]
        sp_tpr = [_pct(x["TPR"]) for x in SP]
        ac_tpr = [_pct(x["TPR"]) for x in AC]
        sp_fpr = [_pct(x["FPR"]) for x in SP]
        f1 = [_pct(d["F1"]) for d in D]
        ident = [float(d["target_classes"] == [0]) for d in D]
        found = min(tpr) >= MIN_TPR_FOR_FPR
        fpr_ours = _mean(fpr) if found else float("nan")
        fpr_note = ("baseline = Spectral Signatures' FPR; " + (
            f"per seed {[round(f, 3) for f in fpr]}" if found else
            f"not meaningful: AGPD's TPR is below {MIN_TPR_FOR_FPR:.0f} % in "
            f"{sum(t < MIN_TPR_FOR_FPR for t in tpr)}/{n} seed(s) (TPR per seed {[round(t, 2) for t in tpr]}: it "
            f"found little of the poison), so a low FPR ({_ms(fpr)} %) shows only that it flagged little"))
        claims += [
            Claim(f"{a}/asr_before_detection", "attack success rate of the poisoned model (%)", _mean(asr),
                  threshold=80.0, paper=f"no-defense ASR {t1['ASR']} % (Table 1); detection needs a learned backdoor",
                  note=f"per seed {[round(x, 1) for x in asr]}; the backdoor must be learned for detection to mean "
                       "anything",
                  kind="sanity", paper_value=t1["ASR"], paper_ref="Table 1", spread=_sd(asr), n_seeds=n,
                  plot=PLOT_DETECTION),
            Claim(f"{a}/target_identified", f"share of seeds where exactly the true target is named ({DEFAULT})",
                  _mean(ident), threshold=1.0, paper="target identified (Fig. 5a)", note=ctx,
                  kind="headline", paper_value=None, paper_ref="Fig. 5a, direction only", spread=_sd(ident),
                  n_seeds=n, plot=PLOT_TARGET),
        ]
        if M10[0] is not None:
            ident10 = [float(m["target_classes"] == [0]) for m in M10]
            claims.append(Claim(
                f"{a}/target_identified_m10", "share of seeds where exactly the true target is named (m = 10 %)",
                _mean(ident10), threshold=1.0,
                paper="Remark after Eq. 4: averaging m far-end vectors",
                note=f"backdoorbench variant with m = ceil(0.1 n_k); z of the target per seed "
                     f"{[round(m['target_z'], 2) for m in M10]}; targets {[m['target_classes'] for m in M10]} "
                     f"(named by {[_how(m['target_classes'], m.get('fallback')) for m in M10]})",
                kind="headline", paper_value=None, paper_ref="Sec. 4.2 remark and Table 3, direction only",
                spread=_sd(ident10), n_seeds=n, plot=PLOT_TARGET))
        claims += [
            Claim(f"{a}/tpr_agpd_vs_spectral", f"TPR (%) ({DEFAULT})", _mean(tpr), baseline=_mean(sp_tpr), margin=1.0,
                  paper=PAPER[a], note=_gap_note(tpr, sp_tpr) + f"; Spectral Signatures FPR {_ms(sp_fpr)}",
                  kind="headline", paper_value=t1["TPR"], paper_ref="Table 1", spread=_gap_sd(tpr, sp_tpr),
                  n_seeds=n, plot=PLOT_DETECTION),
            Claim(f"{a}/tpr_agpd_vs_ac", f"TPR (%) ({DEFAULT})", _mean(tpr), baseline=_mean(ac_tpr), margin=1.0,
                  paper="AC CIFAR-10 average TPR 6.57", note=_gap_note(tpr, ac_tpr)
                  + f"; Activation Clustering FPR {_ms([_pct(x['FPR']) for x in AC])}",
                  kind="headline", paper_value=t1["TPR"], paper_ref="Table 1", spread=_gap_sd(tpr, ac_tpr),
                  n_seeds=n, plot=PLOT_DETECTION),
            Claim(f"{a}/fpr_agpd", f"FPR (%) ({DEFAULT}; only when TPR >= 50 %)", fpr_ours,
                  baseline=_mean(sp_fpr), threshold=2.0, higher_is_better=False, paper=PAPER[a], note=fpr_note,
                  kind="headline", paper_value=t1["FPR"], paper_ref="Table 1",
                  spread=_gap_sd(fpr, sp_fpr) if found else None, n_seeds=n, plot=PLOT_DETECTION),
            Claim(f"{a}/f1_agpd", f"F1 (%) ({DEFAULT})", _mean(f1), threshold=90.0, paper=PAPER[a],
                  note=f"per seed {[round(x, 2) for x in f1]}; paper variant F1 {_ms([_pct(p['F1']) for p in P])}",
                  kind="headline", paper_value=t1["F1"], paper_ref="Table 1", spread=_sd(f1), n_seeds=n,
                  plot=PLOT_DETECTION),
        ]
        GD = [_given(e, DEFAULT) for e in E]
        if GD[0] is not None:
            GP = [_given(e, "paper") for e in E]
            per_layer = [e["agpd"][DEFAULT].get("given_target_per_layer", {}) for e in E]
            best = [max(pl.items(), key=lambda kv: kv[1]["TPR"] - kv[1]["FPR"]) for pl in per_layer if pl]
            gtpr = [_pct(g["TPR"]) for g in GD]
            gfpr = [_pct(g["FPR"]) for g in GD]
            gnote = (f"{DEFAULT}, Stage 3 alone on the true target class at the layer where its z is highest "
                     f"({[g['layer'] for g in GD]}); TPR per seed {[round(t, 2) for t in gtpr]}, FPR per seed "
                     f"{[round(f, 3) for f in gfpr]}, stop round {[g['stop'] for g in GD]} of "
                     f"{[g['js_len'] for g in GD]} JS values; paper variant TPR {_ms([_pct(g['TPR']) for g in GP])} "
                     f"FPR {_ms([_pct(g['FPR']) for g in GP])}" + (
                         "; best layer per seed (max TPR - FPR): " + ", ".join(
                             f"{k} TPR {_pct(v['TPR']):.1f} FPR {_pct(v['FPR']):.2f}" for k, v in best) if best else ""))
            claims += [
                Claim(f"mechanism/stage3_given_target_{a}_tpr", f"TPR (%) of Stage 3 told the true target ({DEFAULT})",
                      _mean(gtpr), threshold=90.0, paper="Stage 3 separates the target class's poison (Algorithm 1)",
                      note=gnote,
                      kind="mechanism", paper_value=None, paper_ref="Sec. 4.2 Stage 3 (Algorithm 1), direction only",
                      spread=_sd(gtpr), n_seeds=n, plot=PLOT_DETECTION),
                Claim(f"mechanism/stage3_given_target_{a}_fpr", f"FPR (%) of Stage 3 told the true target ({DEFAULT})",
                      _mean(gfpr), threshold=2.0, higher_is_better=False,
                      paper="Stage 3 keeps the clean samples (Algorithm 1)",
                      note=f"per seed {[round(f, 3) for f in gfpr]} (FPR over the whole training set; with TPR "
                           f"{_ms(gtpr)} %)",
                      kind="mechanism", paper_value=None, paper_ref="Sec. 4.2 Stage 3 (Algorithm 1), direction only",
                      spread=_sd(gfpr), n_seeds=n, plot=PLOT_DETECTION),
            ]
        ranks = {v: [e["agpd"][v]["target_rank"] for e in E] for v in E[0]["agpd"] if "target_rank" in E[0]["agpd"][v]}
        zs = {v: [round(e["agpd"][v]["target_z"], 2) for e in E] for v in ranks}
        claims.append(Claim(
            f"mechanism/{a}_target_rank", f"rank of the true target's robust z among classes ({DEFAULT}; 1 = top)",
            _mean(ranks[DEFAULT]), threshold=1.0, higher_is_better=False,
            paper="the target class has the most dispersed GCD (Sec. 4.2)",
            note="; ".join(f"{v}: rank {ranks[v]}, z {zs[v]}" for v in ranks) + f" (tau_z = e^2 = {np.e**2:.2f})",
            kind="mechanism", paper_value=None, paper_ref="Sec. 3 observation 1, direction only",
            spread=_sd([float(r) for r in ranks[DEFAULT]]), n_seeds=n, plot=PLOT_TARGET))
        sep = [max((s["ratio"] or 0.0) for s in e["inclass_separation"].values()) for e in E]
        best = [max(e["inclass_separation"].items(), key=lambda kv: kv[1]["ratio"] or 0.0) for e in E]
        claims.append(Claim(
            f"mechanism/{a}_inclass_separation",
            "angle(poisoned mean, clean mean) / clean spread inside the target class (best layer)",
            _mean(sep), threshold=1.0, paper="poisoned and clean gradients form two clusters (Sec. 4.1, Fig. 3)",
            note="; ".join(f"seed {i}: {b[0]} angle {b[1]['angle_deg']:.1f}° vs clean spread "
                           f"{b[1]['clean_spread_deg']:.1f}°" for i, b in enumerate(best))
                 + "; > 1: the poisoned mean lies outside the clean cloud",
            kind="mechanism", paper_value=None, paper_ref="Sec. 3 observation 2 (Fig. 3), direction only",
            spread=_sd(sep), n_seeds=n, plot=""))
    if "clean" in runs[0]:
        D = [r["clean"]["agpd"][DEFAULT] for r in runs]
        P = [r["clean"]["agpd"]["paper"] for r in runs]
        M10 = [r["clean"]["agpd"].get("backdoorbench-m10") for r in runs]
        named = [float(len(d["target_classes"])) for d in D]
        claims.append(Claim("clean/no_target_class", f"classes declared targets ({DEFAULT}; mean over seeds)",
                            _mean(named), threshold=0.0, higher_is_better=False,
                            paper="clean model: no target class",
                            note=f"{scale}; {DEFAULT} targets {[d['target_classes'] for d in D]} (flagged "
                                 f"{[d['n_flagged'] for d in D]}; max z {[_zmax(d['z']) for d in D]}); paper "
                                 f"variant {[p['target_classes'] for p in P]}; paired with "
                                 "clean/target_named_when_planted",
                            kind="headline", paper_value=None, paper_ref="Sec. 4.2 Stage 2, direction only",
                            spread=_sd(named), n_seeds=n, plot=PLOT_TARGET))
        PL = [d.get("planted") for d in D]
        if PL[0] is not None:
            hit = [float(pl["targets"] == [0]) for pl in PL]
            claims.append(Claim(
                "clean/target_named_when_planted",
                f"share of seeds where the same detector ({DEFAULT}) names exactly class 0 once a target is planted",
                _mean(hit), threshold=1.0,
                paper="target classes cross tau_z = e^2 (Sec. 4.2)",
                note=f"clean model's gradients, {PL[0]['n_planted']} of class 0's samples negated at every layer; "
                     f"targets per seed {[pl['targets'] for pl in PL]} (named by "
                     f"{[_how(pl['targets'], pl['fallback']) for pl in PL]}), z of class 0 "
                     f"{[round(pl['z_target'], 1) for pl in PL]} at {[pl['layer'] for pl in PL]} (tau_z "
                     f"{np.e**2:.2f}); Stage 3 on the plant TPR {_ms([_pct(pl['TPR']) for pl in PL])} FPR "
                     f"{_ms([_pct(pl['FPR']) for pl in PL])}",
                kind="sanity", paper_value=None, paper_ref="Sec. 4.2 Stage 2, direction only",
                spread=_sd(hit), n_seeds=n, plot=PLOT_TARGET))
        if M10[0] is not None:
            named10 = [float(len(m["target_classes"])) for m in M10]
            claims.append(Claim("clean/no_target_class_m10", "classes declared targets, m = 10 % (mean over seeds)",
                                _mean(named10), threshold=0.0, higher_is_better=False,
                                paper="clean model: no target class",
                                note=f"backdoorbench + m = 10 %: targets {[m['target_classes'] for m in M10]}, "
                                     f"max z {[_zmax(m['z']) for m in M10]}",
                                kind="headline", paper_value=None, paper_ref="Sec. 4.2 Stage 2, direction only",
                                spread=_sd(named10), n_seeds=n, plot=PLOT_TARGET))
    return claims


def experiments_markdown(exps: dict[str, dict]) -> str:
    """One seed's records as a Markdown table: per attack and detector, targets and TPR / FPR / F1 (%)."""
    rows = ["| attack | ACC | ASR | detector | targets | TPR | FPR | F1 |", "|---|---|---|---|---|---|---|---|"]
    for a, e in exps.items():
        asr = "" if e["asr"] is None else f"{_pct(e['asr']):.1f}"
        given = [(f"AGPD ({v}) Stage 3 given the true target", r["given_target"])
                 for v, r in e["agpd"].items() if "given_target" in r]
        for name, m in [*((f"AGPD ({v})", r) for v, r in e["agpd"].items()), *given, *e["baselines"].items()]:
            tg = str(m.get("target_classes", ""))
            rows.append(f"| {a} | {_pct(e['acc']):.1f} | {asr} | {name} | {tg} | {_pct(m['TPR']):.2f} | "
                        f"{_pct(m['FPR']):.2f} | {_pct(m['F1']):.2f} |")
    return "\n".join(rows) + "\n"
