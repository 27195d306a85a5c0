"""The ``attack`` command's run: load the models and images, check every decoder, watermark, attack
batch by batch into a run folder (per-image JSONL, ``--resume``).

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
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .attack import transfer_attack
from .checkpoint import DecoderCheckError, check_decoders, file_sha256, load_watermark_model
from .config import AttackConfig, default_alpha
from .data import ImageSet, load_images
from .detect import bit_accuracy
from .evaluation import decode_batched, evaluate_images, summarize_records, summary_table
from .models import WatermarkModel, check_images, check_messages

__all__ = ["load_model", "watermark_images", "run_attack", "RESUME_KEYS"]

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
