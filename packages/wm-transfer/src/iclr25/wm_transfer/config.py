"""Command configs (dataclasses → CLI flags via the core's tyro helper).

Defaults: the attack's parameters are the official code's (``transfer_attack.py``: α = 2, r = 0.5,
ε = 0.2, T = 5000, SSIM stop 0.9, plain gradient, rescaling projection) with α rescaled to the image
size when not given; training defaults are the CPU-scale tiny HiDDeN (see ``TrainConfig``), the
paper's configuration is ``--arch official`` with the flags listed in the README. Nothing here
imports torch (``--help`` stays fast).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["AttackParams", "TrainConfig", "AttackConfig", "EvaluateConfig", "CompareConfig", "ReproduceConfig",
           "DemoConfig", "default_alpha", "check_unit_interval", "check_attack_params", "TINY", "CPU_TRAIN"]

#: [design] the CPU-scale architecture (spec tiny HiDDeN with the issue's measured fixes)
TINY = dict(H=32, W=32, enc_blocks=3, enc_ch=16, dec_blocks=4, dec_ch=32, dec_strides=2, message_embed="spatial",
            msg_ch=16, decoder_head="flatten", residual=True, residual_scale=1.0)
#: [design] CPU training settings (the paper's: lr 1e-3, batch 100, image weight 0.7 fixed, 200 epochs)
CPU_TRAIN = dict(batch_size=32, lr=2e-3, image_weight=0.05, img_weight_growth=1.1, target_psnr=30.0,
                 robust_start=0.25)


def default_alpha(H: int, W: int) -> float:
    """The code's α = 2 for 128×128 images, rescaled by the pixel count: ``2 · H·W / 128²``
    ([design]: a per-image decoder output depends on ~H·W pixels, so the per-pixel gradient of the
    per-image loss grows as the image shrinks; 32×32 → 0.125)."""
    return 2.0 * H * W / (128.0 * 128.0)


def check_unit_interval(name: str, v: float, *, lo_open: bool = False, hi_open: bool = False) -> None:
    """``ValueError`` unless ``v`` is finite and in [0, 1] (with open ends as asked)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and \
        (0 < v if lo_open else 0 <= v) and (v < 1 if hi_open else v <= 1)
    if not ok:
        raise ValueError(f"{name} must be in {'(' if lo_open else '['}0, 1{')' if hi_open else ']'}, got {v!r}")


@dataclass(kw_only=True)
class AttackParams:
    """The transfer attack's parameters (spec "Attack"; official defaults)."""

    alpha: float | None = None
    """Step size α of x ← x − α·grad (code: 2 at 128×128). None: 2·H·W/128² (0.125 at 32×32)."""
    r: float = 0.5
    """ℓ∞ bound on the [-1,1] scale (code: 0.5, i.e. 0.25 on [0,1])."""
    eps: float = 0.2
    """Stop when the mean surrogate bit accuracy against the targets is ≥ 1 − eps (code: 0.2)."""
    max_iters: int = 5000
    """T, the iteration cap (code: 5000; the CPU reproduction uses 100 / 300)."""
    ssim_stop: float = 0.9
    """Stop when SSIM(x, x_w) ≤ this (code: 0.9)."""
    update: Literal["grad", "sign"] = "grad"
    """grad: the official plain gradient step; sign: the PGD sign-gradient variant."""
    projection: Literal["rescale", "clip"] = "rescale"
    """rescale: the official ℓ∞ projection (direction kept); clip: elementwise clamp."""
    strategy: Literal["inverse-decode", "random"] = "inverse-decode"
    """Target bits for the surrogates: inverse-decode (paper, code) or random."""

    def _check_attack(self) -> None:
        check_attack_params(self.alpha if self.alpha is not None else 1.0, self.r, self.eps, self.max_iters,
                            self.ssim_stop, self.update, self.projection)


def check_attack_params(alpha: float, r: float | None, eps: float | None, max_iters: int,
                        ssim_stop: float | None, update: str = "grad", projection: str = "rescale") -> None:
    """Validate the attack parameters.

    Raises:
        ValueError: ``alpha ≤ 0`` or non-finite, ``r ≤ 0``, ``eps ∉ [0, 1)``, ``max_iters < 1``,
            ``ssim_stop ∉ (0, 1]``, or an unknown ``update`` / ``projection``.
    """
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha (step size) must be finite and > 0, got {alpha!r}")
    if r is not None and not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
        raise ValueError(f"r (l_inf bound on the [-1,1] scale) must be finite and > 0, got {r!r}")
    if eps is not None and not (isinstance(eps, (int, float)) and math.isfinite(eps) and 0 <= eps < 1):
        raise ValueError(f"eps must be in [0, 1) (stop when surrogate bit accuracy >= 1 - eps), got {eps!r}")
    if not isinstance(max_iters, int) or isinstance(max_iters, bool) or max_iters < 1:
        raise ValueError(f"max_iters must be an integer >= 1, got {max_iters!r}")
    if ssim_stop is not None and not (isinstance(ssim_stop, (int, float)) and math.isfinite(ssim_stop)
                                      and 0 < ssim_stop <= 1):
        raise ValueError(f"ssim_stop must be in (0, 1], got {ssim_stop!r}")
    if update not in ("grad", "sign"):
        raise ValueError(f"update must be 'grad' (official) or 'sign' (PGD variant), got {update!r}")
    if projection not in ("rescale", "clip"):
        raise ValueError(f"projection must be 'rescale' (official) or 'clip', got {projection!r}")



def _check_fpr(fpr: float) -> None:
    if not (isinstance(fpr, (int, float)) and math.isfinite(fpr) and 0 < fpr < 1):
        raise ValueError(f"fpr must be in (0, 1), got {fpr!r}")


@dataclass(kw_only=True)
class TrainConfig(CommonOptions, SeedOption):
    """Train a watermarking model (the owner's target, or one of the attacker's surrogates)."""

    role: Literal["target", "surrogate"] = "target"
    """target: trained on the owner's images (even-indexed CIFAR training images by default);
    surrogate: on the attacker's own images (odd-indexed)."""
    n_bits: int | None = None
    """Message length n. None: 20 for a target, 16 for a surrogate ([design], spec CPU scale)."""
    robust: bool = False
    """Robust ("AT") training: a random noise layer on every encoded batch from robust_start on."""
    images: str | None = None
    """Training images: cifar10-subset:<role>, an .npz ('images'), or a folder of PNG/JPEG. None: cifar10-subset:<role>."""
    n_train: int | None = 2000
    """Training images used (after a seeded shuffle); None: all but the held-out ones."""
    n_val: int = 200
    """Held-out images for the clean bit accuracy stored in the checkpoint."""
    image_size: int | None = None
    """Resize images to image_size × image_size (folders: centre crop + resize; default 32)."""
    arch: Literal["tiny", "official", "official-resnet"] = "tiny"
    """tiny: the CPU-scale HiDDeN (32×32, spatial message, flattened decoder, residual encoder);
    official: the paper code's CNN HiDDeN (64 channels, broadcast message, pooled decoder);
    official-resnet: the same with a ResNet-18 decoder and 7 encoder blocks."""
    discriminator: bool = False
    """Train with the adversarial discriminator term (paper: on, weight 1e-3; CPU: off)."""
    epochs: int = 12
    """Epochs (paper: 200; CPU full run 12, quick 16 on 500 images)."""
    batch_size: int = 32
    """Batch size (paper: 100; CPU: 32)."""
    lr: float = 2e-3
    """Adam learning rate (paper code: 1e-3; CPU: 2e-3)."""
    image_weight: float = 0.05
    """Initial image-loss weight (paper: 0.7 fixed; CPU: starts low and grows, see img_weight_growth)."""
    img_weight_growth: float = 1.1
    """Per-step growth of the image weight once bit accuracy converged ([design]; 1.0: fixed weight, as the paper)."""
    target_psnr: float = 30.0
    """PSNR (dB) at which the image weight stops growing."""
    robust_start: float = 0.25
    """Fraction of training after which robust training adds noise (official: epoch 50 of 200)."""
    message_seed: int | None = None
    """Seed of the owner's message; None: drawn from the OS's secure random source."""
    resume: bool = False
    """Continue from <out>/checkpoint.pt (written after every epoch)."""
    distributed: bool = False
    """Data-parallel training under `accelerate launch` (gradients averaged across processes; extra [full])."""

    def __post_init__(self) -> None:
        if self.n_bits is not None and not (1 <= self.n_bits <= 4096):
            raise ValueError(f"n_bits must be in [1, 4096], got {self.n_bits}")
        for f in ("epochs", "batch_size", "n_val"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        if self.n_train is not None and self.n_train < 2:
            raise ValueError(f"n_train must be >= 2, got {self.n_train}")
        if self.image_size is not None and self.image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {self.image_size}")
        for f, lo in (("lr", 0.0), ("image_weight", -1e-12), ("target_psnr", 0.0)):
            v = getattr(self, f)
            if not (math.isfinite(v) and v > lo):
                raise ValueError(f"{f} must be finite and > {max(lo, 0)}, got {v}")
        if not (math.isfinite(self.img_weight_growth) and 1.0 <= self.img_weight_growth <= 10):
            raise ValueError(f"img_weight_growth must be in [1, 10], got {self.img_weight_growth}")
        check_unit_interval("robust_start", self.robust_start)

    @property
    def bits(self) -> int:
        return self.n_bits if self.n_bits is not None else (20 if self.role == "target" else 16)


@dataclass(kw_only=True)
class AttackConfig(CommonOptions, SeedOption, AttackParams):
    """Watermark images with the target and attack them with surrogate decoders; per-image JSONL."""

    target: Path
    """The target model checkpoint (package .pt, or a HiDDeN checkpoint)."""
    surrogates: tuple[Path, ...]
    """Surrogate checkpoints (the attacker's own models; any bit length)."""
    images: str = "cifar10-subset:test"
    """Images: cifar10-subset:test, an .npz ('images', optional 'messages'), or a folder of PNG/JPEG."""
    n_images: int | None = None
    """Attack only the first n images (None: all)."""
    image_size: int | None = None
    """Resize images (default: the target's size)."""
    watermarked: bool = False
    """The images are already watermarked by the target (then messages come from the .npz or the target)."""
    batch_size: int = 64
    """Images per attack batch (the unit of --resume)."""
    min_bit_acc: float = 0.9
    """Refuse to attack when the target or a surrogate reads its own watermark below this (before any step)."""
    fpr: float = 1e-4
    """False-positive rate of the double-tail detector (n = 20 → M ≥ 19 or ≤ 1)."""
    resume: bool = False
    """Continue after the last finished batch of <out>; refuses a folder whose recorded parameters or model hashes differ."""

    def __post_init__(self) -> None:
        self._check_attack()
        if not self.surrogates:
            raise ValueError("surrogates: give at least one surrogate checkpoint (--surrogates S1 S2 ...)")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.n_images is not None and self.n_images < 1:
            raise ValueError(f"n_images must be >= 1, got {self.n_images}")
        check_unit_interval("min_bit_acc", self.min_bit_acc)
        _check_fpr(self.fpr)


@dataclass(kw_only=True)
class EvaluateConfig(CommonOptions):
    """Bit accuracy, detection, evasion, SSIM, PSNR, ℓ∞, ℓ2 of an attack run folder."""

    run: Path
    """An `attack` output folder (config.json, images.jsonl, batches/)."""
    target: Path | None = None
    """Re-decode the saved images with this model instead of the run's own target records."""
    messages: Path | None = None
    """With --target: an .npz with 'messages' [N, n] (default: that model's own message)."""
    fpr: float = 1e-4
    """Detector false-positive rate."""

    def __post_init__(self) -> None:
        _check_fpr(self.fpr)


@dataclass(kw_only=True)
class CompareConfig(CommonOptions, SeedOption, AttackParams):
    """Transfer attack per number of surrogates m against sign-gradient, clip projection, matched
    post-processing, random ±r noise and the white-box bound, on the same images and messages."""

    target: Path
    """The target model checkpoint."""
    surrogates: tuple[Path, ...]
    """Surrogate checkpoints; subsets of size m are drawn from them in order (cyclic windows)."""
    images: str = "cifar10-subset:test"
    """Images to watermark and attack."""
    n_images: int | None = 32
    """How many images (None: all)."""
    image_size: int | None = None
    """Resize images (default: the target's size)."""
    m: tuple[int, ...] = (1, 2)
    """Numbers of surrogates to compare (paper default m = 10; CPU quick 1, 2; full 1, 2, 4)."""
    subsets: int = 3
    """Surrogate subsets per m (each one "seed" of the comparison)."""
    sign_alpha: float = 0.01
    """Step of the sign-gradient variant on the [-1,1] scale ([design])."""
    min_bit_acc: float = 0.9
    """Decoder check threshold (before any attack step)."""
    fpr: float = 1e-4
    """Detector false-positive rate."""

    def __post_init__(self) -> None:
        self._check_attack()
        if not self.surrogates:
            raise ValueError("surrogates: give at least one surrogate checkpoint")
        if not self.m or any(k < 1 for k in self.m):
            raise ValueError(f"m must be a non-empty list of integers >= 1, got {self.m}")
        if max(self.m) > len(self.surrogates):
            raise ValueError(f"m={max(self.m)} needs at least that many surrogates, got {len(self.surrogates)}")
        if self.subsets < 1:
            raise ValueError(f"subsets must be >= 1, got {self.subsets}")
        if not (math.isfinite(self.sign_alpha) and self.sign_alpha > 0):
            raise ValueError(f"sign_alpha must be finite and > 0, got {self.sign_alpha}")
        if self.n_images is not None and self.n_images < 1:
            raise ValueError(f"n_images must be >= 1, got {self.n_images}")
        check_unit_interval("min_bit_acc", self.min_bit_acc)
        _check_fpr(self.fpr)


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Train the target and surrogates on the CIFAR-10 subset, attack, compare, and report the claims."""

    workers: int | None = None
    """Worker processes (one thread each) of the core's runner on CPU for the trainings, the decoder check and
    the targets' comparisons (default: from the cores; 1 = in this process; always 1 on a GPU). Was --jobs."""
    target_seed: int = 1000
    """Seed of the target model and its message (the surrogates use --seeds)."""
    min_bit_acc: float = 0.9
    """Decoder check threshold: below it no attack runs and results.json records the failure."""
    resume: bool = False
    """Keep the jobs an interrupted run in <out> finished (records under <out>/records; refused if settings
    changed) and continue interrupted trainings from their epoch checkpoints."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        check_unit_interval("min_bit_acc", self.min_bit_acc)


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption):
    """The linear toy watermark with a known answer: target bit accuracy after the attack vs overlap ρ."""

    rho: tuple[float, ...] = (0.0, 0.3, 0.5, 0.61, 0.62, 0.8, 1.0)
    """Surrogate/target pattern overlaps to run."""

    def __post_init__(self) -> None:
        for v in self.rho:
            check_unit_interval("rho", v)
