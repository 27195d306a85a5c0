"""Configs of the CLI subcommands (dataclasses; defaults from the paper/spec where there is one)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedsOption

from ._checks import check_lam

__all__ = ["RealDataConfig", "AnalyzeConfig", "TableConfig", "AreaConfig", "HeatmapConfig", "DemoConfig", "DPOConfig",
           "ReproduceConfig", "check_lam"]


def _check_l2(l2: float, field: str = "l2") -> None:
    if not math.isfinite(float(l2)) or l2 < 0:
        raise ValueError(f"{field}={l2!r} must be finite and >= 0")


def _check_prob(p: float, field: str, *, closed: bool = False) -> None:
    ok = (0 <= p <= 1) if closed else (0 < p < 1)
    if not (math.isfinite(float(p)) and ok):
        raise ValueError(f"{field}={p!r} must be a probability in {'[0, 1]' if closed else '(0, 1)'}")


def _check_values(values: tuple, field: str) -> None:
    """A list flag given with no values (``--lam`` alone) would run nothing and print an empty table."""
    if not values:
        raise ValueError(f"--{field.replace('_', '-')} needs at least one value (got none)")


@dataclass(kw_only=True)
class AnalyzeConfig(CommonOptions):
    """Report which triples / K-tuples of your preference data fall in the sensitive region."""

    input: Path
    """CSV/TSV/JSONL file: 'item,score' (reward scores), 'winner,loser[,count]' (comparisons; BT is
    fitted by MLE) or 'item_i,item_j,p' (pairwise probabilities P(item_i > item_j))."""
    lam: float = 2.0
    """Sensitivity threshold lambda: a triple is sensitive when a partial of p_ij exceeds it (spec R(lambda))."""
    k: int = 2
    """Tuple size: 2 = BT triples (i, pivot k, j); K >= 3 = K-tuple PL choice with a shared context."""
    l2: float = 0.0
    """Ridge on the BT fit of comparisons (needed when an item never wins or never loses)."""
    n_top: int = 20
    """How many of the most sensitive combinations to list."""
    plot: bool = True
    """Write the heat-map PNG."""
    maxiter: int = 200
    """Newton iteration cap of the BT fit (a ConvergenceWarning and fit.converged=false if reached)."""

    def __post_init__(self) -> None:
        check_lam(self.lam)
        _check_l2(self.l2)
        if self.k < 2:
            raise ValueError(f"k={self.k} must be >= 2")
        if self.n_top < 1:
            raise ValueError(f"n_top={self.n_top} must be >= 1")
        if self.maxiter < 1:
            raise ValueError(f"maxiter={self.maxiter} must be >= 1")


@dataclass(kw_only=True)
class TableConfig(CommonOptions):
    """Closed-form p_ij = g(p_ik, p_kj) and both partials (Results 1-2) for given probabilities."""

    p_ik: tuple[float, ...] = (0.01,)
    """P(i > k) values."""
    p_kj: tuple[float, ...] = (0.99,)
    """P(k > j) values (same count as p_ik, or one)."""

    def __post_init__(self) -> None:
        for name in ("p_ik", "p_kj"):
            _check_values(getattr(self, name), name)
            for t, p in enumerate(getattr(self, name)):
                _check_prob(p, f"{name}[{t}]", closed=True)


@dataclass(kw_only=True)
class AreaConfig(CommonOptions):
    """Uniform measure A(lambda) of the sensitive region {(p_ik, p_kj): dp_ij/dp_ik > lambda}."""

    lam: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
    """Thresholds lambda."""
    method: Literal["quad", "grid"] = "quad"
    """quad: 1-D quadrature formula; grid: 4000^2 midpoint grid (independent check)."""

    def __post_init__(self) -> None:
        _check_values(self.lam, "lam")
        for t, lam in enumerate(self.lam):
            check_lam(lam, f"lam[{t}]")


@dataclass(kw_only=True)
class HeatmapConfig(CommonOptions):
    """Heat map of dp_ij/dp_ik over (0,1)^2 (log colour scale) as a PNG (out/heatmap.png)."""

    lam: float = 2.0
    """Draw the boundary of R(lambda) at this threshold (> 0)."""
    boundary: bool = True
    """Draw the boundary of R(lambda) (--no-boundary: the heat map alone)."""

    def __post_init__(self) -> None:
        check_lam(self.lam)


@dataclass(kw_only=True)
class DemoConfig(CommonOptions):
    """The three-animal example (dog, cat, bird) in seconds: closed forms + BT MLE."""

    p12: float = 0.99
    """P(dog > cat), dominant in the paper's example."""
    n: int = 1000
    """Comparisons per trained edge for the MLE part."""

    def __post_init__(self) -> None:
        _check_prob(self.p12, "p12")
        if self.n < 1:
            raise ValueError(f"n={self.n} must be >= 1")


@dataclass(kw_only=True)
class DPOConfig(CommonOptions, SeedsOption):
    """DPO sweep on the chain dog-cat-bird (paper Fig. 3): vary p23, record the implied held-out p13."""

    backend: Literal["tabular", "tiny-gpt2", "hf"] = "tiny-gpt2"
    """tabular: softmax policy + L-BFGS; tiny-gpt2: random 2-layer GPT-2; hf: --model (e.g. Llama-3-8B-Instruct)."""
    p12: float = 0.99
    """P(dog > cat) in the training pairs (paper: 0.99)."""
    p23: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)
    """Grid of P(cat > bird)."""
    beta: float = 0.1
    """DPO beta (DPO default; the paper's value is not available)."""
    n_pairs: int = 500
    """Training pairs per compared edge."""
    sampling: Literal["exact", "bernoulli"] = "exact"
    """exact: round(p * n_pairs) wins; bernoulli: sampled."""
    steps: int = 1000
    """Adam steps per grid point (LM backends)."""
    lr: float = 1e-3
    """Adam learning rate (LM backends)."""
    batch_size: int = 64
    """Pairs per minibatch (LM backends)."""
    model: str | None = None
    """Hugging Face model id or path (backend hf)."""
    prompt: str = "Which animal do you prefer? Answer:"
    """Prompt (backend hf)."""
    options: tuple[str, str, str] = (" dog", " cat", " bird")
    """Option strings (backend hf)."""
    resume: bool = False
    """Skip grid points already in out/sweep.jsonl; continue an interrupted point from its checkpoint."""
    checkpoint_every: int = 200
    """LM backends: save model (safetensors) + optimizer every this many steps under out/checkpoints/ (0: off)."""

    def __post_init__(self) -> None:
        _check_prob(self.p12, "p12")
        _check_values(self.p23, "p23")
        for t, p in enumerate(self.p23):
            _check_prob(p, f"p23[{t}]")
            if p in self.p23[:t]:
                raise ValueError(f"p23={p:g} is given twice (p23[{self.p23.index(p)}] and p23[{t}]): each grid "
                                 "point would be trained and counted twice; give each value once")
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"beta={self.beta!r} must be finite and > 0")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr={self.lr!r} must be finite and > 0")
        for name in ("n_pairs", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every={self.checkpoint_every} must be >= 0")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (quick: ~1-2 min on 2 cores; full: ~15-30 min);
    writes results.json / results.md and figures."""

    workers: int | None = None
    """jobs (closed forms, BT MLE, tabular DPO, the two tiny-LM DPO arms) run in parallel processes (default: the
    CPUs; 1: in this process)"""
    resume: bool = False
    """keep the jobs an interrupted run in --out finished (records/); changed settings are refused"""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")


@dataclass(kw_only=True)
class RealDataConfig(CommonOptions):
    """Optional real-data check (spec item 5): linear BT reward on HH-RLHF harmless test pairs, then the
    fraction of response triples in the sensitive region. Needs the mirrored file (ICLR25_DATA)."""

    lam: tuple[float, ...] = (2.0, 5.0, 10.0)
    """Thresholds lambda (spec: 2, 5, 10)."""
    l2: tuple[float, ...] = (1e-3, 1e-4, 1e-5)
    """Ridge strengths of the linear reward (the reward scale, hence the answer, depends on it)."""
    n_responses: int = 200
    """Held-out responses scanned (n (n-1) (n-2) / 2 triples)."""
    path: Path | None = None
    """The hh_rlhf_harmless_base_test.jsonl.gz file (default: $ICLR25_DATA/aihf/)."""

    def __post_init__(self) -> None:
        _check_values(self.lam, "lam")
        for t, lam in enumerate(self.lam):
            check_lam(lam, f"lam[{t}]")
        _check_values(self.l2, "l2")
        for t, l2 in enumerate(self.l2):
            _check_l2(l2, f"l2[{t}]")
        if self.n_responses < 3:
            raise ValueError(f"n_responses={self.n_responses} must be >= 3")
