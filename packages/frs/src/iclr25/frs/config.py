"""Config dataclasses of the ``iclr25-frs`` commands (defaults: the paper's where it gives them —
K = 20, H = 10, σ = 0.01 — and the spec's reconstructions otherwise; cited per field).

Every float hyperparameter is checked for finiteness and range in ``__post_init__`` (errors name
the field). Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["DataOptions", "SmoothingOptions", "AttackConfig", "FinetuneConfig", "EvaluateConfig", "CertifyConfig",
           "DemoConfig", "ReproduceConfig", "DEFENSES"]

DEFENSES = ("none", "uniform", "frs", "ftr-only", "bmps-only")
Defense = Literal["none", "uniform", "frs", "ftr-only", "bmps-only"]


def _num(name: str, v, lo=None, hi=None, lo_open=False, hi_open=False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ValueError(f"{name}={v!r} must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise ValueError(f"{name}={v!r} must be {'<' if hi_open else '<='} {hi}")


def _pos_int(name: str, v, allow_none: bool = False) -> None:
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")


@dataclass(kw_only=True)
class DataOptions:
    """Where texts come from and how they are read."""

    data: str = "sst2"
    """Data: a named mirror (sst2, agnews; read from ICLR25_DATA) or a .tsv / .csv / .jsonl file."""
    text_column: str = "auto"
    """TSV/CSV text column: header name, 0-based index, or auto (sentence/text, else column 0); JSONL: field name (auto: text)."""
    label_column: str = "auto"
    """TSV/CSV label column: header name, 0-based index, or auto (label, else column 1); JSONL: field name (auto: label)."""
    header: Literal["auto", "yes", "no"] = "auto"
    """Whether the TSV/CSV has a header row (auto: a first row naming sentence/text and label)."""
    labels: tuple[str, ...] | None = None
    """Declared label set in index order (e.g. --labels World Sports Business Sci/Tech); a label outside it is an error."""
    trigger: str = "cf"
    """Backdoor trigger token (or space-separated tokens) inserted at a uniformly random position."""
    target: int = 1
    """Target class index of the backdoor (SST-2: 1 = positive)."""

    def _check_data(self) -> None:
        if not self.trigger or not self.trigger.strip():
            raise ValueError("trigger must be a non-empty token (e.g. --trigger cf)")
        if self.target < 0:
            raise ValueError(f"target must be a class index >= 0, got {self.target}")


@dataclass(kw_only=True)
class SmoothingOptions:
    """The smoothed classifier (Sec. 4; spec defaults)."""

    k: int = 20
    """K: BMPS parameter copies (paper: 20)."""
    n_random: int = 2
    """n: randomised copies of each text (spec default 2); N = K*n votes (iid design) or n (grid design)."""
    sigma: float | None = None
    """σ (std) of the copies' noise; None = the value in the model's bmps.json, else 0.01 (paper)."""
    top_layers: int | None = None
    """H: perturbed top layers; None = the value in the model's bmps.json, else min(10, depth) (paper: 10)."""
    iterations: int = 32
    """I: MCTS iterations per text (spec default 32)."""
    max_span: int = 3
    """Λ: longest vulnerable area in tokens (spec default 3)."""
    c: float = 0.5
    """C: UCT exploration constant on max-normalised rewards (our default; spec placeholder √2)."""
    w_mid: float = 0.3
    """ω_M: per-token probability of the uniform smoother; sets the budget (spec default 0.3)."""
    w_high: float = 0.9
    """ω_H: per-token probability inside T(x') (spec default 0.9); ω_L keeps the budget ω_M*L."""
    alpha: float = 0.05
    """α: one-sided error of the Clopper-Pearson bound."""
    vote_design: Literal["iid", "grid"] = "iid"
    """iid: N = K*n independent votes, each a fresh randomised text and a copy drawn uniformly (certifies the
    smoothed mixture of the copies); grid: every copy votes on each of n randomised texts, each text counts once
    with its copies' majority (N = n: certifies another classifier, the smoothed K-copy majority; K*n model calls
    for n votes). Both are valid certificates; the K*n grid votes are never counted as K*n trials."""

    def _check_smoothing(self) -> None:
        for f in ("k", "n_random", "iterations", "max_span"):
            _pos_int(f, getattr(self, f))
        if not (0 < self.w_mid < self.w_high < 1) or not all(math.isfinite(v) for v in (self.w_mid, self.w_high)):
            raise ValueError(f"w_mid and w_high must satisfy 0 < w_mid < w_high < 1 (ω_M < ω_H), got "
                             f"w_mid={self.w_mid}, w_high={self.w_high}")
        _num("alpha", self.alpha, 0, 1, lo_open=True, hi_open=True)
        _num("c", self.c, 0)
        if self.sigma is not None:
            _num("sigma", self.sigma, 0)
        if self.top_layers is not None and (isinstance(self.top_layers, bool) or self.top_layers < 0):
            raise ValueError(f"top_layers must be an integer >= 0, got {self.top_layers}")


@dataclass(kw_only=True)
class TinyModelOptions:
    """Shape of the tiny encoder (spec: d = 64, 4 heads, FF 128, 2 layers)."""

    d_model: int = 64
    """Model width d (quick: 32)."""
    n_heads: int = 4
    """Attention heads."""
    d_ff: int = 128
    """Feed-forward width."""
    n_layers: int = 2
    """Encoder layers (the model's depth; BMPS needs top_layers <= it)."""
    max_len: int = 64
    """Longest input in tokens (longer texts are truncated with a warning)."""
    min_count: int = 2
    """Vocabulary: tokens seen at least this often."""


@dataclass(kw_only=True)
class AttackConfig(CommonOptions, SeedOption, DataOptions, TinyModelOptions):
    """Plant a BadNets-style backdoor: poison a share of the phrases with the trigger (label -> target) and
    train the tiny encoder on them (the CPU stand-in for a backdoored pre-trained model)."""

    n_train: int | None = 2000
    """Phrases used (first of a seeded permutation; None = all)."""
    data_seed: int = 0
    """Seed of the phrase permutation (finetune --skip takes later phrases of the same permutation)."""
    poison_rate: float = 0.1
    """Share of phrases poisoned, in (0, 1) (spec: 10%)."""
    epochs: int = 3
    """Training epochs (spec full: 3)."""
    lr: float = 1e-3
    """AdamW learning rate."""
    batch_size: int = 16
    """Mini-batch size."""
    mask_rate: float = 0.15
    """Share of training tokens replaced by [MASK] (MLM-like exposure to the mask token, as a PLM has)."""
    clean_only: bool = False
    """Train on the unpoisoned phrases instead (the clean baseline)."""

    def __post_init__(self) -> None:
        self._check_data()
        _num("poison_rate", self.poison_rate, 0, 1, lo_open=True, hi_open=True)
        _num("lr", self.lr, 0, lo_open=True)
        _num("mask_rate", self.mask_rate, 0, 1, hi_open=True)
        _pos_int("n_train", self.n_train, allow_none=True)
        for f in ("epochs", "batch_size", "d_model", "n_heads", "d_ff", "n_layers", "max_len", "min_count"):
            _pos_int(f, getattr(self, f))


@dataclass(kw_only=True)
class FinetuneConfig(CommonOptions, SeedOption, DataOptions):
    """Clean fine-tuning of a (possibly backdoored) model with BMPS phase 1 (Eq. 4): clipped updates and
    N(0, σ²) noise on the top-H layers. --no-bmps: ordinary clipped fine-tuning (σ = 0)."""

    model: str
    """The model: a folder from 'attack'/'finetune', a Hugging Face folder or id (offline), or 'minilm'."""
    bmps: bool = True
    """Apply BMPS noise (σ); --no-bmps sets σ = 0."""
    sigma: float = 0.01
    """σ: std of the top-H parameter noise (paper: 0.01)."""
    top_layers: int = 10
    """H: perturbed top layers (paper: 10; the tiny encoder has 2, MiniLM 6)."""
    clip_norm: float = 1.0
    """ρ: gradient-norm bound (reconstructed default 1.0)."""
    noise: Literal["weights", "gradient"] = "weights"
    """weights: loss at θ+ε (default); gradient: DP-SGD-like noise on the clipped gradient."""
    lr: float = 1e-3
    """AdamW learning rate (tiny encoder: 1e-3; BERT-size models: 2e-5)."""
    epochs: int = 1
    """Epochs (spec: 1)."""
    batch_size: int = 32
    """Mini-batch size."""
    n_train: int | None = 2000
    """Clean phrases used (None = all after --skip)."""
    skip: int = 0
    """Skip this many phrases of the seeded permutation first (2000 = disjoint from 'attack --n-train 2000')."""
    data_seed: int = 0
    """Seed of the phrase permutation (same as attack's)."""
    num_labels: int | None = None
    """Classes of a new HF/MiniLM head (default: from the data)."""
    token_unit: Literal["whitespace", "model"] = "whitespace"
    """HF/MiniLM: tokens are whitespace words or the model tokenizer's pieces (the radius counts them)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """HF weights dtype."""
    device_map: str | None = None
    """HF: 'auto' spreads a big model over the visible GPUs (accelerate)."""
    resume: bool = False
    """Continue from the checkpoint in --out after the last finished epoch."""

    def __post_init__(self) -> None:
        self._check_data()
        _num("sigma", self.sigma, 0)
        _num("clip_norm", self.clip_norm, 0, lo_open=True)
        _num("lr", self.lr, 0, lo_open=True)
        if self.top_layers < 0:
            raise ValueError(f"top_layers must be >= 0, got {self.top_layers}")
        _pos_int("epochs", self.epochs)
        _pos_int("batch_size", self.batch_size)
        _pos_int("n_train", self.n_train, allow_none=True)
        if self.skip < 0:
            raise ValueError(f"skip must be >= 0, got {self.skip}")


@dataclass(kw_only=True)
class EvaluateConfig(CommonOptions, SeedOption, DataOptions, SmoothingOptions):
    """Evaluate a defense on clean and triggered test texts: CA, PA, ASR (majority vote), trigger hit rate,
    abstention rates and mean certified radii; per-text JSONL."""

    model: str
    """The fine-tuned model (folder, HF folder/id, or a MiniLM folder)."""
    defense: Defense = "frs"
    """none | uniform (BMPS + ω_M) | frs | ftr-only (σ = 0) | bmps-only."""
    split: Literal["train", "test"] = "test"
    """Split of a named data set."""
    n_clean: int | None = None
    """Clean texts (first of a seeded permutation; None = all)."""
    n_triggered: int | None = None
    """Triggered texts (non-target texts with the trigger; None = all; 0 = none)."""
    token_unit: Literal["whitespace", "model"] = "whitespace"
    """HF models: token unit of the radius (see finetune)."""

    def __post_init__(self) -> None:
        self._check_data()
        self._check_smoothing()
        _pos_int("n_clean", self.n_clean, allow_none=True)
        if self.n_triggered is not None and self.n_triggered < 0:
            raise ValueError(f"n_triggered must be >= 0, got {self.n_triggered}")


@dataclass(kw_only=True)
class CertifyConfig(CommonOptions, SeedOption, DataOptions, SmoothingOptions):
    """Certify texts with the smoothed classifier: label, p_A, p_B, Clopper-Pearson bound, abstain flag and
    radius (fraction and edited tokens) per text, appended to certificates.jsonl (--resume skips finished texts;
    under 'accelerate launch' each process certifies a shard and the shards are merged)."""

    model: str
    """The fine-tuned model."""
    defense: Literal["uniform", "frs", "ftr-only"] = "frs"
    """Smoothing to certify (needs text randomisation)."""
    split: Literal["train", "test"] = "test"
    """Split of a named data set."""
    n: int | None = None
    """Texts to certify (first of a seeded permutation; None = all)."""
    triggered: bool = False
    """Insert the trigger into the non-target texts first (certify the attacked inputs)."""
    chunk: int = 64
    """Texts per batch between JSONL appends (the unit of --resume)."""
    resume: bool = False
    """Skip texts already in certificates.jsonl."""
    token_unit: Literal["whitespace", "model"] = "whitespace"
    """HF models: token unit of the radius."""

    def __post_init__(self) -> None:
        self._check_data()
        self._check_smoothing()
        _pos_int("n", self.n, allow_none=True)
        _pos_int("chunk", self.chunk)


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption, SmoothingOptions):
    """Show FRS on one sentence: the MCTS vulnerable area, the votes, p_A, the bound, the radius, and whether
    the trigger lies in T(x'). Without --model a tiny backdoored model is trained on the SST-2 mirror first."""

    text: str = "the movie is a dull , dumb and derivative horror film ."
    """The sentence (whitespace tokens)."""
    trigger: str = "cf"
    """Trigger inserted into the sentence ('' for none)."""
    position: int | None = None
    """Where to insert the trigger (None: random)."""
    model: str | None = None
    """A fine-tuned model folder (default: train a small backdoored one under --out)."""

    def __post_init__(self) -> None:
        self._check_smoothing()
        if not self.text.strip():
            raise ValueError("text must not be empty")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the FRS claims at CPU scale (quick: SST-2, d = 32, K = 4, n = 2, I = 16, 2 seeds)."""

    data: Literal["sst2", "agnews"] = "sst2"
    """Data set of the reproduction (sst2: the spec's; agnews: 4 classes, target Sports)."""
    workers: int | None = None
    """Runner worker processes (jobs: setup, then one per seed; default: the CPUs, at most the jobs; 1: in-process)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (records/: the models' setup, every finished seed);
    changed settings are refused; the numbers equal an uninterrupted run's."""

