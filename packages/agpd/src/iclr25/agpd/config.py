"""Configuration dataclasses with the paper's defaults (Section 4.2, Appendix D.1) and the
BackdoorBench variant, plus one dataclass per CLI command."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["AGPDConfig", "VARIANTS", "PoisonConfig", "TrainConfig", "DetectConfig", "ReproduceConfig",
           "DemoConfig"]

#: Settings where the paper text and the official code (BackdoorBench, ``detection_pretrain/agpd.py``)
#: differ; ``AGPDConfig(variant=...)`` fills every field left at ``None`` from this table.
VARIANTS: dict[str, dict[str, object]] = {
    "paper": dict(basis="single", include_far=True, one_sided_z=False, z_eps=0.0, normalize_closeness=False,
                  js_distance=False, stop_rule="middle", fallback_layers="best"),
    "backdoorbench": dict(basis="mean", include_far=False, one_sided_z=True, z_eps=1e-6, normalize_closeness=True,
                          js_distance=True, stop_rule="start", fallback_layers="last3"),
}


@dataclass
class AGPDConfig:
    """AGPD hyper-parameters. ``None`` fields take the ``variant``'s value (see :data:`VARIANTS`)."""

    variant: Literal["paper", "backdoorbench"] = "paper"
    """'paper' (the paper's text) or 'backdoorbench' (the official code's choices)."""
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
    """Number of far-end vectors averaged in the CVBT (Remark after Eq. 4; 200 against adaptive attacks)."""
    far_update: Literal["mean", "fixed"] = "mean"
    """Far end of the filtering: mean gradient of the samples filtered so far, or the initial farthest sample."""
    bins: int = 100
    """Histogram bins on [0, 1] for the JS trace (official code: 100)."""
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
        if not 0.0 <= self.tau_s <= 1.0:
            raise ValueError(f"tau_s must be in [0, 1], got {self.tau_s}")
        if self.window < 1 or self.m < 1 or self.bins < 1:
            raise ValueError("window, m and bins must be >= 1")


@dataclass
class PoisonConfig:
    """Poison a data set's training split and save it (``poisoned.pt``)."""

    out: Path
    """Output folder."""
    data: Literal["digits", "cifar10-subset"] = "digits"
    """Data set (cifar10-subset is read from $ICLR25_DATA/cifar10-subset/)."""
    attack: Literal["badnets", "blended", "badnets-a2a", "blended-a2a", "clean"] = "badnets"
    """Attack; '-a2a' = all-to-all (t = (y+1) mod K); 'clean' = no poisoning (control)."""
    ratio: float = 0.1
    """Poisoning ratio (BackdoorBench: 10%)."""
    target: int = 0
    """All-to-one target label (BackdoorBench: 0)."""
    alpha: float = 0.2
    """Blended mixing weight (BackdoorBench: 0.2)."""
    patch_size: int | None = None
    """BadNets patch side (default 3, 2 on 8x8 digits)."""
    clean_per_class: int = 10
    """Defender's clean samples per class, drawn from the test split (paper: 10)."""
    seed: int = 0


@dataclass
class TrainConfig:
    """Train a classifier on a poisoned data set (BackdoorBench recipe: SGD 0.01, momentum 0.9, wd 5e-4, cosine)."""

    data: Path
    """Folder written by 'poison'."""
    out: Path
    """Output folder (model.pt, checkpoint.pt, train.json)."""
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
    device: str = "cpu"
    threads: int | None = 1
    """torch CPU threads (1 is fastest for small models on a busy machine; None: torch's default)."""
    seed: int = 0
    quiet: bool = False


@dataclass
class DetectConfig:
    """Run AGPD (and baselines) on a trained model and its poisoned data set."""

    data: Path
    """Folder written by 'poison'."""
    model: Path
    """Folder written by 'train'."""
    out: Path | None = None
    """Where to write detection.json (default: the model folder)."""
    agpd: AGPDConfig = field(default_factory=AGPDConfig)
    baselines: tuple[str, ...] = ("spectral", "ac")
    """Baselines to run on penultimate features: spectral, ac."""
    device: str = "cpu"
    threads: int | None = 1
    quiet: bool = False


@dataclass
class ReproduceConfig:
    """Reproduce the paper's claims at CPU scale and write results.json / results.md."""

    out: Path = Path("results/agpd")
    quick: bool = False
    """Quick mode: digits, small model (< 3 min on 2 cores); full: the CIFAR-10 subset."""


@dataclass
class DemoConfig:
    """Synthetic gradient circular distributions with a planted poisoned cluster (no training)."""

    n_per_class: int = 200
    num_classes: int = 10
    dim: int = 64
    target: int = 0
    poison_fraction: float = 0.5
    seed: int = 0
    variant: Literal["paper", "backdoorbench"] = "paper"
