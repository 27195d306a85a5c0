"""Configs with the paper's defaults (§5, App. B; official ``main.py``) and the CPU-scale presets."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["TrainConfig", "EvalConfig", "ReproduceConfig", "DemoConfig", "METHODS"]

METHODS = ("orig", "clip", "lotos")


@dataclass(kw_only=True)
class TrainConfig(CommonOptions, SeedOption):
    """Train an ensemble with one of the three arms ``orig`` / ``clip`` / ``lotos`` (Eq. 4)."""

    method: Literal["orig", "clip", "lotos"] = "lotos"
    """Arm: ``orig`` (plain ensemble), ``clip`` (every layer clipped to C, the "C = 1" baseline),
    ``lotos`` (clipping + the LOTOS orthogonalisation penalty)."""
    num_models: int = 3
    """Ensemble size N (paper: 3; also 5 and 9)."""
    arch: Literal["small", "resnet18-nobn"] = "small"
    """``small`` = the CPU-scale SmallConvNet; ``resnet18-nobn`` = the paper's ResNet-18 without BN."""
    width: int = 32
    """Width w of SmallConvNet (channels w, w, 2w, 2w)."""
    data: Literal["cifar10-subset", "digits", "cifar10"] = "cifar10-subset"
    """Data set (``cifar10`` = full CIFAR-10 from a local folder via the core data resolver)."""
    n_train: int | None = None
    """Use a class-balanced subset of this many training images (None = all)."""
    image_size: int | None = None
    """Resize images to this size (None = native; the CPU presets use 16 for CIFAR)."""
    epochs: int = 15
    """Training epochs (paper: 121 without BN; CPU full run: 15)."""
    batch_size: int = 128
    """Mini-batch size (paper: 128)."""
    lr: float = 0.05
    """SGD learning rate (paper: 0.1 for ResNet-18; CPU scale: 0.05)."""
    momentum: float = 0.9
    """SGD momentum (paper: 0.9)."""
    weight_decay: float = 5e-4
    """Weight decay (paper: 5e-4)."""
    schedule: Literal["cosine", "step"] = "cosine"
    """LR schedule: cosine over all steps, or the paper's StepLR (step_epochs, gamma)."""
    step_epochs: int = 40
    """StepLR period in epochs (paper: 40)."""
    gamma: float = 0.1
    """StepLR factor (paper: 0.1)."""
    augment: bool = True
    """Random crop (padding 4) + horizontal flip (paper)."""
    clip: float = 1.0
    """Clip value C for σ_1 of every layer (paper: 1.0); used by ``clip`` and ``lotos``."""
    k: int = 1
    """Number of singular directions (paper: k = 1)."""
    mal: float = 0.8
    """Maximum allowed length of Eq. (3) (paper: 0.8)."""
    lam: float = 0.05
    """λ of Eq. (4) (paper: 0.05 on CIFAR-10 without BN)."""
    lotos_layers: Literal["conv", "all"] = "conv"
    """Which layers are orthogonalised (code: only convolutions)."""
    normalize: bool = False
    """Divide the penalty by #layers × #pairs (code computes it, then sets it to 1: False)."""
    clip_every: int = 100
    """Training forwards between FastClip events (code: 100 without BN). CPU presets use fewer."""
    clip_opt_iter: int = 1
    """Gradient steps per clip event (code: 1 without BN)."""
    clip_step: float = 0.35
    """Step size of the clip steps (code: 0.35)."""
    clip_exact: bool = True
    """Code's "exact" mode: also raise σ_1 towards C when it is ≥ 0.05 below it."""
    refresh: Literal["warm", "code"] = "warm"
    """How the tracked vector is recomputed after a clip event: warm (block of the current vector plus
    noise, 10 PowerQR iterations, Rayleigh-Ritz; finds a direction that overtook the clipped one) or
    code (the official code: fresh U[0,1) noise, 10 iterations; its estimate runs below the true σ_1)."""
    final_clip: Literal["rescale", "none"] = "rescale"
    """After training, rescale every clipped layer whose true σ_1 (exact SVD/FFT) exceeds C so that
    σ_1 = C exactly (our addition: rank-one FastClip events cannot hold σ_1 when the top of the
    spectrum is flat); none: leave the weights as training ends."""
    clip_at_init: bool = False
    """Before training, repeat clip events on every layer until σ_1 ≈ C (at most 50 per layer).
    Not in the paper's description; the CPU presets use it because the short runs have too few
    periodic clip events to bring the He-initialised layers (σ_1 ≈ 2-4) down to C."""
    power_every: int = 1
    """PowerQR step every this many training forwards (code: 1)."""
    skip_penalty_steps: bool = True
    """As the code: no LOTOS term at the first step, the last batch of an epoch and step % 200 == 199."""
    accelerate: bool = False
    """Train under HF accelerate (launch with `accelerate launch`): data sharded over processes,
    gradients averaged (extra [full]). `--device accelerate` (0.1) still works, with a warning."""
    resume: bool = False
    """Continue from ``out/checkpoint.pt`` (saved after every epoch)."""

    def __post_init__(self) -> None:
        if self.device == "accelerate":
            warnings.warn("--device accelerate is deprecated; use --accelerate", FutureWarning, stacklevel=3)
            self.device, self.accelerate = "auto", True
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.num_models < 1:
            raise ValueError(f"num_models must be >= 1, got {self.num_models}")
        if self.method == "lotos" and self.num_models < 2:
            raise ValueError(f"num_models={self.num_models}: LOTOS needs an ensemble of at least 2 models "
                             "(the penalty is between pairs of members); use --num-models 3")
        for f in ("epochs", "batch_size", "clip_every", "power_every", "k", "width", "clip_opt_iter"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        checks = {"clip": (lambda v: v > 0, "> 0"), "lr": (lambda v: v > 0, "> 0"),
                  "momentum": (lambda v: 0 <= v < 1, "in [0, 1)"), "weight_decay": (lambda v: v >= 0, ">= 0"),
                  "gamma": (lambda v: 0 < v <= 1, "in (0, 1]"), "mal": (lambda v: v >= 0, ">= 0"),
                  "lam": (lambda v: v >= 0, ">= 0"), "clip_step": (lambda v: v > 0, "> 0")}
        for f, (ok, rule) in checks.items():
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
                raise ValueError(f"{f}={v!r} must be finite and {rule}")
        if self.n_train is not None and self.n_train < 10:
            raise ValueError(f"n_train={self.n_train} must be >= 10 (or omitted for all images)")
        if self.image_size is not None and self.image_size < 8:
            raise ValueError(f"image_size={self.image_size} must be >= 8 (or omitted)")
        if self.method == "lotos" and self.mal >= self.clip:
            warnings.warn(f"mal={self.mal} >= clip={self.clip}: every clipped layer has ||A v|| <= C <= mal, so "
                          "the LOTOS penalty max(0, ||A_j v_i|| - mal) is always 0 and the lotos arm equals the "
                          "clip arm; use mal < C (paper: mal 0.8 with C 1)", UserWarning, stacklevel=3)

    @property
    def clipped(self) -> bool:
        return self.method in ("clip", "lotos")


@dataclass(kw_only=True)
class EvalConfig(CommonOptions, SeedOption):
    """Evaluate a trained ensemble: clean accuracy, within-ensemble transferability (Def. 3.2),
    individual robust accuracy, black-box robust accuracy against a surrogate, cross gains."""

    ensemble: Path = Path("runs/lotos")
    """Folder written by ``train`` (models.pt + config.json)."""
    surrogate: Path | None = None
    """Folder of an independently trained ensemble whose members are the black-box sources."""
    eps: float = 0.04
    """ℓ∞ radius in pixel units (paper: 0.04)."""
    steps: int = 50
    """PGD iterations (paper: 50)."""
    step_size: float | None = None
    """PGD step (default eps/10, paper)."""
    n_test: int | None = 500
    """Number of test images (class-balanced subset; None = all)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eps) and 0.0 <= self.eps <= 1.0):
            raise ValueError(f"eps={self.eps} is outside [0, 1] (pixel units; paper: 0.04)")
        if self.steps < 1:
            raise ValueError(f"steps={self.steps} must be >= 1")
        if self.step_size is not None and not (math.isfinite(self.step_size) and self.step_size > 0):
            raise ValueError(f"step_size={self.step_size} must be finite and > 0")
        if self.n_test is not None and self.n_test < 1:
            raise ValueError(f"n_test={self.n_test} must be >= 1")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Train orig / clip / lotos ensembles and a surrogate with identical seeds and data order; report
    the paper's claims (results.json / results.md). Seeds: quick 0 1, full 0 1 2 (--seeds to change)."""

    threads: int | None = 1
    """torch threads (1 is faster than 2 on a shared 2-core machine); None = torch default."""
    data: Literal["cifar10-subset", "digits"] = "cifar10-subset"
    """Data set (digits: the small fallback without the mirror)."""
    workers: int | None = None
    """Processes the seeds run in (default min(#seeds, #CPUs), one torch thread each; 1: in-process)."""
    resume: bool = False
    """Keep the seeds an interrupted run in --out finished (records/seed<s>.json); changed settings are refused."""


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption):
    """PowerQR vs. FFT vs. dense SVD on a toy conv, and toy LOTOS penalty values."""

    n: int = 8
    """Spatial size of the toy input."""
    c_in: int = 2
    """Input channels of the toy conv."""
    c_out: int = 3
    """Output channels of the toy conv."""

    top: int = 5
    """How many singular values to print."""
