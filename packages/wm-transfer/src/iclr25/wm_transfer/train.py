"""Training of HiDDeN-style watermarking models (target and surrogates), with epoch checkpoints and
resume (spec "Surrogate / target watermarking models", CPU-scale "Training").

Loss per step: ``λ_img·MSE(x_w, x) + λ_msg·MSE(D(noise(x_w)), w) [+ λ_adv·BCE(Disc(x_w), cover)]``
with i.i.d. uniform random messages ``w`` per image, Adam (paper code: lr 1e-3; the CPU recipe, the default
of :class:`TrainSettings`: 2e-3). Robust ("AT") training sends
every encoded batch through one random noise layer from ``robust_start`` of training on.

[design] Image-loss controller: once the running (EMA) training bit accuracy is ≥ ``acc_high`` the
image weight grows by ``img_weight_growth`` per step while the running PSNR is below ``target_psnr``;
it shrinks again (never below its start value) when the bit accuracy drops under ``acc_low``. This
realises the issue's "raise the image-loss weight once bit accuracy has converged" to reach an
imperceptible watermark (PSNR ≥ 30 dB) without a hand-tuned schedule.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .detect import bit_accuracy
from .models import Discriminator, HiddenConfig, WatermarkModel, check_images
from .noise import NOISE_KINDS, random_noise_layer

__all__ = ["TrainSettings", "train_watermark_model", "measure_clean_bit_accuracy", "draw_message"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation hyper-parameters of :func:`train_watermark_model`.

    The defaults are the working CPU recipe (the ``train`` command's defaults and ``reproduce``'s
    ``CPU_TRAIN``: batch 32, lr 2e-3, image weight 0.05 growing by 1.1 per converged step up to 30 dB),
    which trains the tiny 32×32 model to a clean bit accuracy of about 0.97. The paper's values (batch
    100, lr 1e-3, fixed image weight 0.7), which learn nothing in a CPU budget at this scale (bit
    accuracy ≈ 0.5), are :meth:`paper`. :meth:`recipe` adds the robust-training thresholds.

    Attributes:
        epochs: passes over the training images (paper: 200; CPU: sized by steps, see the presets).
        batch_size: images per step (paper: 100; CPU recipe: 32).
        lr: Adam learning rate (paper code: 1e-3; CPU recipe: 2e-3).
        image_weight: initial weight of the image MSE (paper: 0.7 fixed; CPU recipe: 0.05, grown by the controller).
        message_weight: weight of the message MSE (paper: 1.0).
        adv_weight: weight of the adversarial BCE when ``HiddenConfig.use_discriminator`` (paper: 1e-3).
        robust_start: fraction of the steps after which robust training adds noise (official: epoch 50 of
            200 = 0.25).
        noise_kinds: the noise pool of robust training.
        target_psnr: PSNR (dB, [0,1] scale) the image-loss controller aims for (CPU recipe: 30).
        acc_high, acc_low: EMA training bit accuracy above which the image weight grows / below which it shrinks.
        img_weight_growth: multiplicative change of the image weight per step (1.0 disables the controller,
            as the paper; CPU recipe: 1.1).
        max_image_weight: cap of the image weight.
        ema: smoothing factor of the running bit accuracy / PSNR.
    """

    epochs: int = 12
    batch_size: int = 32
    lr: float = 2e-3
    image_weight: float = 0.05
    message_weight: float = 1.0
    adv_weight: float = 1e-3
    robust_start: float = 0.25
    noise_kinds: tuple[str, ...] = NOISE_KINDS
    target_psnr: float = 30.0
    acc_high: float = 0.98
    acc_low: float = 0.95
    img_weight_growth: float = 1.1
    max_image_weight: float = 500.0
    ema: float = 0.9

    def __post_init__(self) -> None:
        for f in ("epochs", "batch_size"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{f} must be an integer >= 1, got {v!r}")
        for f, lo, hi, lo_open in (("lr", 0.0, 10.0, True), ("image_weight", 0.0, 1e6, False),
                                   ("message_weight", 0.0, 1e6, True), ("adv_weight", 0.0, 1e3, False),
                                   ("robust_start", 0.0, 1.0, False), ("target_psnr", 0.0, 100.0, True),
                                   ("acc_high", 0.0, 1.0, True), ("acc_low", 0.0, 1.0, True),
                                   ("img_weight_growth", 1.0, 10.0, False), ("max_image_weight", 0.0, 1e9, True),
                                   ("ema", 0.0, 1.0, False)):
            v = getattr(self, f)
            ok = isinstance(v, (int, float)) and math.isfinite(v) and (lo < v if lo_open else lo <= v) and v <= hi
            if not ok:
                raise ValueError(f"{f} must be finite in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}")
        if self.acc_low > self.acc_high:
            raise ValueError(f"acc_low ({self.acc_low}) must be <= acc_high ({self.acc_high})")
        bad = [k for k in self.noise_kinds if k not in NOISE_KINDS]
        if bad:
            raise ValueError(f"unknown noise kind(s) {bad}; choose from {list(NOISE_KINDS)}")

    @classmethod
    def recipe(cls, robust: bool = False, **overrides: Any) -> TrainSettings:
        """The CPU recipe of the ``train`` command: the defaults, with the controller thresholds of robust
        training (0.93 / 0.88: noise keeps the bit accuracy lower) when ``robust``."""
        kw: dict[str, Any] = dict(acc_high=0.93, acc_low=0.88) if robust else {}
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def paper(cls, **overrides: Any) -> TrainSettings:
        """The paper code's optimisation (``configs/train-paper.yaml``): 200 epochs, batch 100, Adam 1e-3,
        fixed image weight 0.7 (no controller). For the 128×128 official architecture and a GPU."""
        kw: dict[str, Any] = dict(epochs=200, batch_size=100, lr=1e-3, image_weight=0.7, img_weight_growth=1.0)
        kw.update(overrides)
        return cls(**kw)


def draw_message(n_bits: int, seed: int | None = None) -> Tensor:
    """The owner's watermark ``w ∈ {0,1}^n`` (float ``[n]``): from the OS's secure source when
    ``seed`` is None (a real deployment's secret), else from a seeded generator (reproducible runs)."""
    if seed is None:
        bits = secrets.randbits(n_bits)
        return torch.tensor([(bits >> i) & 1 for i in range(n_bits)], dtype=torch.float32)
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, 2, (n_bits,), generator=g).float()


@torch.no_grad()
def measure_clean_bit_accuracy(model: WatermarkModel, images: Tensor, message: Tensor | None = None,
                               batch_size: int = 256) -> float:
    """Mean bitwise accuracy of ``D(E(x, w))`` against ``w`` on ``images`` ``[N,3,H,W]`` in ``[-1,1]``
    (``w``: the owner's message by default); eval mode, no noise."""
    model.eval()
    w = model.message if message is None else message
    if w is None:
        raise ValueError("measure_clean_bit_accuracy: the model has no message; pass one")
    dev = next(model.parameters()).device
    accs = []
    for i in range(0, images.shape[0], batch_size):
        x = images[i:i + batch_size].to(dev)
        ww = w.to(dev).float().expand(x.shape[0], -1) if w.dim() == 1 else w[i:i + batch_size].to(dev)
        accs.append(bit_accuracy(model.decode(model.embed(x, ww)), ww))
    return float(torch.cat(accs).mean())


def _psnr_batch(x_w: Tensor, x: Tensor) -> float:
    mse = float(((x_w - x) / 2).pow(2).mean())
    return 10 * math.log10(1.0 / max(mse, 1e-12))


def train_watermark_model(cfg: HiddenConfig, images: Tensor, seed: int, robust: bool = False, *,
                          settings: TrainSettings | None = None, val_images: Tensor | None = None,
                          message: Tensor | None = None, device: str | torch.device = "cpu",
                          checkpoint: str | Path | None = None, resume: bool = False,
                          on_epoch: Callable[[dict[str, Any]], None] | None = None,
                          quiet: bool | None = None, accelerator: Any | None = None) -> WatermarkModel:
    """Train a watermarking model ``(E, D)`` on ``images``.

    Args:
        cfg: architecture (``cfg.n_bits`` bits).
        images: ``[N,3,H,W]`` float in ``[-1,1]``, ``H×W = cfg.H×cfg.W`` (the training covers; shuffled
            every epoch with a generator seeded by ``seed`` and the epoch).
        seed: initial weights, data order, messages and noise draws.
        robust: robust ("AT") training with random noise layers from ``settings.robust_start`` on.
        settings: optimisation hyper-parameters (default: ``TrainSettings.recipe(robust)``, the working CPU
            recipe of the ``train`` command).
        val_images: held-out covers for the clean bit accuracy stored in the model (default: the last
            10 % of ``images`` are held out and not trained on).
        message: the owner's watermark ``[n]`` (default: drawn with :func:`draw_message` from ``seed``).
        device: torch device.
        checkpoint: file for the epoch checkpoint (written after every epoch; safe to load with
            ``weights_only=True``).
        resume: continue from ``checkpoint`` (same ``cfg``/``settings``/``seed`` expected).
        on_epoch: called with the epoch record (``epoch``, ``step``, ``loss``, ``bit_acc``, ``psnr``,
            ``image_weight``, ``seconds``).
        accelerator: an ``accelerate.Accelerator`` (under ``accelerate launch``): every process takes its
            shard ``[rank::world]`` of each batch (same order and messages everywhere), gradients are
            averaged across processes before each Adam step, BatchNorm buffers averaged at the end; only
            the main process writes the checkpoint. ``device`` is then the accelerator's.

    Returns:
        The trained :class:`WatermarkModel` in eval mode, with ``message`` and ``clean_bit_acc`` set
        and ``train_info`` (dict) attached.

    Raises:
        ValueError: bad images (shape/range, see :func:`check_images`) or fewer images than one batch.
        FileNotFoundError: ``resume`` without a checkpoint file.
    """
    s = settings or TrainSettings.recipe(robust)
    check_images(images, cfg)
    if val_images is None:
        n_val = max(1, images.shape[0] // 10)
        images, val_images = images[:-n_val], images[-n_val:]
    else:
        check_images(val_images, cfg, name="val_images")
    n = images.shape[0]
    if n < 2:
        raise ValueError(f"need at least 2 training images, got {n}")
    rank, world = 0, 1
    if accelerator is not None:
        device, rank, world = accelerator.device, accelerator.process_index, accelerator.num_processes
    device = torch.device(device)
    torch.manual_seed(seed)
    model = WatermarkModel(cfg, message=message if message is not None else draw_message(cfg.n_bits, seed + 7919))
    model.to(device)
    disc = Discriminator(cfg).to(device) if cfg.use_discriminator else None
    opt = torch.optim.Adam(list(model.encoder.parameters()) + list(model.decoder.parameters()), lr=s.lr)
    opt_d = torch.optim.Adam(disc.parameters(), lr=s.lr) if disc is not None else None
    noise_layer = random_noise_layer(s.noise_kinds) if robust else None
    bs = min(s.batch_size, n)
    if bs < world:
        raise ValueError(f"batch_size {bs} is smaller than the {world} processes")
    spe = n // bs  # drop the last partial batch (BatchNorm statistics of tiny batches are noisy)
    total = s.epochs * spe
    start_epoch, step, img_w = 0, 0, s.image_weight
    acc_ema, psnr_ema = 0.5, 0.0
    history: list[dict[str, Any]] = []
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if resume:
        if ckpt is None or not ckpt.is_file():
            raise FileNotFoundError(f"resume: no epoch checkpoint at {ckpt}; train without --resume first")
        try:
            st = torch.load(ckpt, map_location=device, weights_only=True)
        except Exception as e:  # noqa: BLE001 - unpickling errors have many types
            raise ValueError(f"{ckpt}: epoch checkpoint is corrupt or truncated ({type(e).__name__}); delete it and "
                             "train without --resume") from None
        if not isinstance(st, dict):
            raise ValueError(f"{ckpt}: expected a dict epoch checkpoint, got {type(st).__name__}")
        _check_resume_settings(ckpt, st, seed=seed, config=cfg.to_dict(), settings=asdict(s), robust=robust, n=n)
        for key in ("encoder", "decoder", "optimizer", "epoch", "step", "image_weight", "message"):
            if key not in st:
                raise ValueError(f"{ckpt}: epoch checkpoint is missing key {key!r}")
        model.encoder.load_state_dict(st["encoder"])
        model.decoder.load_state_dict(st["decoder"])
        opt.load_state_dict(st["optimizer"])
        if disc is not None and "discriminator" in st:
            disc.load_state_dict(st["discriminator"])
            opt_d.load_state_dict(st["optimizer_d"])
        model.message = st["message"].to(device)
        start_epoch, step, img_w = int(st["epoch"]), int(st["step"]), float(st["image_weight"])
        acc_ema, psnr_ema = float(st.get("acc_ema", 0.5)), float(st.get("psnr_ema", 0.0))
        history = list(st.get("history", []))
        log.info("resumed %s at epoch %d (step %d)", ckpt, start_epoch, step)
    from iclr25.core.progress import progress

    x_all = images.to(device)
    ones = torch.ones(len(range(rank, bs, world)), 1, device=device)
    bar = progress(total=total, initial=step, desc=f"train {cfg.n_bits}-bit model (seed {seed})", unit="step",
                   quiet=quiet if rank == 0 else True)

    def sync_grads(params) -> None:
        if world > 1:
            for p_ in params:
                if p_.grad is not None:
                    p_.grad = accelerator.reduce(p_.grad, reduction="mean")
    for epoch in range(start_epoch, s.epochs):
        model.train()
        if disc is not None:
            disc.train()
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        perm = torch.randperm(n, generator=g)
        t0 = time.perf_counter()
        sums = {"loss": 0.0, "bit_acc": 0.0, "psnr": 0.0}
        for i in range(spe):
            x = x_all[perm[i * bs:(i + 1) * bs][rank::world].to(device)]
            w = torch.randint(0, 2, (bs, cfg.n_bits), generator=g).float()[rank::world].to(device)
            x_w = model.encoder(x, w)
            x_dec = x_w
            if noise_layer is not None and step >= s.robust_start * total:
                x_dec = noise_layer(x_w, g)
            d = model.decoder(x_dec)
            loss_img = F.mse_loss(x_w, x)
            loss_msg = F.mse_loss(d, w)
            loss = img_w * loss_img + s.message_weight * loss_msg
            if disc is not None:
                loss = loss + s.adv_weight * F.binary_cross_entropy_with_logits(disc(x_w), ones)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            sync_grads(list(model.encoder.parameters()) + list(model.decoder.parameters()))
            opt.step()
            if disc is not None:
                d_cover = disc(x)
                d_enc = disc(x_w.detach())
                loss_d = F.binary_cross_entropy_with_logits(d_cover, ones) + \
                    F.binary_cross_entropy_with_logits(d_enc, torch.zeros_like(d_enc))
                opt_d.zero_grad(set_to_none=True)
                loss_d.backward()
                sync_grads(list(disc.parameters()))
                opt_d.step()
            with torch.no_grad():
                acc = float(bit_accuracy(d.detach(), w).mean())
                p = _psnr_batch(x_w.detach(), x)
            acc_ema = s.ema * acc_ema + (1 - s.ema) * acc
            psnr_ema = s.ema * psnr_ema + (1 - s.ema) * p
            if acc_ema >= s.acc_high and psnr_ema < s.target_psnr:
                img_w = min(img_w * s.img_weight_growth, s.max_image_weight)
            elif acc_ema < s.acc_low:
                img_w = max(img_w / s.img_weight_growth, s.image_weight)
            step += 1
            bar.update(1)
            sums["loss"] += float(loss.detach())
            sums["bit_acc"] += acc
            sums["psnr"] += p
            if not math.isfinite(float(loss.detach())):
                raise FloatingPointError(f"training diverged at step {step}: loss {float(loss.detach())}; lower lr")
        rec = {k: v / spe for k, v in sums.items()}
        rec.update(epoch=epoch + 1, step=step, image_weight=img_w, seconds=time.perf_counter() - t0,
                   noise=bool(noise_layer is not None and step > s.robust_start * total))
        history.append(rec)
        if ckpt is not None and rank == 0:
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            st = {"encoder": model.encoder.state_dict(), "decoder": model.decoder.state_dict(),
                  "optimizer": opt.state_dict(), "epoch": epoch + 1, "step": step, "image_weight": img_w,
                  "acc_ema": acc_ema, "psnr_ema": psnr_ema, "message": model.message.cpu(),
                  "history": history, "seed": seed, "config": cfg.to_dict(),
                  "resume_key": json.dumps(_resume_key(asdict(s), robust, n), sort_keys=True)}
            if disc is not None:
                st.update(discriminator=disc.state_dict(), optimizer_d=opt_d.state_dict())
            tmp = ckpt.with_suffix(ckpt.suffix + ".tmp")
            torch.save(st, tmp)
            tmp.replace(ckpt)
        if on_epoch is not None:
            on_epoch(rec)
        log.info("epoch %d: loss %.4f bit acc %.3f psnr %.1f img_w %.2f", epoch + 1, rec["loss"], rec["bit_acc"],
                 rec["psnr"], img_w)
    bar.close()
    if world > 1:  # BatchNorm running statistics: the mean over the processes' shards
        for mod in (model.encoder, model.decoder, *([disc] if disc is not None else [])):
            for b in mod.buffers():
                if b.is_floating_point():
                    b.copy_(accelerator.reduce(b.detach().clone(), reduction="mean"))
    model.eval()
    model.clean_bit_acc = measure_clean_bit_accuracy(model, val_images.to(device))
    with torch.no_grad():
        xv = val_images[:256].to(device)
        xw = model.embed(xv)
        val_psnr = float((10 * torch.log10(1.0 / ((xw - xv) / 2).pow(2).flatten(1).mean(1))).mean())
    model.train_info = {"seed": seed, "robust": robust, "n_train": n, "n_val": int(val_images.shape[0]),
                        "steps": step, "settings": asdict(s), "history": history, "val_psnr": val_psnr}
    if disc is not None:
        model.discriminator = disc.eval()
    if model.clean_bit_acc is not None and model.clean_bit_acc < 0.9:
        warnings.warn(f"the trained decoder reads only {model.clean_bit_acc:.3f} of the bits on the held-out images "
                      f"(< 0.9; chance is 0.5) after {step} steps ({n} images, {s.epochs} epochs, batch {bs}); the "
                      "tiny CPU recipe needs several hundred steps (the train command: 1,800 images x 12 epochs at "
                      "batch 32 = 672 steps): train on more images or for more epochs", UserWarning, stacklevel=2)
    return model


def _resume_key(settings: dict[str, Any], robust: bool, n: int) -> dict[str, Any]:
    """What a resumed run must share with the checkpoint (``epochs`` may change: ``--epochs N --resume``)."""
    return {"settings": {k: v for k, v in settings.items() if k != "epochs"}, "robust": bool(robust), "n_train": n}


def _check_resume_settings(ckpt: Path, st: dict[str, Any], *, seed: int, config: dict[str, Any],
                           settings: dict[str, Any], robust: bool, n: int) -> None:
    """Refuse to resume an epoch checkpoint written with another seed, architecture or hyper-parameters."""
    diff = []
    if "seed" in st and int(st["seed"]) != seed:
        diff.append(f"seed: recorded {st['seed']}, now {seed}")
    if "config" in st and json.dumps(st["config"], sort_keys=True) != json.dumps(config, sort_keys=True):
        keys = sorted(k for k in set(st["config"]) | set(config) if st["config"].get(k) != config.get(k))
        diff.append("model config (" + ", ".join(keys) + ")")
    if "resume_key" in st:
        old, new = json.loads(st["resume_key"]), json.loads(json.dumps(_resume_key(settings, robust, n), sort_keys=True))
        for k in sorted(set(old["settings"]) | set(new["settings"])):
            if old["settings"].get(k) != new["settings"].get(k):
                diff.append(f"{k}: recorded {old['settings'].get(k)}, now {new['settings'].get(k)}")
        for k in ("robust", "n_train"):
            if old.get(k) != new.get(k):
                diff.append(f"{k}: recorded {old.get(k)}, now {new.get(k)}")
    if diff:
        raise ValueError(f"--resume refused: {ckpt} was trained with other settings ({'; '.join(diff)}); use the "
                         "recorded settings (only --epochs may change) or a new --out")
