"""Configs of the CLI subcommands (dataclasses; defaults from the paper/spec where there is one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["RealDataConfig", "AnalyzeConfig", "TableConfig", "AreaConfig", "HeatmapConfig", "DemoConfig", "DPOConfig",
           "ReproduceConfig"]


@dataclass
class AnalyzeConfig:
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
    out: Path = Path("runs/analyze")
    """Output folder: sensitivity_report.json/.md, heatmap.png, scores.json."""
    n_top: int = 20
    """How many of the most sensitive combinations to list."""
    plot: bool = True
    """Write the heat-map PNG."""


@dataclass
class TableConfig:
    """Closed-form p_ij = g(p_ik, p_kj) and both partials (Results 1-2) for given probabilities."""

    p_ik: tuple[float, ...] = (0.01,)
    """P(i > k) values."""
    p_kj: tuple[float, ...] = (0.99,)
    """P(k > j) values (same count as p_ik, or one)."""


@dataclass
class AreaConfig:
    """Uniform measure A(lambda) of the sensitive region {(p_ik, p_kj): dp_ij/dp_ik > lambda}."""

    lam: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
    """Thresholds lambda."""
    method: Literal["quad", "grid"] = "quad"
    """quad: 1-D quadrature formula; grid: 4000^2 midpoint grid (independent check)."""


@dataclass
class HeatmapConfig:
    """Heat map of dp_ij/dp_ik over (0,1)^2 (log colour scale) as a PNG."""

    out: Path = Path("sensitivity_heatmap.png")
    """Output PNG."""
    lam: float = 2.0
    """Draw the boundary of R(lambda) (0: none)."""


@dataclass
class DemoConfig:
    """The three-animal example (dog, cat, bird) in seconds: closed forms + BT MLE."""

    p12: float = 0.99
    """P(dog > cat), dominant in the paper's example."""
    n: int = 1000
    """Comparisons per trained edge for the MLE part."""


@dataclass
class DPOConfig:
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
    seeds: int = 1
    """Repetitions (model init and minibatch order)."""
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
    device: str = "cpu"
    """Torch device of the LM backends (auto, cpu, cuda)."""
    out: Path = Path("runs/dpo")
    """Output folder: sweep.jsonl (one line per finished point = checkpoint), sweep.png."""
    resume: bool = False
    """Skip grid points already in out/sweep.jsonl; continue an interrupted point from its checkpoint."""
    checkpoint_every: int = 200
    """LM backends: save model (safetensors) + optimizer every this many steps under out/checkpoints/ (0: off)."""
    quiet: bool = False
    """No progress bars."""


@dataclass
class ReproduceConfig:
    """Reproduce the paper's claims at CPU scale; writes results.json / results.md and figures."""

    quick: bool = False
    """CPU-scale quick mode (~1-2 min on 2 cores); otherwise the full sweep (~15-30 min)."""
    out: Path = Path("results/pref-sensitivity")
    """Output folder."""


@dataclass
class RealDataConfig:
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
    out: Path = Path("runs/realdata")
    """Output folder (realdata.json)."""
