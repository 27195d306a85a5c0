"""CPU-scale reproduction of the transfer attack's claims (issue 29; jobs of the core's runner, issue 48).

The owner trains a robust target (n = 20 bits) on the even-indexed CIFAR-10-subset training images;
the attacker trains surrogates (n_s = 16 bits, seeds ``--seeds``) on the odd-indexed ones (disjoint
data, no access to the target, its bit length or its message). Every decoder is checked before the
first attack step. The test images are watermarked with the owner's message and attacked with the
transfer attack for each m (each surrogate subset one "seed" of the comparison), compared with
matched post-processing, random ±r noise, sign-gradient and clip-projection variants, and the
white-box bound.

Jobs (:func:`jobs`): ``train_<model>`` (:func:`~.train_job.train_job`, one per model), ``decoder_check``
(:func:`~.checkpoint.decoder_check_job`, after every training), ``compare_<target>``
(:func:`~.comparison.comparison_job`, after the check). The claims are a pure function of the records
(:func:`claims_from_records`); the figures are drawn by :mod:`.plots`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .checkpoint import DecoderCheckError, decoder_check_job
from .comparison import comparison_job, comparison_table, mean_sd
from .config import CPU_TRAIN, TINY, default_alpha
from .train_job import train_job

__all__ = ["reproduce", "jobs", "claims_from_records", "QUICK", "FULL", "CLAIM_NAMES", "TINY", "CPU_TRAIN",
           "TARGET_BITS", "SURROGATE_BITS", "PAPER_REF"]

log = logging.getLogger(__name__)

CLAIM_NAMES = (
    "detect/target_clean_bit_acc",
    "evasion/transfer_gt_postprocess",
    "evasion/more_surrogates_help",
    "evasion/whitebox_upper_bound",
    "quality/transfer_ssim",
    "mechanism/surrogates_read_inverse_bits",
    "mechanism/eps_stop_avoids_lower_tail",
)

#: the paper's table values could not be retrieved: every claim checks a direction stated in the abstract
PAPER_REF = "Abstract, direction only"

#: quick preset (≈ 2 min on 2 idle cores): epochs raised from the spec's 3 (too few steps to learn
#: the watermark: 0.50 bit accuracy, issue probe) to 16 (target, robust) / 10 (surrogates)
QUICK = dict(n_train=500, n_val=200, epochs_target=16, epochs_surrogate=10, n_images=32, max_iters=100,
             m_values=(1, 2), n_subsets=3, seeds=(0, 1, 2), nonrobust_target=False)
#: full CPU preset (≈ 15–25 min on 2 idle cores): each role's 2,000 images = 1,800 trained on + 200 held out
FULL = dict(n_train=1800, n_val=200, epochs_target=12, epochs_surrogate=12, n_images=100, max_iters=300,
            m_values=(1, 2, 4), n_subsets=3, seeds=(0, 1, 2, 3, 4), nonrobust_target=True)

TARGET_BITS, SURROGATE_BITS = 20, 16
#: the smallest SSIM gap the quality claim counts (SSIM values are reported to 3 decimals)
SSIM_RESOLUTION = 0.01


def _attack_settings() -> dict[str, Any]:
    return dict(alpha=default_alpha(32, 32), r=0.5, eps=0.2, ssim_stop=0.9)


def jobs(p: dict[str, Any], out: Path, seeds: tuple[int, ...], target_seed: int, device: str,
         min_bit_acc: float) -> list[Job]:
    """The reproduction's jobs: one training per model, the decoder check after all of them, one comparison
    per target after the check."""
    models = out / "models"
    common = dict(n_train=p["n_train"], n_val=p["n_val"], device=device)
    specs = [("target", "target", target_seed, TARGET_BITS, True, p["epochs_target"])]
    if p["nonrobust_target"]:
        specs.append(("target_nonrobust", "target", target_seed + 1, TARGET_BITS, False, p["epochs_target"]))
    specs += [(f"surrogate{s}", "surrogate", s, SURROGATE_BITS, False, p["epochs_surrogate"]) for s in seeds]
    out_jobs = [Job(f"train_{name}", train_job, seed=int(seed),
                    settings=dict(common, name=name, role=role, n_bits=bits, robust=robust, epochs=epochs,
                                  path=str(models / f"{name}.pt")))
                for name, role, seed, bits, robust, epochs in specs]
    out_jobs.append(Job("decoder_check", decoder_check_job, settings={"n_images": p["n_images"], "device": device,
                                                                    "min_bit_acc": min_bit_acc},
                        deps=tuple(j.name for j in out_jobs)))
    attack = dict(_attack_settings(), max_iters=p["max_iters"])
    for name, *_ in specs:
        if name.startswith("target"):
            out_jobs.append(Job(f"compare_{name}", comparison_job, seed=int(target_seed), deps=("decoder_check",),
                                settings={"target": str(models / f"{name}.pt"), "device": device,
                                          "surrogates": [str(models / f"surrogate{s}.pt") for s in seeds],
                                          "n_images": p["n_images"], "m_values": list(p["m_values"]),
                                          "n_subsets": p["n_subsets"], "attack": attack,
                                          "partial": str(out / f"comparison_{name}.partial.json")}))
    return out_jobs


def reproduce(quick: bool, out_dir: Path, *, seeds: list[int] | tuple[int, ...] | None = None, device: str = "auto",
              workers: int | None = None, target_seed: int = 1000, min_bit_acc: float = 0.9, resume: bool = False,
              quiet: bool | None = None) -> list[Claim]:
    """Train, check, attack and compare on the core's runner; return the seven claims of :data:`CLAIM_NAMES`.

    Args:
        quick: :data:`QUICK` instead of :data:`FULL`.
        out_dir: ``records/`` (one JSON per finished job), ``models/`` (checkpoints; ``<name>.epoch.pt`` while
            training), ``config.json`` (resolved presets: α, r, surrogate choices), ``models.json`` (each model's
            clean bit accuracy), ``comparison.json`` / ``comparison.md``, ``evasion.png`` / ``mechanism.png``
            (with the ``[plot]`` extra); ``comparison_<target>.partial.json`` holds a running comparison's rows.
        seeds: surrogate seeds (default: 0–2 quick, 0–4 full); at least max(m) of them.
        device: torch device; on a GPU the jobs run one after another in this process.
        workers: worker processes of the runner on CPU (one torch thread each; default: from the cores).
        target_seed: seed of the target model and of the owner's message.
        min_bit_acc: decoder check threshold; below it nothing is attacked, ``results.json`` records the
            failure and :class:`~.checkpoint.DecoderCheckError` is raised (the command exits non-zero).
        resume: keep the jobs an interrupted run finished (records; refused if any setting changed) and
            continue an interrupted training from its epoch checkpoint. A fresh run deletes ``models/``.
        quiet: no progress bar.

    Raises:
        DecoderCheckError: a model reads its own watermark below ``min_bit_acc``.
        ValueError: fewer seeds than the largest m; ``--resume`` with changed settings.
    """
    from iclr25.core.runner import run_jobs
    from iclr25.core.seed import choose_device

    dev = choose_device(device)
    out = Path(out_dir)
    p = dict(QUICK if quick else FULL)
    seeds = tuple(int(s) for s in (seeds if seeds is not None else p["seeds"]))
    if len(set(seeds)) < max(p["m_values"]):
        raise ValueError(f"seeds={list(seeds)}: need at least {max(p['m_values'])} distinct surrogate seeds for "
                         f"m={max(p['m_values'])}")
    if dev != "cpu":
        workers = 1
    if not resume:  # a fresh run retrains: no model of an earlier run is reused
        shutil.rmtree(out / "models", ignore_errors=True)
    (out / "models").mkdir(parents=True, exist_ok=True)
    preset = {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}
    (out / "config.json").write_text(json.dumps({
        "quick": quick, "preset": preset, "seeds": list(seeds), "target_seed": target_seed, "device": dev,
        "workers": workers, "attack": dict(_attack_settings(), max_iters=p["max_iters"])
        | {"alpha_rule": "2 * H * W / 128^2 (code: 2 at 128x128)",
           "r_rule": "code's 0.5 on [-1,1] (per-pixel bound, not rescaled)", "sign_alpha": 0.01, "r_tight": 0.1},
        "architecture": TINY, "train": CPU_TRAIN, "target_bits": TARGET_BITS, "surrogate_bits": SURROGATE_BITS,
        "surrogates": "[design] non-robust tiny HiDDeN, 16 bits, one per seed, each on its own shuffle of the "
                      f"odd-indexed training images ({p['n_train']} images)",
        "min_bit_acc": min_bit_acc}, indent=2) + "\n")
    # on CPU one torch thread per job (OpenMP threads spinning on a loaded 2-core machine made one attack 25x slower)
    threads = 1 if dev == "cpu" and "OMP_NUM_THREADS" not in os.environ else None
    res = run_jobs(jobs(p, out, seeds, target_seed, dev, min_bit_acc), out, workers=workers, resume=resume,
                   threads=threads, desc="wm-transfer reproduce", quiet=quiet)
    return claims_from_records(res.records, p, out, seeds, res.summary())


def claims_from_records(records: dict[str, Any], p: dict[str, Any], out: Path, seeds: tuple[int, ...],
                        runner: dict[str, Any] | None = None) -> list[Claim]:
    """The claims (and ``models.json``, ``comparison.json`` / ``.md``, the figures) from the jobs' records.

    Raises:
        DecoderCheckError: the decoder check failed (``results.json`` then records every accuracy).
    """
    from .plots import write_plots

    out = Path(out)
    trained = [r for k, r in records.items() if k.startswith("train_")]
    check = records["decoder_check"]
    if not check["passed"]:
        (out / "results.json").write_text(json.dumps({
            "method": "wm-transfer", "status": "decoder_check_failed", "error": check["error"],
            "decoder_bit_acc": check["accuracies"], "min_bit_acc": check["min_bit_acc"], "claims": [],
            "training": trained}, indent=2) + "\n")
        raise DecoderCheckError(check["error"], check["accuracies"])
    accs = check["accuracies"]
    (out / "models.json").write_text(json.dumps({"training": trained, "decoder_check": accs, "sha256": check["sha256"],
                                                 "runner": runner}, indent=2) + "\n")
    comps = {k.removeprefix("compare_"): r for k, r in records.items() if k.startswith("compare_")}
    (out / "comparison.json").write_text(json.dumps(comps, indent=2) + "\n")
    acc_md = "| model | clean bit accuracy (decoder check) | held-out at training | val PSNR (dB) | train s |\n"
    acc_md += "|---|---|---|---|---|\n"
    acc_md += "".join(f"| {t['name']} | {accs[t['name']]:.3f} | {t['clean_bit_acc']:.3f} | {t['val_psnr']:.1f} | "
                      f"{t['seconds']:.0f} |\n" for t in trained)
    (out / "comparison.md").write_text("# Models\n\n" + acc_md + "\n"
                                       + "\n".join(f"## {n}\n\n" + comparison_table(c) for n, c in comps.items()))
    comp = comps["target"]
    plots = write_plots(comp, out)
    att = comp["params"]
    return _claims(comp, accs, p["n_images"], att["eps"], att["ssim_stop"], tuple(p["m_values"]), plots)


def _fmt_ms(m: float, s: float) -> str:
    return "nan" if math.isnan(m) else f"{m:.3f} ± {s:.3f}"


def _paired(a: list[dict[str, Any]], b: list[dict[str, Any]], key_a: str, key_b: str | None = None) -> list[float]:
    """Per-subset differences ``a[i][key_a] − b[i][key_b]`` of rows computed on the same subset."""
    key_b = key_b or key_a
    out = []
    for ra, rb in zip(a, b):
        if ra.get("subset") != rb.get("subset"):
            raise ValueError(f"rows of different surrogate subsets paired: {ra.get('subset')} vs {rb.get('subset')}")
        va, vb = ra.get(key_a), rb.get(key_b)
        if va is not None and vb is not None and math.isfinite(va) and math.isfinite(vb):
            out.append(float(va) - float(vb))
    return out


def _sd(v: list[float]) -> float | None:
    return statistics.stdev(v) if len(v) > 1 else None


def _claims(comp: dict[str, Any], accs: dict[str, float], n_images: int, eps: float, ssim_stop: float,
            m_values: tuple[int, ...], plots: dict[str, str]) -> list[Claim]:
    m_lo, m_hi = str(min(m_values)), str(max(m_values))
    ev_png, mech_png = plots.get("evasion", ""), plots.get("mechanism", "")
    one = 1.0 / n_images  # one image of the lower-tail share (over all attacked images)
    tr_hi, tr_lo = comp["transfer"][m_hi], comp["transfer"][m_lo]
    k = len(tr_hi)
    # evasion is a share of the images detected before the attack: one image of it is 1 / n_detected
    n_det = max(1, min(int(r["n_detected_before"]) for r in tr_hi + tr_lo))
    one_ev = 1.0 / n_det
    e_hi, sd_hi, _ = mean_sd([r["evasion_rate"] for r in tr_hi])
    e_lo, sd_lo, _ = mean_sd([r["evasion_rate"] for r in tr_lo])
    covers = comp["covers"]
    claims = []
    acc_note = ", ".join(f"{name} {v:.3f}" for name, v in accs.items())
    claims.append(Claim(
        "detect/target_clean_bit_acc", "target bit accuracy on watermarked test images", comp["clean"]["bit_acc"],
        baseline=covers["bit_acc"], threshold=0.95, kind="sanity", paper_ref=PAPER_REF, n_seeds=1,
        note=f"baseline: the target decoding the unwatermarked covers {covers['bit_acc']:.3f} (chance ≈ 0.5). "
             f"Detection rate before the attack {comp['clean']['detection_rate']:.3f}; false-positive rate on covers "
             f"{covers['false_positive_rate']:.3f} (detector M ≥ {comp['params']['thresholds'][0]} or ≤ "
             f"{comp['params']['thresholds'][1]}). Decoder check (clean bit accuracy on the attacked covers): "
             f"{acc_note}."))
    # strongest post-processing at matched SSIM (each row matched to that subset's mean attack SSIM)
    pp_stats = {kind: mean_sd([r["evasion_rate"] for r in rows]) for kind, rows in comp["postprocess"].items()}
    best_pp = max(pp_stats, key=lambda kk: -1 if math.isnan(pp_stats[kk][0]) else pp_stats[kk][0])
    bp, bsd, _ = pp_stats[best_pp]
    d_pp = _paired(tr_hi, comp["postprocess"][best_pp], "evasion_rate")
    sp_pp = _sd(d_pp)
    margin = max(sp_pp or 0.0, one_ev)
    pp_note = "; ".join(f"{kind} {_fmt_ms(*v[:2])} (SSIM {mean_sd([r['matched_ssim'] for r in comp['postprocess'][kind]])[0]:.3f})"
                        for kind, v in pp_stats.items())
    claims.append(Claim(
        "evasion/transfer_gt_postprocess", f"evasion rate, transfer m={m_hi} (mean over {k} subsets)",
        e_hi, baseline=bp, margin=margin, kind="headline", paper_ref=PAPER_REF, spread=sp_pp, n_seeds=k,
        plot=ev_png,
        note=f"transfer {_fmt_ms(e_hi, sd_hi)} vs strongest post-processing ({best_pp}) {_fmt_ms(bp, bsd)}, each "
             f"matched to the attack's mean SSIM per subset. All: {pp_note}. Paired gap {e_hi - bp:+.3f}, its sd over "
             f"subsets {sp_pp if sp_pp is not None else float('nan'):.3f}; margin = max(sd, one image {one_ev:.3f}) = "
             f"{margin:.3f}: the gap {'exceeds' if e_hi - bp >= margin else 'does not exceed'} it."))
    # m_hi and m_lo use different subsets: the gap's spread adds both variances
    sp_m = math.sqrt(sd_hi ** 2 + sd_lo ** 2) if k > 1 and not math.isnan(sd_hi + sd_lo) else None
    margin2 = max(0.0 if math.isnan(sd_hi) else sd_hi, 0.0 if math.isnan(sd_lo) else sd_lo, one_ev)
    claims.append(Claim(
        "evasion/more_surrogates_help", f"evasion rate at m={m_hi} vs m={m_lo}", e_hi, baseline=e_lo, margin=margin2,
        kind="headline", paper_ref=PAPER_REF, spread=sp_m, n_seeds=k, plot=ev_png,
        note="; ".join(f"m={m}: " + _fmt_ms(*mean_sd([r['evasion_rate'] for r in comp['transfer'][str(m)]])[:2])
                       for m in m_values)
             + f" over surrogate subsets. Gap {e_hi - e_lo:+.3f} {'exceeds' if e_hi - e_lo >= margin2 else 'does not exceed'}"
             f" the margin {margin2:.3f} = max(larger sd, one image); sd of the gap (unpaired subsets) "
             f"{sp_m if sp_m is not None else float('nan'):.3f}."))
    wb = comp["whitebox"]["evasion_rate"]
    gaps = "; ".join(f"m={m}: {wb - mean_sd([r['evasion_rate'] for r in comp['transfer'][str(m)]])[0]:+.3f}"
                     for m in m_values) if wb is not None else "undefined"
    claims.append(Claim(
        "evasion/whitebox_upper_bound", "white-box evasion rate (target decoder, same ε/SSIM stop)",
        float("nan") if wb is None else wb, baseline=e_hi, threshold=0.95, kind="mechanism", paper_ref=PAPER_REF,
        spread=sd_hi if k > 1 and not math.isnan(sd_hi) else None, n_seeds=k, plot=ev_png,
        note=f"baseline: transfer at m={m_hi} {_fmt_ms(e_hi, sd_hi)} (spread: its sd over subsets; one white-box run). "
             f"White-box minus transfer per m: {gaps}."))
    # quality: the informative comparison is the attack's SSIM against random ±a noise of the same per-image
    # l_inf (the SSIM stop at 0.9 bounds the attack's SSIM by construction: tested, not claimed)
    rn = comp["random_noise"]
    ssim_m, ssim_sd, _ = mean_sd([r["ssim"] for r in tr_hi])
    rs_m, rs_sd, _ = mean_sd([r["ssim"] for r in rn])
    psnr_m, _, _ = mean_sd([r["psnr"] for r in tr_hi])
    rpsnr_m, _, _ = mean_sd([r["psnr"] for r in rn])
    d_q = _paired(tr_hi, rn, "ssim")
    sp_q = _sd(d_q)
    below = sum(r["n_ssim_below_stop"] for r in tr_hi)
    claims.append(Claim(
        "quality/transfer_ssim", f"mean SSIM(x_adv, x_w), transfer m={m_hi} vs random ±a noise of equal l_inf",
        ssim_m, baseline=rs_m, margin=max(sp_q or 0.0, SSIM_RESOLUTION), kind="headline", paper_ref="Abstract (SSIM ≥ 0.9), direction only",
        spread=sp_q, n_seeds=k, plot=mech_png,
        note=f"transfer {_fmt_ms(ssim_m, ssim_sd)} (PSNR {psnr_m:.1f} dB) vs random ±a noise with each image's l_inf "
             f"of the attack {_fmt_ms(rs_m, rs_sd)} (PSNR {rpsnr_m:.1f} dB); paired gap {ssim_m - rs_m:+.3f}, sd "
             f"{sp_q if sp_q is not None else float('nan'):.3f}; margin max(sd, {SSIM_RESOLUTION}). {below} of {k * n_images} images stopped on the SSIM "
             f"rule ({ssim_stop})."))
    sb, sbsd, _ = mean_sd([r["surrogate_bit_acc"] for r in tr_hi])
    rb, rbsd, _ = mean_sd([r["surrogate_bit_acc"] for r in rn])
    d_s = _paired(tr_hi, rn, "surrogate_bit_acc")
    one_bit = 1.0 / SURROGATE_BITS  # one more bit read per image
    sp_s = _sd(d_s)
    stops: dict[str, int] = {}
    for r in tr_hi:
        for kk, v in r["stop_counts"].items():
            stops[kk] = stops.get(kk, 0) + v
    claims.append(Claim(
        "mechanism/surrogates_read_inverse_bits",
        f"mean surrogate bit accuracy vs inverse-decode targets at release (m={m_hi}), attack vs random ±a noise",
        sb, baseline=rb, margin=max(sp_s or 0.0, one_bit), kind="mechanism", paper_ref="Eq. 3 (inverse-decode targets), direction only",
        spread=sp_s, n_seeds=k, plot=mech_png,
        note=f"attack {_fmt_ms(sb, sbsd)} vs random ±a noise of the same per-image l_inf {_fmt_ms(rb, rbsd)}; paired "
             f"gap {sb - rb:+.3f}, sd {sp_s if sp_s is not None else float('nan'):.3f}; margin max(sd, one bit "
             f"{one_bit:.4f}). Stop reasons: "
             + ", ".join(f"{kk} {v}" for kk, v in stops.items())
             + f" (the 1 − ε = {1 - eps:.2f} stop bounds the attack's value by construction: tested, not claimed)."))
    lt = comp["whitebox"]["lower_tail_rate_after"]
    lt0 = comp["whitebox_eps0"]["lower_tail_rate_after"]
    claims.append(Claim(
        "mechanism/eps_stop_avoids_lower_tail", f"share still caught by the lower tail, white-box with ε={eps}",
        lt, baseline=lt0, higher_is_better=False, margin=one, kind="mechanism", paper_ref="Eq. 3 (ε-stop), direction only",
        n_seeds=1, plot=mech_png,
        note=f"baseline: white-box run to full inversion (ε = 0): lower tail {lt0:.3f}, evasion "
             f"{comp['whitebox_eps0']['evasion_rate']}; with ε = {eps}: lower tail {lt:.3f}, evasion "
             f"{comp['whitebox']['evasion_rate']}. Margin one image ({one:.3f})."))
    return claims
