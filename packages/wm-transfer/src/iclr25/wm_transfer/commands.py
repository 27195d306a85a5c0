"""The ``train`` and ``compare`` commands (imported only when they run)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import torch

from .attack_run import watermark_images
from .checkpoint import (
    DecoderCheckError,
    check_decoders,
    file_sha256,
    load_watermark_model,
    save_watermark_model,
)
from .comparison import comparison_table, run_comparison
from .config import TINY, CompareConfig, TrainConfig, default_alpha
from .data import load_images
from .models import HiddenConfig
from .train import TrainSettings, draw_message, train_watermark_model

__all__ = ["hidden_config_for", "train_command", "compare_command"]

log = logging.getLogger(__name__)


def hidden_config_for(arch: str, n_bits: int, image_size: int | None, discriminator: bool) -> HiddenConfig:
    """``tiny`` (CPU scale, default 32×32), ``official`` / ``official-resnet`` (paper code, default 128×128)."""
    if arch == "tiny":
        size = image_size or 32
        return HiddenConfig(**dict(TINY, H=size, W=size), n_bits=n_bits, use_discriminator=discriminator)
    cfg = HiddenConfig.official(n_bits, decoder="resnet" if arch == "official-resnet" else "cnn")
    size = image_size or 128
    return dataclasses.replace(cfg, H=size, W=size, use_discriminator=discriminator)


def train_command(cfg: TrainConfig) -> int:
    """Train one model into ``cfg.out``: ``model.pt`` (package checkpoint), ``checkpoint.pt`` (epoch
    checkpoint for ``--resume``), ``metrics.jsonl`` (one line per epoch), ``config.json``, ``results.json``.
    Exit code 1 (model kept) when the held-out clean bit accuracy is below 0.9."""
    from iclr25.core.jsonl import append_jsonl
    from iclr25.core.runinfo import write_run_files
    from iclr25.core.seed import choose_device

    t0 = time.perf_counter()
    out = Path(cfg.out)
    ckpt = out / "checkpoint.pt"
    if cfg.resume and not ckpt.is_file():
        raise FileNotFoundError(f"--resume: no epoch checkpoint at {ckpt}; train without --resume first")
    source = cfg.images or f"cifar10-subset:{cfg.role}"
    limit = None if cfg.n_train is None else cfg.n_train + cfg.n_val
    imgs = load_images(source, cfg.image_size, limit, seed=cfg.seed).images
    if imgs.shape[0] <= cfg.n_val + 1:
        raise ValueError(f"{source}: {imgs.shape[0]} images are too few for n_val={cfg.n_val} held-out images")
    train_x, val_x = imgs[:-cfg.n_val], imgs[-cfg.n_val:]
    hc = hidden_config_for(cfg.arch, cfg.bits, imgs.shape[-1], cfg.discriminator)
    st = TrainSettings(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, image_weight=cfg.image_weight,
                       img_weight_growth=cfg.img_weight_growth, target_psnr=cfg.target_psnr,
                       robust_start=cfg.robust_start, acc_high=0.93 if cfg.robust else 0.98,
                       acc_low=0.88 if cfg.robust else 0.95)
    out.mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        (out / "metrics.jsonl").unlink(missing_ok=True)
    resolved = {"config": dataclasses.asdict(cfg), "hidden_config": hc.to_dict(), "settings": dataclasses.asdict(st),
                "images": source, "n_train": int(train_x.shape[0]), "n_val": int(val_x.shape[0])}
    write_run_files(out, resolved)
    device = choose_device(cfg.device)
    acc, main_proc = None, True
    if cfg.distributed:
        try:
            from accelerate import Accelerator
        except ImportError as e:
            raise ImportError("--distributed needs accelerate: pip install 'iclr25-wm-transfer[full]' and start "
                              "with `accelerate launch -m iclr25.wm_transfer train ...`") from e
        acc = Accelerator(cpu=device == "cpu")
        main_proc = acc.is_main_process
    # the message must be the same in every process: draw it on the main one and broadcast
    message = draw_message(cfg.bits, cfg.message_seed)
    if acc is not None and acc.num_processes > 1:
        from accelerate.utils import broadcast

        message = broadcast(message.to(acc.device), from_process=0).cpu()
    model = train_watermark_model(hc, train_x, cfg.seed, cfg.robust, settings=st, val_images=val_x,
                                  message=message, device=device, checkpoint=ckpt, resume=cfg.resume,
                                  quiet=cfg.quiet or None, accelerator=acc,
                                  on_epoch=(lambda rec: append_jsonl(out / "metrics.jsonl", [rec])) if main_proc
                                  else None)
    if not main_proc:
        return 0
    path = save_watermark_model(model, out / "model.pt", role=cfg.role)
    res = {"clean_bit_acc": model.clean_bit_acc, "val_psnr": model.train_info["val_psnr"],
           "steps": model.train_info["steps"], "model": str(path), "sha256": file_sha256(path)}
    write_run_files(out, None, res, started=t0)
    print(f"trained {cfg.role} ({cfg.bits} bits{', robust' if cfg.robust else ''}) for {cfg.epochs} epochs: held-out "
          f"clean bit accuracy {model.clean_bit_acc:.3f}, PSNR {model.train_info['val_psnr']:.1f} dB -> {path}")
    if model.clean_bit_acc < 0.9:
        print(f"WARNING: clean bit accuracy {model.clean_bit_acc:.3f} < 0.9: attacks on this model would be refused; "
              "train longer (--epochs N --resume)")
        return 1
    return 0


def compare_command(cfg: CompareConfig) -> int:
    """Run :func:`~.pipeline.run_comparison` on the given checkpoints; write ``compare.json`` and ``compare.md``."""
    from iclr25.core.runinfo import write_run_files
    from iclr25.core.seed import choose_device

    t0 = time.perf_counter()
    device = torch.device(choose_device(cfg.device))
    target = load_watermark_model(cfg.target, device, image_size=cfg.image_size)
    surs = [load_watermark_model(p, device) for p in cfg.surrogates]
    imgs = load_images(cfg.images, cfg.image_size or target.cfg.H, cfg.n_images, seed=cfg.seed)
    out = Path(cfg.out)
    models = {str(cfg.target): target} | {str(p): s for p, s in zip(cfg.surrogates, surs)}
    try:
        accs = check_decoders(models, imgs.images.to(device), cfg.min_bit_acc)
    except DecoderCheckError as e:
        write_run_files(out, dataclasses.asdict(cfg), {"status": "decoder_check_failed", "error": str(e),
                                                       "decoder_bit_acc": e.accuracies}, started=t0)
        raise
    x_w, w = watermark_images(target, imgs)
    alpha = cfg.alpha if cfg.alpha is not None else default_alpha(target.cfg.H, target.cfg.W)
    comp = run_comparison(target, surs, x_w, w, alpha=alpha, r=cfg.r, eps=cfg.eps, max_iters=cfg.max_iters,
                          ssim_stop=cfg.ssim_stop, m_values=cfg.m, n_subsets=cfg.subsets, sign_alpha=cfg.sign_alpha,
                          fpr=cfg.fpr, seed=cfg.seed, quiet=cfg.quiet or None)
    comp["decoder_bit_acc"] = accs
    write_run_files(out, dict(dataclasses.asdict(cfg), alpha_used=alpha), {"status": "ok", "comparison": comp},
                    started=t0)
    table = comparison_table(comp)
    (out / "compare.md").write_text(table)
    (out / "compare.json").write_text(json.dumps(comp, indent=2, default=float) + "\n")
    print(table, end="")
    m_hi = str(max(cfg.m))
    ev = [r["evasion_rate"] for r in comp["transfer"][m_hi] if r["evasion_rate"] is not None]
    evs = f"{sum(ev) / len(ev):.3f}" if ev else "undefined"
    print(f"compare: transfer evasion at m={m_hi} {evs} on {x_w.shape[0]} images -> {out}/compare.json")
    return 0
