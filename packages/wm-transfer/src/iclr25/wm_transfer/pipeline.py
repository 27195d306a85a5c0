"""End-to-end pieces behind the CLI and the reproduction: loading models and images, the attack run
folder (per-image JSONL, ``--resume``), evaluation of a run, and the comparison of the transfer attack
with its baselines on the same images and messages.

Run folder of ``attack`` (the iclr25-lotos conventions)::

    <out>/config.json        resolved config + derived values (α used, model sha256, decoder check)
    <out>/images.jsonl       one record per attacked image (appended after every finished batch)
    <out>/batches/NNNNN.npz  x_w and x_adv of batch NNNNN (float32, [-1,1])
    <out>/results.json       summary + run info;  <out>/results.md  the summary as a table
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .attack import AttackResult, random_sign_noise, transfer_attack, whitebox_attack
from .baselines import POST_PROCESSING, match_quality
from .checkpoint import (
    DecoderCheckError,
    check_decoders,
    file_sha256,
    load_watermark_model,
)
from .config import AttackConfig, EvaluateConfig, default_alpha
from .data import ImageSet, load_images, load_npz_images
from .detect import bit_accuracy, double_tail_threshold, is_detected
from .evaluation import decode_batched, evaluate_images, summarize_records, summary_table
from .models import WatermarkModel, check_images, check_messages

__all__ = ["load_model", "watermark_images", "surrogate_subsets", "run_attack", "evaluate_run",
           "run_comparison", "comparison_table", "mean_sd", "RESUME_KEYS"]

log = logging.getLogger(__name__)

#: parameters a resumed run folder must share with the command (the official cache ignored r, α, T)
RESUME_KEYS = ("alpha", "r", "eps", "max_iters", "ssim_stop", "update", "projection", "strategy", "batch_size",
               "images", "n_images", "image_size", "watermarked", "seed", "fpr", "model_sha256")


def load_model(spec: Any, device: str | torch.device = "cpu", image_size: int | None = None) -> WatermarkModel:
    """A model from a checkpoint path (package or HiDDeN format), or an already built model/decoder."""
    if isinstance(spec, (str, Path)):
        return load_watermark_model(spec, device, image_size=image_size)
    return spec


def watermark_images(target: WatermarkModel, images: ImageSet, *, watermarked: bool = False,
                     batch_size: int = 256) -> tuple[Tensor, Tensor]:
    """``(x_w [N,3,H,W], messages [N,n])`` on CPU: embed the messages into the covers with the target's
    encoder, or (``watermarked``) take the images as already watermarked.

    Messages: the ``.npz``'s ``messages`` when given, else the target's own message for every image.

    Raises:
        ValueError: size mismatch with the target, messages of the wrong length, or no message at all.
    """
    x = images.images
    check_images(x, target.cfg)
    if images.messages is not None:
        w = check_messages(images.messages, target.n_bits, x.shape[0], name=f"{images.source}: messages")
    elif target.message is not None:
        w = target.message.detach().cpu().float()[None].expand(x.shape[0], -1).clone()
    else:
        raise ValueError("no owner's message: the target checkpoint stores none (HiDDeN format) and the images "
                         "have no 'messages'; give an .npz with messages [N, n_bits]")
    if watermarked:
        return x, w
    dev = next(target.parameters()).device
    with torch.no_grad():
        out = [target.embed(x[i:i + batch_size].to(dev), w[i:i + batch_size].to(dev)).cpu()
               for i in range(0, x.shape[0], batch_size)]
    return torch.cat(out), w


def surrogate_subsets(n_surrogates: int, m: int, k: int) -> list[tuple[int, ...]]:
    """Up to ``k`` distinct subsets of size ``m`` of ``range(n_surrogates)``: cyclic windows starting at
    ``0, m, 2m, ...`` (mod n), e.g. n = 3, m = 2 → (0,1), (2,0), (1,2); m = 1 → (0,), (1,), (2,).

    Raises:
        ValueError: ``m`` outside ``[1, n_surrogates]``.
    """
    if not 1 <= m <= n_surrogates:
        raise ValueError(f"m={m} must be in [1, {n_surrogates}] (the number of surrogates)")
    out: list[tuple[int, ...]] = []
    seen: set[frozenset[int]] = set()
    start = 0
    for _ in range(n_surrogates * max(1, k)):
        sub = tuple((start + i) % n_surrogates for i in range(m))
        start += m
        if frozenset(sub) in seen:
            start += 1
            continue
        seen.add(frozenset(sub))
        out.append(sub)
        if len(out) == k:
            break
    return out


def mean_sd(values: Sequence[float | None]) -> tuple[float, float, int]:
    """Mean, sample standard deviation (0 for a single value) and count of the defined values
    (``nan`` mean when none)."""
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    if not v:
        return float("nan"), float("nan"), 0
    return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else 0.0), len(v)


# ----------------------------------------------------------------------------------------------- attack

def _attack_kwargs(p: dict[str, Any]) -> dict[str, Any]:
    return dict(strategy=p["strategy"], alpha=p["alpha"], r=p["r"], eps=p["eps"], max_iters=p["max_iters"],
                ssim_stop=p["ssim_stop"], update=p["update"], projection=p["projection"])


def _load_models(cfg: AttackConfig, device) -> tuple[WatermarkModel, list[WatermarkModel], dict[str, str]]:
    target = load_watermark_model(cfg.target, device, image_size=cfg.image_size)
    surs = [load_watermark_model(p, device) for p in cfg.surrogates]
    hashes = {"target": file_sha256(cfg.target)} | {f"surrogate{i}": file_sha256(p) for i, p in enumerate(cfg.surrogates)}
    for i, s in enumerate(surs):
        if (s.cfg.H, s.cfg.W) != (target.cfg.H, target.cfg.W):
            raise ValueError(f"surrogate {cfg.surrogates[i]} works on {s.cfg.H}x{s.cfg.W} images but the target on "
                             f"{target.cfg.H}x{target.cfg.W}; train surrogates at the target's image size")
    return target, surs, hashes


def _run_params(cfg: AttackConfig, target: WatermarkModel, hashes: dict[str, str]) -> dict[str, Any]:
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("out", "device", "threads", "quiet", "resume")}
    d["alpha"] = cfg.alpha if cfg.alpha is not None else default_alpha(target.cfg.H, target.cfg.W)
    d["alpha_rescaled"] = cfg.alpha is None
    d["image_size"] = cfg.image_size
    d["target"], d["surrogates"] = str(cfg.target), [str(p) for p in cfg.surrogates]
    d["model_sha256"] = hashes
    return d


def _check_resume(out: Path, params: dict[str, Any]) -> dict[str, Any]:
    p = out / "config.json"
    if not p.is_file():
        raise FileNotFoundError(f"--resume: {p} does not exist; run without --resume first")
    old = json.loads(p.read_text())
    old_params = old.get("params", {})
    diff = [k for k in RESUME_KEYS if json.dumps(old_params.get(k), sort_keys=True) != json.dumps(params.get(k), sort_keys=True)]
    if diff:
        detail = "; ".join(f"{k}: recorded {old_params.get(k)!r}, now {params.get(k)!r}" for k in diff)
        raise ValueError(f"--resume refused: {out} was attacked with different settings ({detail}). Use a new --out "
                         "or the recorded settings")
    return old


def _finished_batches(out: Path, batch_sizes: list[int]) -> tuple[list[dict[str, Any]], int]:
    """Records of the batches finished in order (complete JSONL records and their .npz); rewrites the
    JSONL without a torn or partial tail. Returns (records, number of finished batches)."""
    from iclr25.core.jsonl import read_jsonl, write_jsonl

    path = out / "images.jsonl"
    if not path.is_file():
        return [], 0
    recs = read_jsonl(path, required=("batch", "index"), torn_tail="drop")
    done, kept = 0, []
    for b, size in enumerate(batch_sizes):
        rb = [r for r in recs if r["batch"] == b]
        if len(rb) != size or not (out / "batches" / f"{b:05d}.npz").is_file():
            break
        kept += rb
        done += 1
    write_jsonl(path, kept)  # drops a torn tail and records of an unfinished batch
    return kept, done


def run_attack(cfg: AttackConfig) -> dict[str, Any]:
    """The ``attack`` command: load models and images, check every decoder, watermark, attack batch by
    batch, append per-image records to ``images.jsonl``, write ``results.json`` / ``results.md``.

    Returns:
        the summary (see :func:`~.evaluation.summarize_records`) with ``decoder_bit_acc``.

    Raises:
        DecoderCheckError: a model below ``min_bit_acc`` (nothing attacked; ``results.json`` records it).
        ValueError / FileNotFoundError: bad inputs, or a ``--resume`` whose settings differ.
    """
    from iclr25.core.jsonl import append_jsonl
    from iclr25.core.progress import progress
    from iclr25.core.runinfo import write_run_files
    from iclr25.core.seed import choose_device

    t0 = time.perf_counter()
    device = torch.device(choose_device(cfg.device))
    out = Path(cfg.out)
    target, surs, hashes = _load_models(cfg, device)
    params = _run_params(cfg, target, hashes)
    if cfg.resume:
        _check_resume(out, params)
    imgs = load_images(cfg.images, cfg.image_size or target.cfg.H, cfg.n_images, seed=cfg.seed)
    x_w, w = watermark_images(target, imgs, watermarked=cfg.watermarked)
    models = {str(cfg.target): target} | {str(p): s for p, s in zip(cfg.surrogates, surs)}
    out.mkdir(parents=True, exist_ok=True)
    try:
        if cfg.watermarked:
            with torch.no_grad():
                tacc = float(bit_accuracy(decode_batched(target, x_w), w).mean())
            accs = {str(cfg.target): tacc}
            if tacc < cfg.min_bit_acc:
                raise DecoderCheckError(f"decoder check failed before any attack step ({cfg.target}: bit accuracy "
                                        f"{tacc:.3f} on the given watermarked images < {cfg.min_bit_acc})", accs)
            accs |= check_decoders({str(p): s for p, s in zip(cfg.surrogates, surs)}, x_w.to(device), cfg.min_bit_acc)
        else:
            accs = check_decoders(models, imgs.images.to(device), cfg.min_bit_acc)
    except DecoderCheckError as e:
        write_run_files(out, {"params": params}, {"status": "decoder_check_failed", "error": str(e),
                                                  "decoder_bit_acc": e.accuracies, "min_bit_acc": cfg.min_bit_acc},
                        started=t0)
        raise
    n = x_w.shape[0]
    bs = cfg.batch_size
    sizes = [min(bs, n - i) for i in range(0, n, bs)]
    recs, done = _finished_batches(out, sizes) if cfg.resume else ([], 0)
    if not cfg.resume:
        for f in (out / "images.jsonl",):
            f.unlink(missing_ok=True)
    write_run_files(out, {"params": params, "decoder_bit_acc": accs, "n_images": n, "source": imgs.source})
    (out / "batches").mkdir(exist_ok=True)
    kw = _attack_kwargs(params)
    for b in progress(range(done, len(sizes)), desc="attack", total=len(sizes) - done, unit="batch",
                      quiet=cfg.quiet or None):
        sl = slice(b * bs, b * bs + sizes[b])
        xb = x_w[sl].to(device)
        # one generator per batch (the random strategy): a resumed run draws what an uninterrupted one would
        res = transfer_attack(xb, surs, generator=torch.Generator().manual_seed(cfg.seed * 100003 + b), **kw)
        rb = evaluate_images(target, xb.cpu(), res.x_adv.cpu(), w[sl], fpr=cfg.fpr, names=imgs.names[sl],
                             iterations=res.iterations, stop_reason=res.stop_reason,
                             surrogate_bit_acc=res.surrogate_bit_acc, ssim_stop=cfg.ssim_stop)
        for i, r in enumerate(rb):
            r.update(batch=b, index=b * bs + i)
        tmp = out / "batches" / f"{b:05d}.tmp.npz"
        np.savez(tmp, x_w=xb.cpu().numpy(), x_adv=res.x_adv.cpu().numpy(), messages=w[sl].numpy())
        tmp.replace(out / "batches" / f"{b:05d}.npz")
        append_jsonl(out / "images.jsonl", rb)
        recs += rb
    summary = summarize_records(recs)
    summary["decoder_bit_acc"] = accs
    summary["alpha"] = params["alpha"]
    write_run_files(out, None, {"status": "ok", "summary": summary}, started=t0)
    (out / "results.md").write_text(summary_table(summary))
    return summary


def _load_run_images(run: Path, n_batches: int) -> tuple[Tensor, Tensor, Tensor]:
    xs, xa, ms = [], [], []
    for b in range(n_batches):
        f = run / "batches" / f"{b:05d}.npz"
        if not f.is_file():
            raise FileNotFoundError(f"{f} is missing (the run is incomplete; rerun attack with --resume)")
        with np.load(f, allow_pickle=False) as z:
            xs.append(torch.from_numpy(z["x_w"]))
            xa.append(torch.from_numpy(z["x_adv"]))
            ms.append(torch.from_numpy(z["messages"]))
    return torch.cat(xs), torch.cat(xa), torch.cat(ms)


def evaluate_run(cfg: EvaluateConfig) -> dict[str, Any]:
    """The ``evaluate`` command: summarise ``images.jsonl`` of an attack folder, or (``--target``)
    re-decode its saved images with another model. Writes ``eval.json`` and ``eval.md`` in ``--out``
    (default ``runs/wm-transfer/evaluate``).

    Raises:
        FileNotFoundError: not an attack folder. ValueError: bad records (file and line named).
    """
    from iclr25.core.jsonl import read_jsonl
    from iclr25.core.seed import choose_device

    run = Path(cfg.run)
    if not (run / "images.jsonl").is_file() or not (run / "config.json").is_file():
        raise FileNotFoundError(f"{run} is not an attack run folder (needs config.json and images.jsonl; "
                                "run `iclr25-wm-transfer attack --out DIR` first)")
    recs = read_jsonl(run / "images.jsonl", required=("batch", "bit_acc_after", "detected_before", "detected_after"))
    if not recs:
        raise ValueError(f"{run / 'images.jsonl'} has no records")
    if cfg.target is not None:
        model = load_watermark_model(cfg.target, choose_device(cfg.device))
        x_w, x_adv, msgs = _load_run_images(run, max(r["batch"] for r in recs) + 1)
        if cfg.messages is not None:
            msgs = load_npz_images(cfg.messages).messages
            if msgs is None:
                raise ValueError(f"{cfg.messages}: no 'messages' key")
        elif model.message is not None:
            msgs = model.message.cpu()
        cfg_run = json.loads((run / "config.json").read_text())
        recs2 = evaluate_images(model, x_w, x_adv, msgs, fpr=cfg.fpr,
                                ssim_stop=cfg_run.get("params", {}).get("ssim_stop", 0.9))
        for a, b in zip(recs2, recs):
            for k in ("iterations", "stop_reason", "surrogate_bit_acc", "name"):
                if k in b:
                    a[k] = b[k]
        recs = recs2
    s = summarize_records(recs)
    out = Path(cfg.out) if cfg.out is not None else run
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(s, indent=2) + "\n")
    (out / "eval.md").write_text(summary_table(s))
    return s


# ------------------------------------------------------------------------------------------ comparison

def _row_summary(target, x_w: Tensor, x_adv: Tensor, w: Tensor, fpr: float, ssim_stop: float,
                 res: AttackResult | None = None, surrogates: Sequence | None = None,
                 targets: Sequence[Tensor] | None = None) -> dict[str, Any]:
    recs = evaluate_images(target, x_w, x_adv, w, fpr=fpr, ssim_stop=ssim_stop,
                           iterations=None if res is None else res.iterations,
                           stop_reason=None if res is None else res.stop_reason,
                           surrogate_bit_acc=None if res is None else res.surrogate_bit_acc)
    s = summarize_records(recs)
    if res is None and surrogates is not None and targets is not None:
        with torch.no_grad():
            accs = [bit_accuracy(decode_batched(m, x_adv), t.cpu()) for m, t in zip(surrogates, targets)]
        s["surrogate_bit_acc"] = float(torch.stack(accs).mean())
    return s


def run_comparison(target: WatermarkModel, surrogates: Sequence[WatermarkModel], x_w: Tensor, w: Tensor, *,
                   alpha: float, r: float, eps: float, max_iters: int, ssim_stop: float,
                   m_values: Sequence[int] = (1, 2), n_subsets: int = 3, sign_alpha: float = 0.01,
                   r_tight: float | None = 0.1, fpr: float = 1e-4, seed: int = 0,
                   post_processing: Sequence[str] = POST_PROCESSING, whitebox: bool = True,
                   quiet: bool | None = None,
                   on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Transfer attack per m and subset, and its baselines, on the same ``x_w`` / messages ``w``.

    Rows: ``transfer`` per m (each subset one "seed"); at the largest m per subset: ``sign`` (PGD
    sign steps of ``sign_alpha``), ``clip`` (clip projection), ``tight_rescale`` / ``tight_clip`` (both at
    ``r_tight``, where the ℓ∞ bound binds), ``random_noise`` (random ±a noise with each image's ℓ∞
    of the attack; surrogate bit accuracy against the same targets), ``postprocess[kind]`` matched to
    that subset's mean SSIM; once: ``whitebox`` (ε as given) and ``whitebox_eps0`` (run to full inversion).

    ``on_row(partial)`` (optional) is called after every finished row with the result so far (the same
    layout, rows still missing absent), e.g. to save a long run's progress.

    Returns:
        dict of rows (summaries as :func:`~.evaluation.summarize_records`, with ``subset``) plus
        ``clean`` (bit accuracy / detection on ``x_w`` and on covers is the caller's) and ``params``.
    """
    from iclr25.core.progress import progress

    device = next(target.parameters()).device
    x_w = x_w.cpu()
    w = w.cpu()
    xd = x_w.to(device)
    kw = dict(alpha=alpha, r=r, eps=eps, max_iters=max_iters, ssim_stop=ssim_stop)
    out: dict[str, Any] = {"params": dict(kw, m_values=list(m_values), n_subsets=n_subsets, sign_alpha=sign_alpha,
                                          r_tight=r_tight, fpr=fpr, seed=seed,
                                          thresholds=list(double_tail_threshold(target.n_bits, fpr)))}
    with torch.no_grad():
        d0 = decode_batched(target, x_w)
    out["clean"] = {"bit_acc": float(bit_accuracy(d0, w).mean()),
                    "detection_rate": float(is_detected(d0, w, fpr=fpr).float().mean())}
    m_max = max(m_values)
    out["transfer"] = {}
    jobs = [(m, sub) for m in m_values for sub in surrogate_subsets(len(surrogates), m, n_subsets)]
    largest: list[tuple[tuple[int, ...], AttackResult]] = []
    for m, sub in progress(jobs, desc="transfer attacks", unit="run", quiet=quiet):
        res = transfer_attack(xd, [surrogates[i] for i in sub], **kw)
        s = _row_summary(target, x_w, res.x_adv.cpu(), w, fpr, ssim_stop, res)
        s["subset"] = list(sub)
        s["stop_counts"] = res.stop_counts()
        out["transfer"].setdefault(str(m), []).append(s)
        if on_row is not None:
            on_row(out)
        if m == m_max:
            largest.append((sub, res))
    rows: dict[str, list[dict[str, Any]]] = {"sign": [], "clip": [], "tight_rescale": [], "tight_clip": [],
                                             "random_noise": []}
    pp: dict[str, list[dict[str, Any]]] = {k: [] for k in post_processing}
    if on_row is not None:  # the partial result shows the baseline rows as they fill
        out.update(rows)
        out["postprocess"] = pp
    g = torch.Generator().manual_seed(seed)
    for sub, res in progress(largest, desc="baselines", unit="subset", quiet=quiet):
        sm = [surrogates[i] for i in sub]
        variants = [("sign", dict(kw, alpha=sign_alpha, update="sign")), ("clip", dict(kw, projection="clip"))]
        if r_tight is not None:
            variants += [("tight_rescale", dict(kw, r=r_tight)), ("tight_clip", dict(kw, r=r_tight, projection="clip"))]
        for name, vkw in variants:
            rv = transfer_attack(xd, sm, **vkw)
            s = _row_summary(target, x_w, rv.x_adv.cpu(), w, fpr, ssim_stop, rv)
            s["subset"] = list(sub)
            rows[name].append(s)
            if on_row is not None:
                on_row(out)
        a = res.delta.flatten(1).abs().max(1).values.cpu()
        x_rand = random_sign_noise(x_w, a, g)
        s = _row_summary(target, x_w, x_rand, w, fpr, ssim_stop, None, sm, res.targets)
        s["subset"] = list(sub)
        rows["random_noise"].append(s)
        tgt_ssim = float(res.ssim.mean())
        for kind in post_processing:
            mr = match_quality(x_w, kind, min(tgt_ssim, 1.0), seed=seed)
            s = _row_summary(target, x_w, mr.x, w, fpr, ssim_stop)
            s.update(subset=list(sub), strength=mr.strength, matched_ssim=mr.ssim, target_ssim=tgt_ssim,
                     range_exhausted=mr.reached)
            pp[kind].append(s)
        if on_row is not None:
            on_row(out)
    out.update(rows)
    out["postprocess"] = pp
    if whitebox:
        for name, e in (("whitebox", eps), ("whitebox_eps0", 0.0)):
            rw = whitebox_attack(xd, target, **dict(kw, eps=e))
            out[name] = _row_summary(target, x_w, rw.x_adv.cpu(), w, fpr, ssim_stop, rw)
            out[name]["stop_counts"] = rw.stop_counts()
            if on_row is not None:
                on_row(out)
    return out


def _agg(rows: Sequence[dict[str, Any]], key: str) -> tuple[float, float, int]:
    return mean_sd([r.get(key) for r in rows])


def comparison_table(comp: dict[str, Any]) -> str:
    """Markdown table of :func:`run_comparison`: evasion, target bit accuracy after, lower-tail rate,
    SSIM, PSNR, ℓ∞ — mean ± sd over subsets."""
    def fmt(rows: Sequence[dict[str, Any]], key: str, nd: int = 3) -> str:
        m, s, k = _agg(rows, key)
        if k == 0:
            return "undefined"
        return f"{m:.{nd}f} ± {s:.{nd}f}" if len(rows) > 1 else f"{m:.{nd}f}"

    lines = ["| attack | runs | evasion | target bit acc after | lower tail | SSIM | PSNR (dB) | l_inf [0,1] |",
             "|---|---|---|---|---|---|---|---|"]

    def add(name: str, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        lines.append(f"| {name} | {len(rows)} | {fmt(rows, 'evasion_rate')} | {fmt(rows, 'bit_acc_after')} | "
                     f"{fmt(rows, 'lower_tail_rate_after')} | {fmt(rows, 'ssim')} | {fmt(rows, 'psnr', 1)} | "
                     f"{fmt(rows, 'linf')} |")

    m_max = max(int(k) for k in comp["transfer"])
    for m, rows in comp["transfer"].items():
        add(f"transfer m={m}", rows)
    add(f"sign-gradient m={m_max}", comp.get("sign", []))
    add(f"clip projection m={m_max}", comp.get("clip", []))
    rt = comp["params"].get("r_tight")
    add(f"rescale, r={rt} m={m_max}", comp.get("tight_rescale", []))
    add(f"clip, r={rt} m={m_max}", comp.get("tight_clip", []))
    add("random ±r noise (equal l_inf)", comp.get("random_noise", []))
    for kind, rows in comp.get("postprocess", {}).items():
        add(f"{kind} (matched SSIM)", rows)
    for name in ("whitebox", "whitebox_eps0"):
        if name in comp:
            add(name.replace("_eps0", " (eps=0, full inversion)"), [comp[name]])
    return "\n".join(lines) + "\n"
