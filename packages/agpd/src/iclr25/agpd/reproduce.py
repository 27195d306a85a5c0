"""CPU-scale reproduction of AGPD's claims (registered under the ``iclr25.methods`` entry point).

Quick mode: scikit-learn digits, the small Preact CNN, 15 epochs, BadNets + Blended (10 %
poisoning, target 0) + a clean control. Full mode: the mirrored CIFAR-10 subset, 6 epochs without
augmentation (sized to the CPU budget; see ``SETTINGS``). Claims (paper Table 1 and Section 4.2; spec "CPU-scale reproduction"):

Headline claims use the package's default detector (the backdoorbench variant, the official code's
choices); the paper variant's numbers are in the notes.

- ``<attack>/target_identified``: AGPD names exactly the true target class (1/0).
- ``<attack>/tpr_agpd_vs_spectral``, ``<attack>/tpr_agpd_vs_ac``: AGPD's TPR beats the baseline's
  by at least one percentage point.
- ``<attack>/fpr_agpd``: AGPD's FPR is at most 2 % and below Spectral Signatures' (read only when
  AGPD's TPR is at least 50 % in every seed).
- ``<attack>/f1_agpd``: AGPD's F1 is at least 90 %.
- ``mechanism/stage3_given_target_<attack>_{tpr,fpr}``: Stage 3 alone, told the true target: TPR >= 90 %,
  FPR <= 2 %.
- ``clean/no_target_class``: on a model trained without poisoning no class is declared a target;
  ``clean/target_named_when_planted``: the same detector names class 0 once a certain target is
  planted in the clean model's gradients (so the first claim can fail).

Every variant's numbers go into ``experiments.json``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

from .data import load_data
from .pipeline import run_experiment

__all__ = ["reproduce", "SETTINGS", "claims_from_experiments"]

log = logging.getLogger("iclr25.agpd")

#: ``records`` versions what an experiment record holds; a record made by older detection code (before
#: the issue-41 Stage 3) has another version and is not reused.
SETTINGS = {
    True: dict(data="digits", epochs=15, model="small", augment=False, records=2),
    # Full: sized to the time budget (the spec's 30 epochs with crop + flip cost ~85 CPU-s per epoch per
    # model with one thread, ~2.3 h per seed; 12 epochs with crop + flip did not learn the backdoor).
    False: dict(data="cifar10-subset", epochs=6, model="small", augment=False, records=2),
}
ATTACKS = ("badnets", "blended")
#: The detector setting of the headline claims: the package default (AGPDConfig(): the backdoorbench variant).
DEFAULT = "backdoorbench"
#: An FPR claim is read only when AGPD found at least this share (%) of the poisoned samples in every seed:
#: a detector that flags a handful of samples has a low FPR without detecting anything.
MIN_TPR_FOR_FPR = 50.0
PAPER = {"badnets": "TPR 90.06 / FPR 0.03 / F1 94.65; Spectral TPR 16.76 / FPR 1.30",
         "blended": "TPR 99.98 / FPR 0.02 / F1 99.88",
         "avg": "average over 12 attacks: TPR 96.66 / FPR 0.17 / F1 97.44"}


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
        how = [_how(d.get("target_classes"), d.get("fallback")) for d in D]
        ctx = (f"{scale}; {n} seed(s); ACC {_ms([_pct(e['acc']) for e in E])}, ASR {_ms([_pct(e['asr']) for e in E])}; "
               f"{DEFAULT} (default) targets per seed {[d['target_classes'] for d in D]} (true: 0; named by "
               f"{how}), z of the target {[round(d['target_z'], 2) for d in D if 'target_z' in d]}; paper variant "
               f"targets {[p['target_classes'] for p in P]}, TPR {_ms([_pct(p['TPR']) for p in P])}")
        if M10[0] is not None:
            ctx += (f"; backdoorbench + m = 10 % targets {[m['target_classes'] for m in M10]}, TPR "
                    f"{_ms([_pct(m['TPR']) for m in M10])} FPR {_ms([_pct(m['FPR']) for m in M10])}")
        tpr = [_pct(d["TPR"]) for d in D]
        fpr = [_pct(d["FPR"]) for d in D]
        found = min(tpr) >= MIN_TPR_FOR_FPR
        fpr_ours = _mean(fpr) if found else float("nan")
        fpr_note = ("baseline = Spectral Signatures' FPR; " + (
            f"per seed {[round(f, 3) for f in fpr]}" if found else
            f"not meaningful: AGPD's TPR is below {MIN_TPR_FOR_FPR:.0f} % in "
            f"{sum(t < MIN_TPR_FOR_FPR for t in tpr)}/{n} seed(s) (TPR per seed {[round(t, 2) for t in tpr]}: it "
            f"found little of the poison), so a low FPR ({_ms(fpr)} %) shows only that it flagged little"))
        claims += [
            Claim(f"{a}/asr_before_detection", "attack success rate of the poisoned model (%)",
                  _mean([_pct(e["asr"]) for e in E]), threshold=80.0, paper="spec: ASR >= 80 % before detection",
                  note=f"per seed {[round(_pct(e['asr']), 1) for e in E]}; the backdoor must be learned for "
                       "detection to mean anything"),
            Claim(f"{a}/target_identified", f"share of seeds where exactly the true target is named ({DEFAULT})",
                  _mean([float(d["target_classes"] == [0]) for d in D]), threshold=1.0,
                  paper="target identified (Fig. 5a)", note=ctx),
        ]
        if M10[0] is not None:
            claims.append(Claim(
                f"{a}/target_identified_m10", "share of seeds where exactly the true target is named (m = 10 %)",
                _mean([float(m["target_classes"] == [0]) for m in M10]), threshold=1.0,
                paper="Remark after Eq. 4: averaging m far-end vectors",
                note=f"backdoorbench variant with m = ceil(0.1 n_k); z of the target per seed "
                     f"{[round(m['target_z'], 2) for m in M10]}; targets {[m['target_classes'] for m in M10]} "
                     f"(named by {[_how(m['target_classes'], m.get('fallback')) for m in M10]})"))
        claims += [
            Claim(f"{a}/tpr_agpd_vs_spectral", f"TPR (%) ({DEFAULT})", _mean(tpr),
                  baseline=_mean([_pct(x["TPR"]) for x in SP]), margin=1.0, paper=PAPER[a],
                  note=_gap_note(tpr, [_pct(x["TPR"]) for x in SP])
                  + f"; Spectral Signatures FPR {_ms([_pct(x['FPR']) for x in SP])}"),
            Claim(f"{a}/tpr_agpd_vs_ac", f"TPR (%) ({DEFAULT})", _mean(tpr), baseline=_mean([_pct(x["TPR"]) for x in AC]),
                  margin=1.0, paper="AC CIFAR-10 average TPR 6.57", note=_gap_note(tpr, [_pct(x["TPR"]) for x in AC])
                  + f"; Activation Clustering FPR {_ms([_pct(x['FPR']) for x in AC])}"),
            Claim(f"{a}/fpr_agpd", f"FPR (%) ({DEFAULT}; only when TPR >= 50 %)", fpr_ours,
                  baseline=_mean([_pct(x["FPR"]) for x in SP]), threshold=2.0, higher_is_better=False,
                  paper=PAPER[a], note=fpr_note),
            Claim(f"{a}/f1_agpd", f"F1 (%) ({DEFAULT})", _mean([_pct(d["F1"]) for d in D]), threshold=90.0,
                  paper=PAPER[a], note=f"per seed {[round(_pct(d['F1']), 2) for d in D]}; paper variant F1 "
                                       f"{_ms([_pct(p['F1']) for p in P])}"),
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
                      _mean(gtpr), threshold=90.0, paper=PAPER[a], note=gnote),
                Claim(f"mechanism/stage3_given_target_{a}_fpr", f"FPR (%) of Stage 3 told the true target ({DEFAULT})",
                      _mean(gfpr), threshold=2.0, higher_is_better=False, paper=PAPER[a],
                      note=f"per seed {[round(f, 3) for f in gfpr]} (FPR over the whole training set; with TPR "
                           f"{_ms(gtpr)} %)"),
            ]
        ranks = {v: [e["agpd"][v]["target_rank"] for e in E] for v in E[0]["agpd"] if "target_rank" in E[0]["agpd"][v]}
        zs = {v: [round(e["agpd"][v]["target_z"], 2) for e in E] for v in ranks}
        claims.append(Claim(
            f"mechanism/{a}_target_rank", f"rank of the true target's robust z among classes ({DEFAULT}; 1 = top)",
            _mean(ranks[DEFAULT]), threshold=1.0, higher_is_better=False,
            paper="the target class has the most dispersed GCD (Sec. 4.2)",
            note="; ".join(f"{v}: rank {ranks[v]}, z {zs[v]}" for v in ranks) + f" (tau_z = e^2 = {np.e**2:.2f})"))
        sep = [max((s["ratio"] or 0.0) for s in e["inclass_separation"].values()) for e in E]
        best = [max(e["inclass_separation"].items(), key=lambda kv: kv[1]["ratio"] or 0.0) for e in E]
        claims.append(Claim(
            f"mechanism/{a}_inclass_separation",
            "angle(poisoned mean, clean mean) / clean spread inside the target class (best layer)",
            _mean(sep), threshold=1.0, paper="poisoned and clean gradients form two clusters (Sec. 4.1, Fig. 3)",
            note="; ".join(f"seed {i}: {b[0]} angle {b[1]['angle_deg']:.1f}° vs clean spread "
                           f"{b[1]['clean_spread_deg']:.1f}°" for i, b in enumerate(best))
                 + "; > 1: the poisoned mean lies outside the clean cloud"))
    if "clean" in runs[0]:
        D = [r["clean"]["agpd"][DEFAULT] for r in runs]
        P = [r["clean"]["agpd"]["paper"] for r in runs]
        M10 = [r["clean"]["agpd"].get("backdoorbench-m10") for r in runs]
        claims.append(Claim("clean/no_target_class", f"classes declared targets ({DEFAULT}; mean over seeds)",
                            _mean([len(d["target_classes"]) for d in D]), threshold=0.0, higher_is_better=False,
                            paper="clean model: no target class",
                            note=f"{scale}; {DEFAULT} targets {[d['target_classes'] for d in D]} (flagged "
                                 f"{[d['n_flagged'] for d in D]}; max z {[round(max(d['z']), 2) for d in D]}); paper "
                                 f"variant {[p['target_classes'] for p in P]}; paired with "
                                 "clean/target_named_when_planted"))
        PL = [d.get("planted") for d in D]
        if PL[0] is not None:
            claims.append(Claim(
                "clean/target_named_when_planted",
                f"share of seeds where the same detector ({DEFAULT}) names exactly class 0 once a target is planted",
                _mean([float(pl["targets"] == [0]) for pl in PL]), threshold=1.0,
                paper="target classes cross tau_z = e^2 (Sec. 4.2)",
                note=f"clean model's gradients, {PL[0]['n_planted']} of class 0's samples negated at every layer; "
                     f"targets per seed {[pl['targets'] for pl in PL]} (named by "
                     f"{[_how(pl['targets'], pl['fallback']) for pl in PL]}), z of class 0 "
                     f"{[round(pl['z_target'], 1) for pl in PL]} at {[pl['layer'] for pl in PL]} (tau_z "
                     f"{np.e**2:.2f}); Stage 3 on the plant TPR {_ms([_pct(pl['TPR']) for pl in PL])} FPR "
                     f"{_ms([_pct(pl['FPR']) for pl in PL])}"))
        if M10[0] is not None:
            claims.append(Claim("clean/no_target_class_m10", "classes declared targets, m = 10 % (mean over seeds)",
                                _mean([len(m["target_classes"]) for m in M10]), threshold=0.0,
                                higher_is_better=False, paper="clean model: no target class",
                                note=f"backdoorbench + m = 10 %: targets {[m['target_classes'] for m in M10]}, "
                                     f"max z {[round(max(m['z']), 2) for m in M10]}"))
    return claims


def _markdown(exps: dict[str, dict]) -> str:
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


def _experiment_path(out: Path, seed: int, attack: str) -> tuple[Path, Path]:
    """``(checkpoint, finished-experiment record)`` of one (seed, attack) under ``out``."""
    stem = attack if seed == 0 else f"{attack}-seed{seed}"
    return out / "checkpoints" / f"{stem}.pt", out / "experiments" / f"{stem}.json"


def _cached(out: Path, seed: int, attack: str, settings: dict) -> dict | None:
    """The recorded result of a finished experiment run under ``settings``, else ``None``."""
    done = _experiment_path(out, seed, attack)[1]
    if done.is_file():
        rec = json.loads(done.read_text())
        if rec.get("settings") == settings:
            log.info("agpd reproduce: reusing %s", done)
            return rec["result"]
    return None


def _run_one(out: Path, settings: dict, seed: int, attack: str) -> dict:
    """Train + detect one (seed, attack) (or reuse its record) and record it atomically."""
    cached = _cached(out, seed, attack, settings)
    if cached is not None:
        return cached
    data = load_data(settings["data"], seed)
    log.info("agpd reproduce: %s on %s, seed %d", attack, data.name, seed)
    ck, done = _experiment_path(out, seed, attack)
    res = run_experiment(data, attack, epochs=settings["epochs"], model=settings["model"],
                         augment=settings["augment"], seed=seed, checkpoint=ck, resume=True)
    done.parent.mkdir(parents=True, exist_ok=True)
    tmp = done.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"settings": settings, "result": res}, default=float) + "\n")
    tmp.replace(done)
    return res


def _worker_init(threads: int) -> None:
    """Worker process start-up: one torch thread each (``threads`` per worker) and INFO logging."""
    import torch

    torch.set_num_threads(threads)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s[%(process)d]: %(message)s")


def _job(args: tuple[str, dict, int, str]) -> dict:
    out, settings, seed, attack = args
    # the record goes through JSON in both paths, so serial and parallel results are the same objects
    return json.loads(json.dumps(_run_one(Path(out), settings, seed, attack), default=float))


def reproduce(quick: bool, out_dir: Path, *, seeds: Sequence[int] | None = None, threads: int | None = 1,
              quiet: bool = False, workers: int = 1) -> list[Claim]:
    """Run BadNets, Blended and the clean control end to end for every seed; return the claims.
    Writes ``experiments.json`` (every number, all detector settings, per-layer rho and z, per seed)
    and ``experiments.md``. Trained models are checkpointed every epoch in ``checkpoints/`` and each
    finished experiment (seed x attack) is saved in ``experiments/``: a rerun into the same folder
    resumes training mid-model and skips finished experiments (reused only with the same settings).

    Args:
        quick: digits (quick) or the CIFAR-10 subset (full).
        seeds: default ``(0, 1)`` quick, ``(0, 1, 2)`` full; a seed sets the poisoned samples, the
            defender's clean split and the training order.
        threads: torch threads while running (1: fastest for these small convolutions); with
            ``workers > 1``, the threads of each worker process (default 1).
        workers: experiments (seed x attack) run at once, each in its own (spawned) process;
            1 = in this process, one after the other. The records, and so the claims, are the same
            either way (each experiment seeds itself; test ``test_reproduce_workers_match_serial``);
            only the ``seconds`` timings differ. 2 workers on 2 cores halve the wall time of a
            3-seed full run.

    Raises:
        ValueError: ``workers`` not an integer >= 1.
        iclr25.core.DataNotFoundError: full mode without the mirrored CIFAR-10 subset.
    """
    from iclr25.core.threads import limited_threads

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r} must be an integer >= 1 (1 = run the experiments one after the other)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = dict(SETTINGS[bool(quick)])
    seeds = tuple(seeds) if seeds else ((0, 1) if quick else (0, 1, 2))
    jobs = [(seed, a) for seed in seeds for a in (*ATTACKS, "clean")]
    results: dict[tuple[int, str], dict] = {}
    if workers == 1:
        with limited_threads(threads):
            for seed, a in jobs:
                results[seed, a] = _job((str(out), s, seed, a))
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        todo = []
        for seed, a in jobs:  # finished experiments are read here, not in a worker
            rec = _cached(out, seed, a, s)
            if rec is None:
                todo.append((seed, a))
            else:
                results[seed, a] = json.loads(json.dumps(rec, default=float))
        if todo:
            log.info("agpd reproduce: %d experiment(s) on %d worker process(es)", len(todo), min(workers, len(todo)))
            with ProcessPoolExecutor(min(workers, len(todo)), mp_context=mp.get_context("spawn"),
                                     initializer=_worker_init, initargs=(threads or 1,)) as pool:
                futs = {k: pool.submit(_job, (str(out), s, *k)) for k in todo}
                for k, f in futs.items():
                    results[k] = f.result()
    runs: list[dict[str, dict]] = [{a: results[seed, a] for a in (*ATTACKS, "clean")} for seed in seeds]
    (out / "experiments.json").write_text(json.dumps({"seeds": list(seeds), "runs": runs}, indent=1, default=float) + "\n")
    (out / "experiments.md").write_text("\n".join(f"## seed {sd}\n\n" + _markdown(r) for sd, r in zip(seeds, runs)))
    scale = f"{s['data']}, small Preact CNN, {s['epochs']} epochs, seeds {list(seeds)}"
    return claims_from_experiments(runs, scale)
