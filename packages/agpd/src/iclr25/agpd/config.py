"""Configuration dataclasses with the paper's defaults (Section 4.2, Appendix D.1) and the
BackdoorBench variant, plus one dataclass per CLI command."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["AGPDConfig", "VARIANTS", "PoisonConfig", "TrainConfig", "DetectConfig", "ReproduceConfig",
           "DemoConfig",
           "DetectFolderConfig"]

#: Settings where the paper text and the official code (BackdoorBench, ``detection_pretrain/agpd.py``)
#: differ; ``AGPDConfig(variant=...)`` fills every field left at ``None`` from this table.
VARIANTS: dict[str, dict[str, object]] = {
    "paper": dict(basis="single", include_far=True, one_sided_z=False, z_eps=0.0, normalize_closeness=False,
                  js_distance=False, stop_rule="middle", fallback_layers="best"),
    "backdoorbench": dict(basis="mean", include_far=False, one_sided_z=True, z_eps=1e-6, normalize_closeness=True,
                          js_distance=True, stop_rule="start", fallback_layers="last3"),
}


def _check(name: str, v, ok, rule: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
        raise ValueError(f"{name}={v!r} must be finite and {rule}")


@dataclass
class AGPDConfig:
    """AGPD hyper-parameters. ``None`` fields take the ``variant``'s value (see :data:`VARIANTS`).

    The default variant is ``"backdoorbench"`` (the official code), the one that detects; the paper
    text's raw ``s < tau_s`` (``variant="paper"``) flags at most the far sample on real models."""

    variant: Literal["paper", "backdoorbench"] = "backdoorbench"
    """'backdoorbench' (the official code's choices; the default: it is the one that detects) or 'paper'
    (the paper's text: raw closeness s < tau_s, which on real models flags only the far sample)."""
    tau_z: float = math.e ** 2
    """Target-class threshold on the robust z-score of the CVBT (Sec. 4.2: e^2)."""
    tau_s: float = 0.05
    """Closeness threshold of the iterative filtering (Alg. 1; App. D.1: 0.05)."""
    window: int = 10
    """Width w of the sliding window over the JS trace (App. D.1.2: 10)."""
    beta: float = 5.0
    """Weight of the window's std in S_m = mu_m + beta * sigma_m (App. D.1.2: 5)."""
    fallback_rho: float | None = 0.3
    """When no class reaches tau_z, classes with rho above this are targets (Sec. 4.2; None: off)."""
    m: int = 1
    """Number of far-end vectors averaged in the CVBT (Remark after Eq. 4: 1 by default, 200 against
    adaptive attacks)."""
    m_fraction: float | None = None
    """m as a share of each class's size (ceil(m_fraction * n_k)); overrides m. Not in the paper (its
    m = 200 is ~4% of a 5,000-sample CIFAR-10 class); the CPU preset uses 0.1."""
    far_update: Literal["mean", "fixed"] = "mean"
    """Far end of the filtering: mean gradient of the samples filtered so far, or the initial farthest sample."""
    bins: int = 99
    """Histogram bins on [0, 1] for the JS trace (official code: np.linspace(0, 1, 100) edges = 99 bins)."""
    js_values: Literal["survivors", "remaining"] = "survivors"
    """What the JS trace compares round to round: the raw closeness of each round's survivors (official
    code and both variants), or 'remaining': the thresholded values of all samples entering each round
    (min-max normalised when normalize_closeness; this package's reading before issue 41, kept as a
    named variant: it stops the filtering after the first few rounds on real gradients)."""
    seed: int = 0
    """Chooses the clean basis sample when basis='single'."""
    basis: Literal["single", "mean"] | None = None
    """Clean basis: one correctly classified clean sample (paper) or their mean (official code)."""
    include_far: bool | None = None
    """CVBT sums over all n samples (paper) or leaves the far-end sample out (official 'gap')."""
    one_sided_z: bool | None = None
    """Negative z-scores clipped to 0 (official code)."""
    z_eps: float | None = None
    """Added to the MAD (official code: 1e-6)."""
    normalize_closeness: bool | None = None
    """Min-max normalise closeness within each round before thresholding (official code)."""
    js_distance: bool | None = None
    """JS distance (sqrt of the divergence, scipy's jensenshannon; official code) instead of the divergence."""
    stop_rule: Literal["middle", "start"] | None = None
    """Stop at the middle of the best window (paper, t* = m* + w/2) or at its start (official code)."""
    fallback_layers: Literal["best", "last3"] | None = None
    """Layer(s) searched by the rho fallback: the best z layer (paper) or the last three candidates (official)."""

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {list(VARIANTS)}, got {self.variant!r}")
        for k, v in VARIANTS[self.variant].items():
            if getattr(self, k) is None:
                setattr(self, k, v)
        if self.js_values not in ("survivors", "remaining"):
            raise ValueError(f"js_values must be 'survivors' (official) or 'remaining', got {self.js_values!r}")
        _check("tau_s", self.tau_s, lambda v: 0.0 <= v <= 1.0, "in [0, 1]")
        _check("tau_z", self.tau_z, lambda v: v > 0, "> 0")
        _check("beta", self.beta, lambda v: v >= 0, ">= 0")
        if self.fallback_rho is not None:
            _check("fallback_rho", self.fallback_rho, lambda v: v >= 0, ">= 0 (or None: off)")
        if self.z_eps is not None:
            _check("z_eps", self.z_eps, lambda v: v >= 0, ">= 0")
        if self.m_fraction is not None:
            _check("m_fraction", self.m_fraction, lambda v: 0 < v <= 1, "in (0, 1] (or None: use m)")
        for f in ("window", "m", "bins"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f}={getattr(self, f)} must be >= 1")


@dataclass(kw_only=True)
class PoisonConfig(CommonOptions, SeedOption):
    """Poison a data set's training split and save it (``poisoned.pt``)."""

    data: Literal["digits", "cifar10-subset"] = "digits"
    """Data set (cifar10-subset is read from $ICLR25_DATA/cifar10-subset/)."""
    attack: Literal["badnets", "blended", "badnets-a2a", "blended-a2a", "clean"] = "badnets"
    """Attack; '-a2a' = all-to-all (t = (y+1) mod K); 'clean' = no poisoning (control)."""
    ratio: float = 0.1
    """Poisoning ratio in [0, 1) (BackdoorBench: 10%)."""
    target: int = 0
    """All-to-one target label (BackdoorBench: 0)."""
    alpha: float = 0.2
    """Blended mixing weight in (0, 1] (BackdoorBench: 0.2)."""
    patch_size: int | None = None
    """BadNets patch side >= 1 (default 3, 2 on 8x8 digits)."""
    clean_per_class: int = 10
    """Defender's clean samples per class, drawn from the test split (paper: 10)."""

    def __post_init__(self) -> None:
        _check("ratio", self.ratio, lambda v: 0 <= v < 1, "in [0, 1)")
        _check("alpha", self.alpha, lambda v: 0 < v <= 1, "in (0, 1]")
        if self.patch_size is not None and self.patch_size < 1:
            raise ValueError(f"patch_size={self.patch_size} must be >= 1 (or omitted for the default)")
        if self.clean_per_class < 1:
            raise ValueError(f"clean_per_class={self.clean_per_class} must be >= 1")


@dataclass(kw_only=True)
class TrainConfig(CommonOptions, SeedOption):
    """Train a classifier on a poisoned data set (BackdoorBench recipe: SGD 0.01, momentum 0.9, wd 5e-4, cosine)."""

    data: Path
    """Folder written by 'poison'."""
    model: Literal["small", "preactresnet18"] = "small"
    """'small': CPU-scale Preact CNN (8 block convs); 'preactresnet18': the paper's model."""
    epochs: int = 30
    batch_size: int = 128
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    augment: bool = False
    """Random crop + horizontal flip."""
    resume: bool = False
    """Continue from out/checkpoint.pt when present."""
    threads: int | None = 1
    """torch CPU threads (1 is fastest for small models on a busy machine; None: torch's default)."""

    def __post_init__(self) -> None:
        _check("lr", self.lr, lambda v: v > 0, "> 0")
        _check("momentum", self.momentum, lambda v: 0 <= v < 1, "in [0, 1)")
        _check("weight_decay", self.weight_decay, lambda v: v >= 0, ">= 0")
        if self.epochs < 1:
            raise ValueError(f"epochs={self.epochs} must be >= 1")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size} must be >= 2 (BatchNorm)")


@dataclass(kw_only=True)
class DetectConfig(CommonOptions):
    """Run AGPD (and baselines) on a trained model and its poisoned data set."""

    data: Path
    """Folder written by 'poison'."""
    model: Path
    """The model.pt written by 'train', or its folder."""
    agpd: AGPDConfig = field(default_factory=AGPDConfig)
    baselines: tuple[str, ...] = ("spectral", "ac")
    """Baselines to run on penultimate features: spectral, ac."""
    threads: int | None = 1

    def __post_init__(self) -> None:
        bad = [b for b in self.baselines if b not in ("spectral", "ac")]
        if bad:
            raise ValueError(f"--baselines: unknown baseline(s) {bad}; choose from spectral, ac")


@dataclass(kw_only=True)
class DetectFolderConfig(CommonOptions):
    """Run AGPD on an ImageFolder (or an on-disk torchvision data set) with a trained model, streaming
    batches through a DataLoader (needs the [vision] extra: pip install 'iclr25-agpd[vision]')."""

    data: Path
    """Untrustworthy set: an ImageFolder root (data/<class>/<image>), or the root of --torchvision's files."""
    model: Path
    """A model.pt written by 'train' (or its folder), or a plain state_dict file with --arch."""
    clean: Path | None = None
    """Defender's clean set as an ImageFolder with the same class folders (default with --torchvision:
    --clean-per-class images per class of the test split)."""
    torchvision: str | None = None
    """Read --data as this torchvision data set's train split (CIFAR10, GTSRB, ...; download=False)."""
    clean_per_class: int = 10
    """Clean images per class drawn from the test split when --torchvision is given without --clean."""
    arch: Literal["auto", "small", "preactresnet18"] = "auto"
    """Architecture for a plain state_dict ('auto': read it from a 'train' checkpoint)."""
    num_classes: int | None = None
    """K (default: the checkpoint's, else the number of class folders)."""
    layers: tuple[str, ...] | None = None
    """Candidate layers (default: every block 3x3 conv but the last)."""
    image_size: int | None = None
    """Resize + centre-crop side (default: the files' own size)."""
    channels: int = 3
    """3 (RGB) or 1 (grey)."""
    mean: tuple[float, ...] | None = None
    """Per-channel normalisation the model was trained with (with --std); default none ([0, 1] pixels)."""
    std: tuple[float, ...] | None = None
    batch_size: int = 256
    workers: int = 0
    """DataLoader worker processes decoding images."""
    amp: Literal["off", "bf16", "fp16"] = "off"
    """Autocast for the gradient passes on CUDA (off on CPU)."""
    agpd: AGPDConfig = field(default_factory=AGPDConfig)
    truth: Path | None = None
    """Optional ground truth: one 0/1 line per image in data-set order (e.g. a poison_mask.txt) to score against."""
    threads: int | None = 1

    def __post_init__(self) -> None:
        if self.channels not in (1, 3):
            raise ValueError(f"channels={self.channels} must be 1 or 3")
        if self.batch_size < 1 or self.workers < 0 or self.clean_per_class < 1:
            raise ValueError("--batch-size and --clean-per-class must be >= 1, --workers >= 0")
        if (self.mean is None) != (self.std is None):
            raise ValueError("give both --mean and --std, or neither")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale and write results.json / results.md."""

    threads: int | None = 1
    """torch threads of each experiment (1 is fastest for these small convolutions)."""
    workers: int | None = None
    """experiments (seed x attack) run at once, each in its own single-threaded process (default: the
    CPUs available; 1 = in this process); the records and claims are the same whatever the number."""
    resume: bool = False
    """keep the experiments an interrupted run in --out finished (records/) and resume a training from its
    checkpoint; changed settings are refused."""

    def __post_init__(self) -> None:
        if self.workers is not None and (isinstance(self.workers, bool) or self.workers < 1):
            raise ValueError(f"--workers {self.workers} must be >= 1 (1 = one experiment after the other)")


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption):
    """Synthetic gradient circular distributions with a planted poisoned cluster (no training)."""

    n_per_class: int = 200
    num_classes: int = 10
    dim: int = 64
    target: int = 0
    poison_fraction: float = 0.5
    variant: Literal["paper", "backdoorbench"] = "paper"

    def __post_init__(self) -> None:
        _check("poison_fraction", self.poison_fraction, lambda v: 0 <= v < 1, "in [0, 1)")
