"""Command configs (dataclasses; the CLI is generated from them with tyro).

Defaults follow the spec's CPU-scale scenarios (the paper's figures use the same objects): S2
(concept shift, minority share 0.2), ``d = 400``, ``n = 800``, the ``lam`` grid of the ADD tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["TheoryConfig", "SimulateConfig", "ReproduceConfig", "DigitsConfig"]


@dataclass(kw_only=True)
class TheoryConfig(CommonOptions, SeedOption):
    """Theory curves (group risks, ODD/EDD/ADD) of a two-group mixture over a lambda grid."""

    scenario: Literal["s1", "s2", "s3", "A", "B", "C"] = "s2"
    """Named scenario (iclr25.ridge_bias.scenarios): s1 difficulty via covariance, s2 concept shift +
    minority, s3 = s1 at d=100 (random projections), A/B/C validation configs."""
    mixture_file: Path | None = None
    """Optional .npz with arrays cov1, cov2 ([d,d] or spectra [d]), teacher1, teacher2 ([d]) and optional
    noise_var ([2]), proportions ([2]), n (scalar); replaces the scenario."""
    d: int | None = None
    """Dimension (default: the scenario's, 400 for s1/s2, 100 for s3, 200 for A-C)."""
    n: float | None = None
    """Training samples (default 2 d, i.e. phi = d/n = 0.5)."""
    p2: float | None = None
    """Proportion of group 2 (default: the scenario's)."""
    lam_grid: tuple[float, ...] = (1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0)
    """Ridge penalties of the (1/n)-normalised objective (sklearn alpha = n * lam); each > 0."""
    model: Literal["ridge", "rp", "gradient_flow"] = "ridge"
    """Estimator: ridge, random-projection ridge (needs --m), gradient flow at t = 1/lam."""
    t_grid: tuple[float, ...] = ()
    """Training times for model=gradient_flow (replaces --lam-grid with lam = 1/t)."""
    p2_grid: tuple[float, ...] = ()
    """Sweep of the minority share p2 (replaces --p2): disparities vs group proportions."""
    m: int | None = None
    """Number of random features for model=rp."""
    m_grid: tuple[int, ...] = ()
    """Sweep of m for model=rp (replaces --m): ODD/ADD vs the number of parameters (paper claim iii)."""
    draws: int = 1
    """model=rp: average the theory over this many projections (seeds seed, seed+1, ...)."""
    risk: Literal["excess", "noisy"] = "excess"
    """Risk reported: excess E_s (paper's test error against the teacher) or E_s + sigma_s^2."""
    add: Literal["ratio", "difference"] = "ratio"
    """ADD = ODD/EDD (ratio) or ODD - EDD (difference)."""
    edd_samples: Literal["group", "full"] = "group"
    """Separate models see p_s n samples (group) or n samples (full)."""
    plot: bool = True
    """Write a PNG (needs matplotlib, the [plot] extra)."""
    threads: int | None = 1
    """BLAS threads (1 avoids oversubscription on shared machines; None: the library default)."""


@dataclass(kw_only=True)
class SimulateConfig(TheoryConfig):
    """Monte-Carlo group risks (exact fits on sampled Gaussian data) next to the theory.
    --seed seeds the random projection S; --mc-seed the Monte-Carlo draws."""

    mc_draws: int = 20
    """Independent training sets drawn (spec: 20 Monte-Carlo seeds; was --seeds, a count)."""
    mc_seed: int = 0
    """Root seed of the Monte-Carlo draws."""


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims (i)-(v) and write results.json / results.md / PNG plots
    (--quick: d=200 validation, 30 seeds, 5 lambdas; about a minute on 2 cores)."""

    threads: int | None = 1
    """BLAS threads (1: the matrices are small; more threads are slower on a shared machine)."""
    workers: int | None = None
    """Processes the jobs (validation, mechanisms, S1/S2, S3, gradient flow, digits) run in (default: from
    the CPUs; 1: in-process)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (records/<job>.json); changed settings are refused."""


@dataclass(kw_only=True)
class DigitsConfig(CommonOptions, SeedOption):
    """Colored-digits demo: theory from empirical group statistics vs ridge fitted on random splits."""

    lam_grid: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    """Ridge penalties."""
    p2_values: tuple[float, ...] = (0.5, 0.2)
    """Group-2 shares of the training set (spec: 0.5 and 0.2)."""
    n_train: int = 600
    """Training-set size."""
    splits: int = 60
    """Random train/test splits averaged (enough for a standard error of each group gap)."""
    plot: bool = True
    """Write digits.png."""
    threads: int | None = 1
    """BLAS threads."""
