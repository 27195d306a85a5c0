"""CPU-scale reproduction of the transfer attack's claims (spec "CPU-scale reproduction", issue 29).

The owner trains a robust target (n = 20 bits) on the even-indexed CIFAR-10-subset training images;
the attacker trains surrogates (n_s = 16 bits, seeds ``--seeds``) on the odd-indexed ones (disjoint
data, no access to the target, its bit length or its message). Every decoder is checked before the
first attack step. The test images are watermarked with the owner's message and attacked with the
transfer attack for each m (each surrogate subset one "seed" of the comparison), compared with
matched post-processing, random ±r noise, sign-gradient and clip-projection variants, and the
white-box bound. The claims are computed from these measurements.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

from iclr25.core.results import Claim

from .baselines import POST_PROCESSING
from .checkpoint import (
    DecoderCheckError,
    check_decoders,
    file_sha256,
    load_watermark_model,
    save_watermark_model,
)
from .config import default_alpha
from .data import load_cifar_role
from .detect import bit_accuracy, is_detected
from .evaluation import decode_batched
from .models import HiddenConfig
from .pipeline import comparison_table, mean_sd, run_comparison
from .train import TrainSettings, train_watermark_model

__all__ = ["reproduce", "QUICK", "FULL", "CLAIM_NAMES", "TINY", "train_job", "comparison_job"]

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

#: [design] the CPU-scale architecture (spec tiny HiDDeN with the issue's measured fixes)
TINY = dict(H=32, W=32, enc_blocks=3, enc_ch=16, dec_blocks=4, dec_ch=32, dec_strides=2, message_embed="spatial",
            msg_ch=16, decoder_head="flatten", residual=True, residual_scale=1.0)
#: [design] CPU training settings (the paper's: lr 1e-3, batch 100, image weight 0.7 fixed, 200 epochs)
CPU_TRAIN = dict(batch_size=32, lr=2e-3, image_weight=0.05, img_weight_growth=1.1, target_psnr=30.0,
                 robust_start=0.25)

#: quick preset (≈ 2 min on 2 idle cores): epochs raised from the spec's 3 (too few steps to learn
#: the watermark: 0.50 bit accuracy, issue probe) to 16 (target, robust) / 10 (surrogates)
QUICK = dict(n_train=500, n_val=200, epochs_target=16, epochs_surrogate=10, n_images=32, max_iters=100,
             m_values=(1, 2), n_subsets=3, seeds=(0, 1, 2), nonrobust_target=False)
#: full CPU preset (≈ 15–25 min on 2 idle cores): each role's 2,000 images = 1,800 trained on + 200 held out
FULL = dict(n_train=1800, n_val=200, epochs_target=12, epochs_surrogate=12, n_images=100, max_iters=300,
            m_values=(1, 2, 4), n_subsets=3, seeds=(0, 1, 2, 3, 4), nonrobust_target=True)

TARGET_BITS, SURROGATE_BITS = 20, 16


def train_job(spec: dict[str, Any]) -> dict[str, Any]:
    """Train (or, with ``resume``, reuse / continue) one model described by ``spec``; save it to
    ``spec["path"]``. Runs in a worker process (one thread) or in-process."""
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    path = Path(spec["path"])
    t0 = time.perf_counter()
    if spec.get("resume") and path.is_file():
        m = load_watermark_model(path)
        info = m.train_info
        if info.get("seed") == spec["seed"] and info.get("n_train") == spec["n_train"] and \
                len(info.get("history", [])) == spec["epochs"]:
            return {"name": spec["name"], "path": str(path), "clean_bit_acc": m.clean_bit_acc,
                    "val_psnr": info.get("val_psnr"), "seconds": 0.0, "reused": True, "steps": info.get("steps")}
    data = load_cifar_role(spec["role"], spec["n_train"] + spec["n_val"], seed=spec["seed"]).images
    if data.shape[0] < spec["n_train"] + spec["n_val"]:
        raise ValueError(f"{spec['name']}: {data.shape[0]} {spec['role']} images < n_train {spec['n_train']} + "
                         f"n_val {spec['n_val']}")
    cfg = HiddenConfig(n_bits=spec["n_bits"], **TINY)
    st = TrainSettings(epochs=spec["epochs"], acc_high=0.93 if spec["robust"] else 0.98,
                       acc_low=0.88 if spec["robust"] else 0.95, **CPU_TRAIN)
    ckpt = path.with_name(path.stem + ".epoch.pt")
    model = train_watermark_model(cfg, data[:spec["n_train"]], spec["seed"], spec["robust"], settings=st,
                                  val_images=data[spec["n_train"]:], device=spec.get("device", "cpu"),
                                  checkpoint=ckpt, resume=bool(spec.get("resume") and ckpt.is_file()),
                                  quiet=spec.get("quiet"))
    save_watermark_model(model, path, role=spec["role"])
    return {"name": spec["name"], "path": str(path), "clean_bit_acc": model.clean_bit_acc,
            "val_psnr": model.train_info["val_psnr"], "seconds": time.perf_counter() - t0, "reused": False,
            "steps": model.train_info["steps"]}


def _train_all(specs: list[dict[str, Any]], jobs: int) -> list[dict[str, Any]]:
    if jobs <= 1 or len(specs) == 1:
        return [train_job(s) for s in specs]
    # longest first (the robust target) so the two workers finish together
    order = sorted(range(len(specs)), key=lambda i: -specs[i]["epochs"] * (2 if specs[i]["robust"] else 1))
    from iclr25.core.progress import progress

    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as ex:
        futs = {ex.submit(train_job, dict(specs[i], threads=1, quiet=True)): i for i in order}
        results: dict[int, dict[str, Any]] = {}
        for f in progress(as_completed(futs), desc=f"train {len(specs)} models ({jobs} processes)", total=len(specs),
                          unit="model"):
            results[futs[f]] = f.result()
        return [results[i] for i in range(len(specs))]


def comparison_job(spec: dict[str, Any]) -> dict[str, Any]:
    """One target's :func:`~.pipeline.run_comparison` on the first ``spec["n_images"]`` test images, written
    to ``spec["path"]`` (``comparison_<target>.json``) with the ``key`` it was computed for. With ``resume``
    a file whose key matches (attack parameters, presets, model hashes) is reused instead. While it runs,
    ``comparison_<target>.partial.json`` holds the rows finished so far (``"complete": false``; progress
    only, never reused). Runs in a worker process (one thread) or in-process."""
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    path = Path(spec["path"])
    if spec.get("resume") and path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("key") == spec["key"]:
            return saved["comparison"]
        log.warning("%s was computed with other settings or models; recomputing it", path)
    dev = torch.device(spec.get("device", "cpu"))
    target = load_watermark_model(spec["target"], dev)
    surs = [load_watermark_model(q, dev) for q in spec["surrogates"]]
    test = load_cifar_role("test", spec["n_images"], seed=0).images
    w = target.message.cpu()[None].expand(test.shape[0], -1)
    with torch.no_grad():
        x_w = torch.cat([target.embed(test[i:i + 256].to(dev)).cpu() for i in range(0, test.shape[0], 256)])
        d_cov = decode_batched(target, test)
    covers = {"bit_acc": float(bit_accuracy(d_cov, w).mean()),
              "false_positive_rate": float(is_detected(d_cov, w).float().mean())}
    partial = path.with_name(path.stem + ".partial.json")

    def _write(p: Path, comp: dict[str, Any], complete: bool) -> None:
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps({"key": spec["key"], "complete": complete, "comparison": dict(comp, covers=covers)},
                                  indent=2, default=float) + "\n")
        os.replace(tmp, p)

    comp = run_comparison(target, surs, x_w, w, m_values=spec["m_values"], n_subsets=spec["n_subsets"],
                          seed=spec["seed"], post_processing=POST_PROCESSING, quiet=spec.get("quiet"),
                          on_row=lambda c: _write(partial, c, False), **spec["attack"])
    comp["covers"] = covers
    _write(path, comp, True)
    partial.unlink(missing_ok=True)
    return comp


def _compare_all(specs: list[dict[str, Any]], jobs: int) -> dict[str, dict[str, Any]]:
    """The targets' comparisons, in ``min(jobs, len(specs))`` processes of one thread each on CPU."""
    if jobs <= 1 or len(specs) == 1:
        return {sp["name"]: comparison_job(sp) for sp in specs}
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=get_context("spawn")) as ex:
        futs = {sp["name"]: ex.submit(comparison_job, dict(sp, threads=1)) for sp in specs}
        return {name: f.result() for name, f in futs.items()}


def _fmt_ms(m: float, s: float) -> str:
    return "nan" if math.isnan(m) else f"{m:.3f} ± {s:.3f}"


def _claims(comp: dict[str, Any], cover_acc: float, cover_fpr: float, accs: dict[str, float], n_images: int,
            eps: float, ssim_stop: float, m_values: tuple[int, ...]) -> list[Claim]:
    m_lo, m_hi = str(min(m_values)), str(max(m_values))
    one = 1.0 / n_images  # one image of the lower-tail share (over all attacked images)
    tr_hi = comp["transfer"][m_hi]
    tr_lo = comp["transfer"][m_lo]
    # evasion is a share of the images detected before the attack: one image of it is 1 / n_detected
    n_det = max(1, min(int(r["n_detected_before"]) for r in tr_hi + tr_lo))
    one_ev = 1.0 / n_det
    e_hi, sd_hi, k_hi = mean_sd([r["evasion_rate"] for r in tr_hi])
    e_lo, sd_lo, k_lo = mean_sd([r["evasion_rate"] for r in tr_lo])
    claims = []
    acc_note = ", ".join(f"{k} {v:.3f}" for k, v in accs.items())
    claims.append(Claim(
        "detect/target_clean_bit_acc", "target bit accuracy on watermarked test images", comp["clean"]["bit_acc"],
        baseline=cover_acc, threshold=0.95,
        note=f"baseline: the target decoding the unwatermarked covers (chance ≈ 0.5). Detection rate before the "
             f"attack {comp['clean']['detection_rate']:.3f}; false-positive rate on covers {cover_fpr:.3f} "
             f"(detector M ≥ {comp['params']['thresholds'][0]} or ≤ {comp['params']['thresholds'][1]}). "
             f"Decoder check (clean bit accuracy on the attacked covers): {acc_note}."))
    # strongest post-processing at matched SSIM
    pp_stats = {k: mean_sd([r["evasion_rate"] for r in rows]) for k, rows in comp["postprocess"].items()}
    best_pp = max(pp_stats, key=lambda k: -1 if math.isnan(pp_stats[k][0]) else pp_stats[k][0])
    bp, bsd, _ = pp_stats[best_pp]
    margin = max(sd_hi if k_hi else 0.0, bsd if not math.isnan(bsd) else 0.0, one_ev)
    pp_note = "; ".join(f"{k} {_fmt_ms(*v[:2])} (SSIM {mean_sd([r['matched_ssim'] for r in comp['postprocess'][k]])[0]:.3f})"
                        for k, v in pp_stats.items())
    claims.append(Claim(
        "evasion/transfer_gt_postprocess", f"evasion rate, transfer m={m_hi} (mean over {len(tr_hi)} subsets)",
        e_hi, baseline=bp, margin=margin,
        note=f"transfer {_fmt_ms(e_hi, sd_hi)} vs strongest post-processing ({best_pp}) {_fmt_ms(bp, bsd)}, each "
             f"matched to the attack's mean SSIM per subset. All: {pp_note}. Margin = the larger sd or one image "
             f"({one_ev:.3f}): the gap {'exceeds' if e_hi - bp >= margin else 'does not exceed'} the spread."))
    margin2 = max(sd_hi if k_hi else 0.0, sd_lo if k_lo else 0.0, one_ev)
    claims.append(Claim(
        "evasion/more_surrogates_help", f"evasion rate at m={m_hi} vs m={m_lo}", e_hi, baseline=e_lo, margin=margin2,
        note=f"m={m_hi}: {_fmt_ms(e_hi, sd_hi)}, m={m_lo}: {_fmt_ms(e_lo, sd_lo)} over surrogate subsets "
             + "; ".join(f"m={m}: " + _fmt_ms(*mean_sd([r['evasion_rate'] for r in comp['transfer'][str(m)]])[:2])
                         for m in m_values)
             + f". Gap {e_hi - e_lo:+.3f} {'exceeds' if e_hi - e_lo >= margin2 else 'does not exceed'} the larger sd "
             f"(margin {margin2:.3f} = max(sd, one image))."))
    wb = comp["whitebox"]["evasion_rate"]
    gaps = "; ".join(f"m={m}: {wb - mean_sd([r['evasion_rate'] for r in comp['transfer'][str(m)]])[0]:+.3f}"
                     for m in m_values) if wb is not None else "undefined"
    claims.append(Claim(
        "evasion/whitebox_upper_bound", "white-box evasion rate (target decoder, same ε/SSIM stop)",
        float("nan") if wb is None else wb, baseline=e_hi, threshold=0.95,
        note=f"baseline: transfer at m={m_hi}. White-box minus transfer per m (should shrink): {gaps}. The bound is "
             "guidance for these parameters, not a certificate."))
    ssim_m, ssim_sd, _ = mean_sd([r["ssim"] for r in tr_hi])
    psnr_m, _, _ = mean_sd([r["psnr"] for r in tr_hi])
    below = sum(r["n_ssim_below_stop"] for r in tr_hi)
    claims.append(Claim(
        "quality/transfer_ssim", f"mean SSIM(x_adv, x_w), transfer m={m_hi}", ssim_m, threshold=ssim_stop,
        note=f"mean over subsets {_fmt_ms(ssim_m, ssim_sd)}; mean PSNR {psnr_m:.1f} dB (≳ 30 expected); "
             f"{below} of {len(tr_hi) * n_images} images end just below {ssim_stop} (the stop fires after crossing)."))
    sb, sbsd, _ = mean_sd([r["surrogate_bit_acc"] for r in tr_hi])
    rb, rbsd, _ = mean_sd([r["surrogate_bit_acc"] for r in comp["random_noise"]])
    stops: dict[str, int] = {}
    for r in tr_hi:
        for k, v in r["stop_counts"].items():
            stops[k] = stops.get(k, 0) + v
    claims.append(Claim(
        "mechanism/surrogates_read_inverse_bits", f"mean surrogate bit accuracy vs inverse-decode targets at release (m={m_hi})",
        sb, baseline=rb, threshold=1 - eps, margin=max(sbsd, rbsd),
        note=f"{_fmt_ms(sb, sbsd)} vs random ±a noise of the same per-image l_inf {_fmt_ms(rb, rbsd)}. Stop reasons: "
             + ", ".join(f"{k} {v}" for k, v in stops.items()) + "."))
    lt = comp["whitebox"]["lower_tail_rate_after"]
    lt0 = comp["whitebox_eps0"]["lower_tail_rate_after"]
    claims.append(Claim(
        "mechanism/eps_stop_avoids_lower_tail", f"share still caught by the lower tail, white-box with ε={eps}",
        lt, baseline=lt0, higher_is_better=False, margin=one,
        note=f"baseline: white-box run to full inversion (ε = 0): lower tail {lt0:.3f}, evasion "
             f"{comp['whitebox_eps0']['evasion_rate']}; with ε = {eps}: lower tail {lt:.3f}, evasion "
             f"{comp['whitebox']['evasion_rate']}. Margin one image."))
    return claims


def reproduce(quick: bool, out_dir: Path, *, seeds: list[int] | tuple[int, ...] | None = None, device: str = "auto",
              jobs: int = 2, target_seed: int = 1000, min_bit_acc: float = 0.9, resume: bool = False,
              quiet: bool | None = None) -> list[Claim]:
    """Train, check, attack and compare; return the seven claims of :data:`CLAIM_NAMES`.

    Args:
        quick: :data:`QUICK` instead of :data:`FULL`.
        out_dir: ``models/`` (checkpoints), ``config.json`` (resolved presets: α, r, surrogate choices),
            ``models.json`` (each model's clean bit accuracy), ``comparison_<target>.json`` (one per target,
            ``.partial.json`` while it runs), ``comparison.json`` / ``comparison.md``.
        seeds: surrogate seeds (default: 0–2 quick, 0–4 full); at least max(m) of them.
        device: torch device; on a GPU the models train one after another on it.
        jobs: parallel processes on CPU (one thread each) for the trainings and for the targets'
            comparisons (robust and, full preset, non-robust target).
        target_seed: seed of the target model and of the owner's message.
        min_bit_acc: decoder check threshold; below it nothing is attacked, ``results.json`` records the
            failure and :class:`~.checkpoint.DecoderCheckError` is raised (the command exits non-zero).
        resume: reuse finished models in ``out_dir/models`` (same seed / data / epochs), continue
            interrupted trainings from their epoch checkpoints, and reuse a target's finished
            ``comparison_<target>.json`` computed with the same attack settings, presets and model hashes.

    On CPU, torch runs single-threaded here unless ``--threads`` / ``OMP_NUM_THREADS`` says otherwise:
    the models are small, and OpenMP threads spinning on a loaded 2-core machine made one attack 25×
    slower (measured: 98 s vs 3.7 s wall).

    Raises:
        DecoderCheckError: a model reads its own watermark below ``min_bit_acc``.
        ValueError: fewer seeds than the largest m.
    """
    from iclr25.core.seed import choose_device
    from iclr25.core.threads import limited_threads

    dev = choose_device(device)
    threads = 1 if dev == "cpu" and "OMP_NUM_THREADS" not in os.environ else None
    with limited_threads(threads):
        return _reproduce(quick, Path(out_dir), seeds, dev, jobs, target_seed, min_bit_acc, resume, quiet)


def _reproduce(quick: bool, out: Path, seeds, dev: str, jobs: int, target_seed: int, min_bit_acc: float,
               resume: bool, quiet: bool | None) -> list[Claim]:
    from iclr25.core.seed import seed_everything

    p = dict(QUICK if quick else FULL)
    seeds = tuple(int(s) for s in (seeds if seeds is not None else p["seeds"]))
    if len(set(seeds)) < max(p["m_values"]):
        raise ValueError(f"seeds={list(seeds)}: need at least {max(p['m_values'])} distinct surrogate seeds for "
                         f"m={max(p['m_values'])}")
    (out / "models").mkdir(parents=True, exist_ok=True)
    if dev != "cpu":
        jobs = 1
    seed_everything(target_seed)
    common = dict(n_train=p["n_train"], n_val=p["n_val"], device=dev, resume=resume)
    specs = [dict(common, name="target", role="target", seed=target_seed, n_bits=TARGET_BITS, robust=True,
                  epochs=p["epochs_target"], path=str(out / "models" / "target.pt"))]
    if p["nonrobust_target"]:
        specs.append(dict(common, name="target_nonrobust", role="target", seed=target_seed + 1, n_bits=TARGET_BITS,
                          robust=False, epochs=p["epochs_target"], path=str(out / "models" / "target_nonrobust.pt")))
    specs += [dict(common, name=f"surrogate{s}", role="surrogate", seed=s, n_bits=SURROGATE_BITS, robust=False,
                   epochs=p["epochs_surrogate"], path=str(out / "models" / f"surrogate{s}.pt")) for s in seeds]
    alpha = default_alpha(32, 32)
    attack = dict(alpha=alpha, r=0.5, eps=0.2, max_iters=p["max_iters"], ssim_stop=0.9)
    (out / "config.json").write_text(json.dumps({
        "quick": quick, "preset": {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()},
        "seeds": list(seeds), "target_seed": target_seed, "device": dev, "jobs": jobs,
        "attack": attack | {"alpha_rule": "2 * H * W / 128^2 (code: 2 at 128x128)", "r_rule": "code's 0.5 on [-1,1] "
                            "(per-pixel bound, not rescaled)", "sign_alpha": 0.01, "r_tight": 0.1},
        "architecture": TINY, "train": CPU_TRAIN, "target_bits": TARGET_BITS, "surrogate_bits": SURROGATE_BITS,
        "surrogates": "[design] non-robust tiny HiDDeN, 16 bits, one per seed, each on its own shuffle of the "
                      f"odd-indexed training images ({p['n_train']} images)",
        "min_bit_acc": min_bit_acc}, indent=2) + "\n")
    t0 = time.perf_counter()
    trained = _train_all(specs, jobs)
    train_s = time.perf_counter() - t0
    torch_dev = torch.device(dev)
    models = {t["name"]: load_watermark_model(t["path"], torch_dev) for t in trained}
    test = load_cifar_role("test", p["n_images"], seed=0).images
    try:
        accs = check_decoders(models, test.to(torch_dev), min_bit_acc)
    except DecoderCheckError as e:
        (out / "results.json").write_text(json.dumps({
            "method": "wm-transfer", "status": "decoder_check_failed", "error": str(e),
            "decoder_bit_acc": e.accuracies, "min_bit_acc": min_bit_acc, "claims": [],
            "training": trained}, indent=2) + "\n")
        raise
    (out / "models.json").write_text(json.dumps({"training": trained, "decoder_check": accs,
                                                 "train_seconds": train_s}, indent=2) + "\n")
    # each target's comparison in its own process (CPU, --jobs) and file, reused by --resume (same key)
    sha = {t["name"]: file_sha256(t["path"]) for t in trained}
    sur_names = [f"surrogate{s}" for s in seeds]
    cspecs = []
    for tname in [t["name"] for t in trained if t["name"].startswith("target")]:
        key = {"target": sha[tname], "surrogates": [sha[n] for n in sur_names], "attack": attack,
               "m_values": list(p["m_values"]), "n_subsets": p["n_subsets"], "n_images": p["n_images"],
               "seed": target_seed}
        cspecs.append(dict(name=tname, target=str(out / "models" / f"{tname}.pt"), key=key,
                           surrogates=[str(out / "models" / f"{n}.pt") for n in sur_names], n_images=p["n_images"],
                           m_values=tuple(p["m_values"]), n_subsets=p["n_subsets"], seed=target_seed, attack=attack,
                           device=dev, quiet=quiet, resume=resume, path=str(out / f"comparison_{tname}.json")))
    comps = _compare_all(cspecs, jobs)
    extra_md = [f"## {tname}\n\n" + comparison_table(c) for tname, c in comps.items()]
    (out / "comparison.json").write_text(json.dumps(comps, indent=2, default=float) + "\n")
    acc_md = "| model | clean bit accuracy (decoder check) | held-out at training | val PSNR (dB) | train s |\n|---|---|---|---|---|\n"
    acc_md += "".join(f"| {t['name']} | {accs[t['name']]:.3f} | {t['clean_bit_acc']:.3f} | {t['val_psnr']:.1f} | "
                      f"{t['seconds']:.0f} |\n" for t in trained)
    (out / "comparison.md").write_text("# Models\n\n" + acc_md + "\n" + "\n".join(extra_md))
    comp = comps["target"]
    return _claims(comp, comp["covers"]["bit_acc"], comp["covers"]["false_positive_rate"], accs, p["n_images"],
                   attack["eps"], attack["ssim_stop"], p["m_values"])
