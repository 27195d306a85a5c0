"""Configuration dataclasses: CREAM's defaults (paper / official README, spec §1.6) and the CLI commands.

Only dataclasses live here (no torch import), so ``iclr25-cream --help`` stays light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption
from iclr25.core.lm.loading import ModelLoadOptions

__all__ = [
    "TrainConfig",
    "CreamConfig",
    "SftConfig",
    "SampleConfig",
    "RewardConfig",
    "ConsistencyConfig",
    "DpoConfig",
    "LoopConfig",
    "EvaluateConfig",
    "DemoConfig",
    "CreamReproduceOptions",
    "check_float",
]

Method = Literal["avg", "dyn", "srlm", "oracle"]
Backend = Literal["transformers", "openai-chat", "openai-completions"]


def check_float(owner: str, name: str, value: Any, rule: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite real number obeying ``rule``.

    ``rule`` is one of ``">0"``, ``">=0"``, ``"[0,1]"``, ``"[0,1)"``, ``"(0,1]"``, ``"any"``.
    """
    ok_type = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok_type or not math.isfinite(value):
        raise ValueError(f"{owner}.{name}={value!r} must be a finite number")
    tests = {">0": value > 0, ">=0": value >= 0, "[0,1]": 0 <= value <= 1, "[0,1)": 0 <= value < 1,
             "(0,1]": 0 < value <= 1, "any": True}
    if not tests[rule]:
        words = {">0": "> 0", ">=0": ">= 0", "[0,1]": "in [0, 1]", "[0,1)": "in [0, 1)", "(0,1]": "in (0, 1]"}
        raise ValueError(f"{owner}.{name}={value!r} must be {words[rule]}")


def _check_int(owner: str, name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{owner}.{name}={value!r} must be an integer >= {low}")


def _check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{owner}.{name}={value!r} must be one of {list(choices)}")


def _check_temperature(owner: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{owner}.temperature={value!r} must be finite and >= 0 (0 = greedy)")


@dataclass(kw_only=True)
class _Optimiser:
    """The optimiser fields a training stage (:class:`TrainConfig`), the loop (:class:`CreamConfig`)
    and the ``sft``/``dpo`` commands share, with one validation."""

    lr: float = 1e-6
    """Peak learning rate, AdamW (paper DPO: 1e-6)."""
    epochs: float = 1.0
    """Passes over the data, fractions allowed (paper DPO: 1)."""
    batch_size: int = 4
    """Examples (DPO: pairs) per device per step (official: 4 on each of 8 GPUs)."""
    grad_accum: int = 1
    """Gradient-accumulation steps."""
    lr_scheduler: Literal["cosine", "linear", "constant"] = "cosine"
    """Schedule after warm-up (official: cosine)."""
    warmup_ratio: float = 0.1
    """Linear warm-up share of the steps (official: 0.1)."""
    weight_decay: float = 0.01
    """AdamW weight decay (official: 0.01)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip (official: 1.0; 0 = none)."""
    lora: bool = False
    """Train LoRA adapters (peft, the [peft] extra) instead of all weights; merged at the end of a stage."""
    lora_r: int = 32
    """LoRA rank (official: 32)."""
    lora_alpha: int = 64
    """LoRA alpha (official: 64)."""
    lora_dropout: float = 0.1
    """LoRA dropout (official: 0.1)."""

    def _check_optimiser(self, owner: str) -> None:
        check_float(owner, "lr", self.lr, ">0")
        check_float(owner, "epochs", self.epochs, ">0")
        check_float(owner, "warmup_ratio", self.warmup_ratio, "[0,1]")
        check_float(owner, "weight_decay", self.weight_decay, ">=0")
        check_float(owner, "max_grad_norm", self.max_grad_norm, ">=0")
        check_float(owner, "lora_dropout", self.lora_dropout, "[0,1)")
        for n in ("batch_size", "grad_accum", "lora_r", "lora_alpha"):
            _check_int(owner, n, getattr(self, n), 1)
        _check_choice(owner, "lr_scheduler", self.lr_scheduler, ("cosine", "linear", "constant"))


def _train_config(src: Any, **fixed: Any) -> TrainConfig:
    """The :class:`TrainConfig` of ``src``'s same-named fields, ``fixed`` overriding them."""
    kw = {f.name: getattr(src, f.name) for f in fields(TrainConfig) if hasattr(src, f.name) and f.name not in fixed}
    return TrainConfig(**kw, **fixed)


@dataclass(kw_only=True)
class TrainConfig(_Optimiser):
    """One training stage (SFT or DPO) run by :mod:`iclr25.cream.training`."""

    max_length: int | None = 2048
    """Most tokens per sequence (longer responses are cut and counted)."""
    beta: float = 0.1
    """DPO temperature beta (DPO stages only; paper: 0.1)."""
    seed: int = 0
    """Data-order seed."""
    lora_target_modules: str = "all-linear"
    """peft target_modules: 'all-linear' or a comma-separated list of module names."""
    bf16: bool = False
    """bf16 mixed precision (accelerate)."""
    chat_template: bool = False
    """Wrap prompts with the tokenizer's chat template (one user turn)."""
    checkpoint_every: int = 0
    """Write a resumable checkpoint every this many optimiser steps (0: at epoch ends only)."""
    disable_dropout: bool = True
    """DPO stages: set every dropout probability of the policy (model and LoRA) to 0, as TRL's
    DPOConfig.disable_dropout does by default, so the policy at initialisation equals the dropout-free reference
    (loss log 2); --no-disable-dropout keeps dropout on in the policy forward."""
    device: str = "auto"
    """auto|cpu|cuda (under `accelerate launch` the launcher decides)."""

    def __post_init__(self) -> None:
        o = "TrainConfig"
        self._check_optimiser(o)
        check_float(o, "beta", self.beta, ">0")
        _check_int(o, "checkpoint_every", self.checkpoint_every, 0)
        if self.max_length is not None:
            _check_int(o, "max_length", self.max_length, 2)


@dataclass(kw_only=True)
class CreamConfig(_Optimiser):
    """CREAM's self-rewarding loop (spec §1.5) with the paper's defaults (official README/config, §1.6).

    Use :meth:`toy` for the CPU-scale addition task of the spec (§4).
    """

    method: Method = "avg"
    """avg: set-level C (CREAM); dyn: per-prompt C_j (CREAM); srlm: C = 1 (self-rewarding DPO baseline);
    oracle: pairs ranked by a true utility (needs one)."""
    iterations: int = 3
    """T, self-rewarding rounds after SFT (M2..M4)."""
    n_samples: int = 5
    """N, responses sampled per prompt."""
    temperature: float = 0.8
    """Sampling temperature."""
    top_p: float = 0.95
    """Nucleus-sampling mass."""
    max_new_tokens: int = 768
    """Most tokens per sampled response."""
    consistency_method: Literal["kendall", "spearman"] = "kendall"
    """Rank correlation behind C (paper: Kendall tau)."""
    reward_reference: Literal["base", "previous"] = "base"
    """Reward reference: base = fixed M0 (r_t = log pi_t - log pi_0, our reading of the official workflow);
    previous = the previous iteration's model (r_t = log pi_t - log pi_{t-1}; an ablation)."""
    reward_batch_size: int = 6
    """Sequences per scoring forward pass (official: 6)."""
    reward_max_length: int = 4096
    """Most tokens per scored sequence (official: 4096)."""
    beta: float = 0.1
    """DPO beta (paper: 0.1)."""
    max_length: int = 2048
    """Most tokens per training sequence (official SFT: 2048)."""
    sft_epochs: float = 5.0
    """SFT epochs M0 -> M1 (official: 5)."""
    sft_lr: float = 5e-6
    """SFT learning rate (official: 5e-6)."""
    sft_batch_size: int = 4
    """SFT examples per device per step (official: 4)."""
    bf16: bool = False
    """bf16 mixed precision in training."""
    chat_template: bool = False
    """Wrap prompts in the tokenizer's chat template (chat models)."""
    measure_consistency: bool = True
    """Also compute C for srlm/oracle runs (a diagnostic; they do not use it)."""
    disable_dropout: bool = True
    """DPO stages: set every dropout probability of the policy (model and LoRA) to 0, as TRL's
    DPOConfig.disable_dropout does by default, so the policy at initialisation equals the dropout-free reference
    (loss log 2); --no-disable-dropout keeps dropout on in the policy forward."""
    min_sft_gain: float = 0.1
    """The loop warns when M1's metric beats M0's by less than this (SFT learnt too little to amplify)."""
    seed: int = 0
    """Seed of sampling and data order."""

    def __post_init__(self) -> None:
        o = "CreamConfig"
        _check_choice(o, "method", self.method, ("avg", "dyn", "srlm", "oracle"))
        _check_choice(o, "reward_reference", self.reward_reference, ("base", "previous"))
        _check_choice(o, "consistency_method", self.consistency_method, ("kendall", "spearman"))
        _check_int(o, "iterations", self.iterations, 1)
        _check_int(o, "n_samples", self.n_samples, 2)
        _check_temperature(o, self.temperature)
        self._check_optimiser(o)
        check_float(o, "top_p", self.top_p, "(0,1]")
        check_float(o, "beta", self.beta, ">0")
        check_float(o, "sft_lr", self.sft_lr, ">0")
        check_float(o, "sft_epochs", self.sft_epochs, ">=0")
        check_float(o, "min_sft_gain", self.min_sft_gain, "any")
        for n in ("max_new_tokens", "reward_batch_size", "sft_batch_size"):
            _check_int(o, n, getattr(self, n), 1)
        _check_int(o, "reward_max_length", self.reward_max_length, 2)
        _check_int(o, "max_length", self.max_length, 2)
        _check_int(o, "seed", self.seed, 0)

    @classmethod
    def toy(cls, **overrides: Any) -> CreamConfig:
        """The CPU-scale addition task's settings (spec §4.1-4.2): N = 5 samples at temperature 1.0
        over the digit tokens, DPO with beta 0.1, AdamW lr 5e-5 (constant: the spec names no schedule),
        batch 32, one epoch per round; SFT 20 epochs, lr 5e-4, batch 32. Other values keep the paper's
        defaults."""
        base = dict(n_samples=5, temperature=1.0, top_p=1.0, max_new_tokens=2, reward_batch_size=2048,
                    reward_max_length=16, lr=5e-5, batch_size=32, max_length=16, sft_epochs=20.0, sft_lr=5e-4,
                    sft_batch_size=32, lr_scheduler="constant", warmup_ratio=0.0)
        base.update(overrides)
        return cls(**base)

    def dpo_train(self, *, round_index: int = 1, device: str = "auto") -> TrainConfig:
        """The :class:`TrainConfig` of DPO round ``round_index`` (its data-order seed differs per round)."""
        return _train_config(self, seed=self.seed * 1000 + round_index, device=device)

    def sft_train(self, *, device: str = "auto") -> TrainConfig:
        """The :class:`TrainConfig` of the SFT stage M0 -> M1."""
        return replace(self.dpo_train(round_index=0, device=device), lr=self.sft_lr, epochs=self.sft_epochs,
                       batch_size=self.sft_batch_size)

    def generation(self, *, seed: int | None = None, greedy: bool = False):
        """The core :class:`~iclr25.core.lm.GenerationConfig` for sampling (or greedy evaluation)."""
        from iclr25.core.lm.generation import GenerationConfig

        return GenerationConfig(max_new_tokens=self.max_new_tokens, temperature=0.0 if greedy else self.temperature,
                                top_p=1.0 if greedy else self.top_p, seed=seed)


# ---------------------------------------------------------------------------------------------
# CLI commands


@dataclass(kw_only=True)
class _Model(ModelLoadOptions):
    bf16: bool = False
    """Shorthand for --dtype bfloat16 (and bf16 mixed precision when training)."""

    def load_options(self) -> dict[str, Any]:
        kw = self.load_kwargs()
        if self.bf16 and kw["dtype"] == "auto":
            kw["dtype"] = "bfloat16"
        return kw


@dataclass(kw_only=True)
class _Train(_Optimiser):
    max_length: int = 2048
    """Most tokens per sequence."""
    chat_template: bool = False
    """Wrap prompts in the tokenizer's chat template."""
    checkpoint_every: int = 0
    """Checkpoint every this many steps (0: at epoch ends)."""
    resume: bool = False
    """Continue from the checkpoint in --out."""

    def train_config(self, *, beta: float = 0.1, seed: int = 0, bf16: bool = False,
                     device: str = "auto") -> TrainConfig:
        """The :class:`TrainConfig` these flags describe."""
        return _train_config(self, beta=beta, seed=seed, bf16=bf16, device=device)


@dataclass(kw_only=True)
class SftConfig(CommonOptions, SeedOption, _Model, _Train):
    """Supervised fine-tuning M0 -> M1 on prompt/response JSONL (loss on response tokens only).
    Writes OUT/model (save_pretrained)."""

    model: str
    """Base model M0: a local folder or a Hugging Face id."""
    data: Path
    """SFT seed data: JSONL with fields prompt, response."""
    lr: float = 5e-6
    """Learning rate (official SFT: 5e-6)."""
    epochs: float = 5.0
    """Epochs (official SFT: 5)."""

    def __post_init__(self) -> None:
        self.train_config()


@dataclass(kw_only=True)
class SampleConfig(CommonOptions, SeedOption, _Model):
    """Sample N responses per prompt (Algorithm line 3). Writes OUT/samples.jsonl (id, prompt, responses)."""

    prompts: Path
    """Unlabeled prompt pool: JSONL with field prompt (id optional)."""
    model: str | None = None
    """Policy: a local folder or a Hugging Face id (transformers backend), or the served model name."""
    n: int = 5
    """N, responses per prompt (paper: 5)."""
    temperature: float = 0.8
    """Sampling temperature (paper: 0.8)."""
    top_p: float = 0.95
    """Nucleus mass (paper: 0.95)."""
    max_new_tokens: int = 768
    """Most new tokens per response (official: 768)."""
    backend: Backend = "transformers"
    """transformers (local), openai-chat or openai-completions (a vLLM / OpenAI-compatible server)."""
    base_url: str | None = None
    """Server URL for the openai-* backends, e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL)."""
    served_model: str | None = None
    """Model name the server expects (default: --model)."""
    concurrency: int = 8
    """Requests in flight (openai-* backends)."""
    batch_size: int = 16
    """Prompts per generate call (transformers backend)."""
    chat_template: bool = False
    """Wrap prompts in the chat template (transformers backend)."""
    limit: int | None = None
    """Use only the first LIMIT prompts."""

    def __post_init__(self) -> None:
        _check_int("sample", "n", self.n, 2)
        _check_temperature("sample", self.temperature)
        check_float("sample", "top_p", self.top_p, "(0,1]")
        _check_int("sample", "max_new_tokens", self.max_new_tokens, 1)
        _check_int("sample", "batch_size", self.batch_size, 1)
        _check_int("sample", "concurrency", self.concurrency, 1)
        if self.model is None and self.served_model is None:
            raise ValueError("sample: give --model (a local model, or the served model's name)")


@dataclass(kw_only=True)
class RewardConfig(CommonOptions, _Model):
    """Score samples with the DPO implicit reward log pi(y|x) - log pi_ref(y|x) (Algorithm lines 4-5).
    Writes OUT/rewards.jsonl (id, rewards)."""

    model: str
    """The model whose reward is computed (pi_t): a local folder or a Hugging Face id."""
    samples: Path
    """samples.jsonl from `sample`."""
    ref: str | None = None
    """Reference model (e.g. the base M0); omit for log pi(y|x) alone (with --normalize: the M0 reward)."""
    normalize: bool = False
    """Length-normalise (mean over response tokens): the M0 reward of round 1."""
    batch_size: int = 6
    """Sequences per forward pass (official: 6)."""
    max_length: int = 4096
    """Most tokens per sequence (official: 4096)."""
    chat_template: bool = False
    """Wrap prompts in the chat template."""

    def __post_init__(self) -> None:
        _check_int("reward", "batch_size", self.batch_size, 1)
        _check_int("reward", "max_length", self.max_length, 2)


@dataclass(kw_only=True)
class ConsistencyConfig(CommonOptions):
    """Consistency C_j between two iterations' rewards and the (best, worst) pairs (Algorithm lines 6-8).
    Writes OUT/consistency.jsonl (id, c) and OUT/pairs.jsonl (prompt, chosen, rejected, c)."""

    samples: Path
    """samples.jsonl."""
    cur: Path
    """rewards.jsonl of the current model (r_t)."""
    prev: Path | None = None
    """rewards.jsonl of the previous iteration (r_{t-1}); omit for SRLM pairs (c = 1)."""
    method: Literal["kendall", "spearman"] = "kendall"
    """Rank correlation (paper: Kendall)."""
    mode: Literal["avg", "dyn"] = "dyn"
    """c written on each pair: dyn = the prompt's C_j, avg = the set mean (each pair also carries c_avg)."""


@dataclass(kw_only=True)
class DpoConfig(CommonOptions, SeedOption, _Model, _Train):
    """One CREAM/DPO stage on a pairs file: minimise -[c log s(h) + (1-c) log s(-h)] from the model with
    itself as frozen reference (Algorithm line 9). Writes OUT/model."""

    model: str
    """Starting model pi_t (also the reference): a local folder or a Hugging Face id."""
    pairs: Path
    """pairs.jsonl (prompt, chosen, rejected, c)."""
    mode: Literal["avg", "dyn", "srlm"] = "dyn"
    """avg: every pair gets the set-level mean C; dyn: each pair's own c; srlm: c = 1 (plain DPO)."""
    beta: float = 0.1
    """DPO beta (paper: 0.1)."""
    lr: float = 1e-6
    """Learning rate (paper: 1e-6)."""
    disable_dropout: bool = True
    """DPO stages: set every dropout probability of the policy (model and LoRA) to 0, as TRL's
    DPOConfig.disable_dropout does by default, so the policy at initialisation equals the dropout-free reference
    (loss log 2); --no-disable-dropout keeps dropout on in the policy forward."""

    def __post_init__(self) -> None:
        self.train_config(beta=self.beta)


@dataclass(kw_only=True)
class LoopConfig(CommonOptions, _Model, CreamConfig):
    """The whole loop: SFT (unless --sft-model), then T rounds of sample -> reward -> consistency -> DPO.
    --task addition runs the CPU toy task end to end. OUT holds one folder per round; --resume restarts
    at the first unfinished round."""

    task: Literal["custom", "addition"] = "custom"
    """custom: your --model/--sft-data/--prompts; addition: the toy task (spec §4, all data built in)."""
    model: str | None = None
    """Base model M0 (reward reference): a local folder or a Hugging Face id."""
    sft_data: Path | None = None
    """SFT seed data JSONL (prompt, response)."""
    sft_model: str | None = None
    """An existing M1 (skip SFT)."""
    prompts: Path | None = None
    """Unlabeled prompt pool JSONL (prompt, id optional), split into T equal parts (one per round)."""
    eval_data: Path | None = None
    """Optional evaluation JSONL (GSM8K-style question/answer, or question/choices/answer) after each round."""
    eval_task: Literal["gsm8k", "choice"] = "gsm8k"
    """Format of --eval-data."""
    eval_limit: int | None = None
    """Evaluate on the first N items only."""
    backend: Backend = "transformers"
    """Sampler: transformers (local), openai-chat or openai-completions (a vLLM server that serves the
    current policy; you restart it with each round's model)."""
    base_url: str | None = None
    """Server URL for the openai-* backends."""
    generate_batch_size: int = 16
    """Prompts per generate call (transformers backend)."""
    resume: bool = False
    """Continue in --out: finished rounds are kept, the first unfinished round restarts."""

    def __post_init__(self) -> None:
        CreamConfig.__post_init__(self)
        if self.task == "custom":
            if self.model is None or self.prompts is None or (self.sft_data is None and self.sft_model is None):
                raise ValueError("loop: give --model (M0), --prompts and --sft-data (or --sft-model), or use "
                                 "--task addition for the toy task")
        if self.method == "oracle" and self.task != "addition":
            raise ValueError("loop: method oracle needs a true utility; only --task addition has one")


@dataclass(kw_only=True)
class EvaluateConfig(CommonOptions, _Model):
    """Greedy evaluation: GSM8K exact match (number after ####), multiple choice (letter after Answer:),
    or the toy addition task. Writes OUT/predictions.jsonl and OUT/results.json."""

    model: str
    """Model: a local folder or a Hugging Face id (or the served name with an openai-* backend)."""
    task: Literal["gsm8k", "choice", "addition"] = "gsm8k"
    """Data format."""
    data: Path | None = None
    """Evaluation JSONL (default for gsm8k: the mirrored test set, $ICLR25_DATA/cream/gsm8k_test.jsonl)."""
    limit: int | None = None
    """Evaluate the first N items only."""
    max_new_tokens: int = 512
    """Most new tokens per answer."""
    batch_size: int = 16
    """Prompts per generate call."""
    chat_template: bool = False
    """Wrap the question (after the task's instruction) in the chat template."""
    backend: Backend = "transformers"
    """transformers, openai-chat or openai-completions."""
    base_url: str | None = None
    """Server URL for the openai-* backends."""
    seed: int = 0
    """Addition task only: the split seed (test prompts)."""


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption):
    """A one-minute demo on the toy addition task: M0 and M1 (cached), one round of SRLM vs CREAM-dyn."""

    iterations: int = 1
    """Rounds to run."""


@dataclass(kw_only=True)
class CreamReproduceOptions(ReproduceOptions):
    """Reproduce CREAM's claims on the toy addition task; writes results.json/md, metrics.json, metrics.png."""

    resume: bool = False
    """Keep the (regime, seed) jobs an earlier run in OUT finished (OUT/records/*.json, one per job, written when
    it ends) and run only the missing ones; changed settings are refused."""
    workers: int = 2
    """worker processes (one thread each; seeds run in parallel; 1: in this process)"""
    regimes: tuple[str, ...] | None = None
    """Full run only: the extra regimes to run (previous-reference, t-4, hard-n-8-temperature-1-2; default: all)."""

    def __post_init__(self) -> None:
        _check_int("reproduce", "workers", self.workers, 1)
