"""Command configs (dataclasses; tyro builds the flags). Light: no torch import.

Defaults are the paper's (Appendix A: N = 50, LoRA rank 16, lr 3e-4 with linear decay, gradient clipping
0.1, batch 4, 30 epochs, temperature 1, 512 new tokens). The CPU-scale values live in the presets
``quick`` / ``paper`` (``iclr25/sharpening/configs/{quick,paper}.yaml``, shipped in the wheel; find them with
:func:`preset_path`), one section per command (``--config quick`` picks the section of the command being run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption
from iclr25.core.lm.loading import ModelLoadOptions

__all__ = ["PRESETS", "preset_path", "ModelDataOptions", "BonOptions", "TuneOptions", "SftOptions", "RlhfOptions", "ReportOptions",
           "DemoOptions", "SharpeningReproduceOptions"]

PRESETS = ("quick", "paper")


def preset_path(name: str) -> Path:
    """The packaged preset ``name`` (``"quick"``: the CPU reproduction's settings, ``"paper"``: Appendix A) as a
    file path, found with :mod:`importlib.resources` (it ships in the wheel as
    ``iclr25/sharpening/configs/<name>.yaml``).

    Raises:
        ValueError: ``name`` is not one of :data:`PRESETS`.
        FileNotFoundError: the installed package lacks the file (a broken install; reinstall it).
    """
    from importlib.resources import files

    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; the packaged presets are {list(PRESETS)} (or give a YAML path)")
    res = files("iclr25.sharpening") / "configs" / f"{name}.yaml"
    if not res.is_file():
        raise FileNotFoundError(f"the packaged preset {name}.yaml is missing from {res}; reinstall iclr25-sharpening")
    return Path(str(res))


def _pos(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


def _int_ge(name: str, v: int, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


@dataclass(kw_only=True)
class ModelDataOptions(ModelLoadOptions):
    """The base model and the prompts."""

    model: str | None = None
    """pi_base: a local save_pretrained folder or a Hugging Face id (paper: microsoft/Phi-3.5-mini-instruct,
    mistralai/Mistral-7B-Instruct-v0.3, ...). Default: the trap-arithmetic base shipped in the wheel (no pre-training)."""
    prompts: Path | None = None
    """JSONL file: 'prompt' (required, non-empty) and 'answer' (optional, for accuracy) per line.
    Default: the trap task's test prompts (with their answers)."""
    num_prompts: int | None = None
    """Use only the first this many prompts (default: all; the trap default is 200 test prompts)."""
    answer_extractor: str | None = None
    """'last-number', 'gsm8k' or a regular expression (group 1): for majority vote and accuracy.
    Default: last-number when the prompts carry answers; the trap task reads its two-digit answer."""
    max_new_tokens: int = 512
    """Response length limit (paper: 512; the trap task's responses are 3 tokens)."""
    chat_template: bool = False
    """Wrap each prompt as a user turn with the tokenizer's chat template (instruct models)."""

    def __post_init__(self) -> None:
        _int_ge("max_new_tokens", self.max_new_tokens, 1)
        if self.num_prompts is not None:
            _int_ge("num_prompts", self.num_prompts, 1)


@dataclass(kw_only=True)
class BonOptions(CommonOptions, SeedOption, ModelDataOptions):
    """Inference-time best-of-N on the model's own self-reward (writes bon.jsonl, results.json)."""

    n: int = 50
    """Responses sampled per prompt (paper: up to 50)."""
    reward: Literal["log-likelihood", "length-normalized", "majority-vote"] = "log-likelihood"
    """Self-reward: sequence log-likelihood (theory), length-normalised log-likelihood, or majority vote."""
    temperature: float = 1.0
    """Sampling temperature (paper: 1.0). The reward is always the temperature-1 forward-pass log-likelihood."""
    top_p: float = 1.0
    """Nucleus truncation of the sampler (paper: none)."""
    batch_size: int = 64
    """Sequences per generate call / scoring forward."""
    server_url: str | None = None
    """Sample through an OpenAI-compatible server (vLLM: http://host:8000/v1) instead of the local model; the
    likelihoods are still recomputed by the local reference model."""
    server_model: str | None = None
    """Model name the server expects (default: --model)."""
    completions: bool = False
    """Use the server's completions endpoint (raw continuation) instead of chat completions."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _int_ge("n", self.n, 1)
        _int_ge("batch_size", self.batch_size, 1)
        if isinstance(self.temperature, bool) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


@dataclass(kw_only=True)
class TuneOptions(CommonOptions, SeedOption, ModelDataOptions):
    """Fine-tuning options shared by sft and rlhf (paper Appendix A)."""

    epochs: int = 30
    """Training epochs (paper: 30 for Phi-3.5-mini, 10 for Mistral-7B)."""
    lr: float = 3e-4
    """Peak learning rate, linear decay to 0 (paper)."""
    batch_size: int = 4
    """Examples per optimiser step over all processes (paper: 4; Mistral 1)."""
    weight_decay: float = 0.0
    """AdamW weight decay (paper: 0.1 MATH, 0.5 GSM8K, 0.0 ProntoQA)."""
    max_grad_norm: float = 0.1
    """Gradient clipping (paper: 0.1)."""
    lora_r: int = 16
    """LoRA rank (paper: 16 Phi-3.5-mini, 8 Mistral-7B); 0 = full fine-tuning."""
    lora_alpha: int | None = None
    """LoRA alpha (not stated in the paper; default 2 x rank)."""
    lora_dropout: float = 0.05
    """LoRA dropout (not stated; 0.05)."""
    lora_target_modules: str = "all-linear"
    """peft target modules (not stated; all linear layers)."""
    sample_batch_size: int = 64
    """Sequences per generate call / scoring forward."""
    checkpoint_every: int = 0
    """Checkpoint every this many steps (0: every epoch). Was --save-every (deprecated alias)."""
    resume: bool = False
    """Continue from OUT/checkpoint (weights or adapter, optimiser, step, RNG, data order)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _int_ge("epochs", self.epochs, 1)
        _int_ge("batch_size", self.batch_size, 1)
        _int_ge("lora_r", self.lora_r, 0)
        _int_ge("sample_batch_size", self.sample_batch_size, 1)
        _int_ge("checkpoint_every", self.checkpoint_every, 0)
        if self.lora_alpha is not None:
            _int_ge("lora_alpha", self.lora_alpha, 1)
        if isinstance(self.lora_dropout, bool) or not (0.0 <= self.lora_dropout < 1.0):
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        _pos("lr", self.lr)
        _pos("max_grad_norm", self.max_grad_norm)
        if isinstance(self.weight_decay, bool) or not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")

    def train_config(self):
        from .training import TrainConfig

        return TrainConfig(epochs=self.epochs, lr=self.lr, batch_size=self.batch_size, weight_decay=self.weight_decay,
                           max_grad_norm=self.max_grad_norm, lora_r=self.lora_r, lora_alpha=self.lora_alpha,
                           lora_dropout=self.lora_dropout, lora_target_modules=self.lora_target_modules,
                           seed=self.seed, save_every=self.checkpoint_every)


@dataclass(kw_only=True)
class SftOptions(TuneOptions):
    """SFT-Sharpening: best-of-N on the training prompts, then fine-tune on the winners (checkpoints, --resume)."""

    n: int = 50
    """Best-of-N draws per training prompt (paper: 50)."""
    adaptive_delta: float | None = None
    """Use the adaptive rule of App. D with mu = ln(2/delta), delta in (0, 1), instead of a fixed --n."""
    max_n: int = 200
    """Cap on draws per prompt under the adaptive rule."""
    eval_samples: int = 4
    """Temperature-1 samples per prompt when measuring the result (trap task / prompts with answers)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _int_ge("n", self.n, 1)
        _int_ge("max_n", self.max_n, 1)
        _int_ge("eval_samples", self.eval_samples, 1)
        if self.adaptive_delta is not None and not (0 < self.adaptive_delta < 1):
            raise ValueError(f"adaptive_delta must be in (0, 1), got {self.adaptive_delta!r}")


@dataclass(kw_only=True)
class RlhfOptions(TuneOptions):
    """RLHF-Sharpening: Eq. (8) on base pairs, or online XPO with --xpo --alpha (checkpoints, --resume)."""

    beta: float = 0.5
    """KL coefficient beta > 0 (smaller is sharper; the optimum is pi_base^(1+1/beta)/Z)."""
    xpo: bool = False
    """Online exploration with XPO (App. J.2) instead of offline Eq. (8)."""
    alpha: float = 0.0
    """XPO optimism coefficient alpha >= 0 (tune it on validation J_beta)."""
    iterations: int = 10
    """XPO iterations."""
    prompts_per_iteration: int = 32
    """XPO: new pairs per iteration."""
    steps_per_iteration: int = 20
    """XPO: optimiser steps on the growing data set after each iteration."""
    pairs_per_prompt: int = 1
    """Offline: base pairs per prompt (Eq. 8 uses one)."""
    epochs: int = 3
    """Offline Eq. (8) epochs over the pairs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _pos("beta", self.beta)
        if isinstance(self.alpha, bool) or not math.isfinite(self.alpha) or self.alpha < 0:
            raise ValueError(f"alpha must be a finite number >= 0, got {self.alpha!r}")
        if self.alpha > 0 and not self.xpo:
            raise ValueError("--alpha is XPO's optimism coefficient: add --xpo (or drop --alpha)")
        for f in ("iterations", "prompts_per_iteration", "steps_per_iteration", "pairs_per_prompt"):
            _int_ge(f, getattr(self, f), 1)


@dataclass(kw_only=True)
class ReportOptions(CommonOptions, SeedOption, ModelDataOptions):
    """How sharp a model is on a prompt file: mass on the mode, (eps, delta)-sharpness, coverage, greedy."""

    policy: str | None = None
    """The model to measure (a folder or id; a PEFT adapter folder is applied to --model). Default: --model."""
    n: int = 16
    """Samples per prompt for the sampled estimates (free text)."""
    delta: float = 0.5
    """delta of Def. 3.1, in (0, 1)."""
    batch_size: int = 64
    """Sequences per generate call / scoring forward."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _int_ge("n", self.n, 1)
        _int_ge("batch_size", self.batch_size, 1)
        if isinstance(self.delta, bool) or not (0 < self.delta < 1):
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")


@dataclass(kw_only=True)
class DemoOptions(CommonOptions, SeedOption):
    """A one-minute look at sharpening on the trap task (cached base; the first run pre-trains it, ~3-4 CPU-min)."""

    prompts: int = 6
    """Test prompts to show."""
    n: int = 16
    """Best-of-N draws."""

    def __post_init__(self) -> None:
        _int_ge("prompts", self.prompts, 1)
        _int_ge("n", self.n, 1)


@dataclass(kw_only=True)
class SharpeningReproduceOptions(ReproduceOptions):
    """Reproduce the paper's claims on the trap-arithmetic task at CPU scale (writes results.json / results.md)."""

    workers: int | None = None
    """Worker processes for the jobs (bases, seeds, sweep, XPO, real text; default: the CPUs, at most the
    jobs); 1 runs them in this process."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (OUT/records/); changed settings are refused. The
    pre-trained bases always come from the user cache."""

    def __post_init__(self) -> None:
        if self.workers is not None:
            _int_ge("workers", self.workers, 1)
