"""Configs (dataclasses; the CLI flags are generated from them with tyro).

Paper defaults are cited; CPU-scale values are marked as such. Derived values (``kl_coef``) are
computed, never taken as flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption
from iclr25.core.lm.loading import ModelLoadOptions

__all__ = ["VBoNConfig", "ModelArgs", "TrainArgs", "EvaluateArgs", "BoNSampleArgs", "ReproduceArgs"]


def check_float(value: float, name: str, *, low: float | None = None, high: float | None = None,
                low_open: bool = True, high_open: bool = False) -> float:
    """Check that a float setting is finite and in its range; ``name`` is the flag shown in the error.

    Raises:
        ValueError: ``"<name> must be a finite number in (low, high], got <value>"`` (bounds as given).
    """
    lo = "" if low is None else f"{'(' if low_open else '['}{low:g}"
    hi = "" if high is None else f"{high:g}{')' if high_open else ']'}"
    rng = f" in {lo or '(-inf'}, {hi or 'inf)'}" if (low is not None or high is not None) else ""
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if not bad and low is not None:
        bad = value <= low if low_open else value < low
    if not bad and high is not None:
        bad = value >= high if high_open else value > high
    if bad:
        raise ValueError(f"{name} must be a finite number{rng}, got {value!r}")
    return float(value)


def check_int(value: int, name: str, low: int) -> int:
    """Check an integer setting is ``>= low``; ``name`` is the flag shown in the error (``ValueError``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


@dataclass
class VBoNConfig:
    """What to optimise and how (vBoN §3 / official ``ppo_sentiments.py``)."""

    method: Literal["vbon", "rlhf"] = "vbon"
    """``vbon``: reward from the BoN objective; ``rlhf``: raw reward ``r`` (the official ``--no-bon``)."""
    n: int = 8
    """BoN ``N`` that vBoN imitates (paper sweeps N via ``beta = 1/(N-1)``; README example beta=0.1 → N=11)."""
    bound: Literal["exact", "l1"] = "exact"
    """``exact``: ``log sum_i C(N,i) F^{N-i} pi_ref^{i-1}`` (Eq. 7); ``l1``: the lower bound ``log F`` (Eq. 9)."""
    scale: Literal["paper", "code"] = "paper"
    """Exact reward divided by ``N-1`` (paper, matches beta = 1/(N-1)) or by ``N`` (official code)."""
    ref_logprob_scope: Literal["continuation", "full"] = "continuation"
    """``log pi_ref(y)`` in the exact reward over the continuation, or over prompt + continuation (official code)."""
    beta: float = 0.1
    """KL coefficient of RLHF (``method=rlhf``); ignored by vBoN, whose coefficient is ``1/(N-1)``."""
    m: int = 64
    """Reference samples per training prompt for the empirical CDF (official: up to ~300; CPU quick: 64)."""
    smoothing: Literal["add_one", "none"] = "add_one"
    """Empirical CDF: official add-one ``(1 + #less)/(M+1)`` or plain ``#less/M``."""
    algo: Literal["rloo", "ppo"] = "rloo"
    """Policy gradient: RLOO (leave-one-out baseline) or PPO-clip epochs on the same advantages (official: PPO)."""
    samples_per_prompt: int = 4
    """Samples per prompt per step (RLOO group size, >= 2)."""
    prompts_per_step: int = 16
    """Prompts per policy step (official batch 32 sequences; CPU: 16 prompts x 4 samples)."""
    steps: int = 40
    """Policy updates (official ``total_steps=10000``; CPU quick: 40, spec §4.2)."""
    lr: float = 3e-4
    """AdamW learning rate (official 3e-5 for GPT-2; the from-scratch tiny LM uses 3e-4)."""
    ppo_epochs: int = 1
    """Optimisation passes per batch with ``algo=ppo`` (official 4)."""
    clip: float = 0.2
    """PPO ratio clip (official 0.2)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    max_new_tokens: int = 24
    """Continuation length (official 40 GPT-2 tokens; CPU: 24 BPE tokens)."""
    temperature: float = 1.0
    """Sampling temperature (official 1.0, ``top_k=0``, ``top_p=1``)."""
    logprob_temperature: Literal["sampling", "one"] = "sampling"
    """Temperature of the policy's log-probs in the update, the PPO ratio and the KL estimate: ``sampling``
    scores at ``temperature`` (the distribution the rollouts are drawn from, as TRL's PPO/RLOO trainers do:
    on-policy); ``one`` scores the untempered policy (the trlx reading: with ``temperature != 1`` the update
    is off-policy, warned). The reference ``pi_ref`` is always scored at temperature 1."""
    disable_dropout: bool = True
    """Set the policy's dropout to 0 (as TRL does), so the update's log-probs equal the rollout's (PPO ratio 1
    on-policy). Rollouts, old log-probs and the KL estimate are always computed in eval mode."""
    seed: Annotated[int, tyro.conf.Suppress] = 0
    """Seed for prompt order and sampling (each rank of a multi-process run derives its own stream). On the
    command line this is the command's ``--seed``."""

    def __post_init__(self) -> None:
        if self.method not in ("vbon", "rlhf"):
            raise ValueError(f"method must be 'vbon' or 'rlhf', got {self.method!r}")
        if self.method == "vbon" and self.n < 2:
            raise ValueError(f"n must be >= 2 for vBoN (got {self.n}); N = 1 is the reference policy itself")
        # the RLHF KL coefficient; vBoN's 1/(N-1) is derived from n
        check_float(self.beta, "beta (--vbon.beta, the RLHF KL coefficient)", low=0.0)
        check_float(self.lr, "lr (--vbon.lr)", low=0.0, high=1.0)
        check_float(self.clip, "clip (--vbon.clip, the PPO ratio clip)", low=0.0, high=1.0, high_open=True)
        check_float(self.max_grad_norm, "max_grad_norm (--vbon.max-grad-norm)", low=0.0)
        check_float(self.temperature, "temperature (--vbon.temperature)", low=0.0, high=100.0)
        if self.samples_per_prompt < 2:
            raise ValueError(f"samples_per_prompt (--vbon.samples-per-prompt) must be >= 2 (RLOO baseline), "
                             f"got {self.samples_per_prompt}")
        for f in ("m", "prompts_per_step", "steps", "max_new_tokens", "ppo_epochs"):
            check_int(getattr(self, f), f"{f} (--vbon.{f.replace('_', '-')})", 1)

    @property
    def kl_coef(self) -> float:
        """KL coefficient: ``1/(N-1)`` for vBoN (Eq. 9), ``beta`` for RLHF."""
        return 1.0 / (self.n - 1) if self.method == "vbon" else self.beta


@dataclass
class ModelArgs(ModelLoadOptions):
    """Which models to use and how to load them (``--dtype``, ``--device-map``, ``--load-in-4bit/8bit``,
    ``--gradient-checkpointing``, through :func:`iclr25.core.lm.load_causal_lm`). Defaults: the embedded
    tiny LM and the TF-IDF reward (CPU scale)."""

    policy: str | None = None
    """HF id or path of the reference/initial policy (paper: ``lvwerra/gpt2-imdb``); default: embedded tiny LM."""
    reward_model: str | None = None
    """HF sequence-classification id (paper: ``lvwerra/distilbert-imdb``); default: TF-IDF logistic regression."""
    reward_label: str = "POSITIVE"
    """Label whose logit is the reward (HF reward model)."""
    lm_size: Literal["quick", "full"] = "quick"
    """Size of the embedded LM: quick 2 layers d=64; full 4 layers d=128."""


@dataclass(kw_only=True)
class TrainArgs(CommonOptions, SeedOption):
    """``iclr25-vbon train``: fine-tune a policy with vBoN (or the RLHF baseline). ``--out`` (default
    ``runs/vbon/train``) receives checkpoint/, metrics.jsonl, config.json, results.json, reward_cdf.jsonl."""

    vbon: VBoNConfig = field(default_factory=VBoNConfig)
    models: Annotated[ModelArgs, tyro.conf.OmitArgPrefixes] = field(default_factory=ModelArgs)
    prompts_file: Path | None = None
    """Training prompts (.txt one per line, or .jsonl with 'prompt'); default: 3-word prefixes of mirrored snippets."""
    num_prompts: int | None = None
    """Training prompts: how many from the mirror (default 32), or the first N of --prompts-file (default: all)."""
    cdf_path: Path | None = None
    """Reward-CDF cache JSONL (official formats accepted); built (and saved in the run folder) when absent."""
    ragged_cdf: bool = False
    """Accept a CDF file whose prompts have different sample counts (each prompt keeps its own M); without it
    unequal counts are an error naming the prompt (never a silent cut to the smallest count)."""
    checkpoint_every: int = 10
    """Checkpoint every this many steps (0: only at the end; ``--save-every`` is a deprecated alias)."""
    resume: bool = False
    """Continue from ``<out>/checkpoint``."""

    def __post_init__(self) -> None:
        if self.num_prompts is not None:
            check_int(self.num_prompts, "--num-prompts", 1)
        check_int(self.checkpoint_every, "--checkpoint-every", 0)


@dataclass(kw_only=True)
class EvaluateArgs(CommonOptions, SeedOption):
    """``iclr25-vbon evaluate``: win rate vs the reference, mean reward, KL to the reference; writes
    ``<out>/eval.json`` (default ``runs/vbon/evaluate``)."""

    checkpoint: Path = Path("runs/vbon/train/checkpoint")
    """Policy to evaluate (a ``save_pretrained`` folder)."""
    models: Annotated[ModelArgs, tyro.conf.OmitArgPrefixes] = field(default_factory=ModelArgs)
    prompts_file: Path | None = None
    num_prompts: int | None = None
    """Eval prompts: how many from the mirror (default 32), or the first N of --prompts-file (default: all)."""
    samples_per_prompt: int = 4
    max_new_tokens: int = 24

    def __post_init__(self) -> None:
        if self.num_prompts is not None:
            check_int(self.num_prompts, "--num-prompts", 1)
        check_int(self.samples_per_prompt, "--samples-per-prompt", 1)
        check_int(self.max_new_tokens, "--max-new-tokens", 1)


@dataclass(kw_only=True)
class BoNSampleArgs(CommonOptions, SeedOption):
    """``iclr25-vbon bon-sample``: inference-time Best-of-N from the reference policy; writes
    ``<out>/bon_samples.jsonl`` (one line per prompt: prompt, best, best_reward, candidates, rewards)."""

    n: int = 8
    models: Annotated[ModelArgs, tyro.conf.OmitArgPrefixes] = field(default_factory=ModelArgs)
    prompts_file: Path | None = None
    num_prompts: int | None = None
    """Prompts: how many from the mirror (default 8), or the first N of --prompts-file (default: all)."""
    max_new_tokens: int = 24
    batch_size: int = 256
    temperature: float = 1.0
    """Sampling temperature of the N candidates (paper 1.0 for IMDB, 0.7 for TL;DR)."""
    backend: Literal["local", "openai"] = "local"
    """Where candidates come from: ``local`` (``--policy`` / the embedded LM, batched ``generate``) or
    ``openai``: an OpenAI-compatible *completions* endpoint such as ``vllm serve`` (needs ``--base-url`` and
    ``--model``; key from ``$OPENAI_API_KEY``, default ``EMPTY``). Rewards are always computed locally."""
    base_url: str | None = None
    """``--backend openai``: the server's ``/v1`` URL, e.g. ``http://127.0.0.1:8000/v1`` (default ``$OPENAI_BASE_URL``)."""
    model: str | None = None
    """``--backend openai``: the model name the server serves (``vllm serve NAME``)."""
    concurrency: int = 8
    """``--backend openai``: requests in flight at once."""
    request_timeout: float = 120.0
    """``--backend openai``: seconds per request."""

    def __post_init__(self) -> None:
        check_int(self.concurrency, "--concurrency", 1)
        check_float(self.request_timeout, "--request-timeout", low=0.0, high=86400.0)
        if self.backend == "openai":
            import os

            if not (self.base_url or os.environ.get("OPENAI_BASE_URL")):
                raise ValueError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1 for "
                                 "`vllm serve`) or $OPENAI_BASE_URL")
            if not self.model:
                raise ValueError("--backend openai needs --model (the name the server serves)")
        elif self.base_url or self.model:
            raise ValueError("--base-url / --model are for --backend openai (the local backend uses --policy)")
        check_int(self.n, "--n", 1)
        if self.num_prompts is not None:
            check_int(self.num_prompts, "--num-prompts", 1)
        check_int(self.max_new_tokens, "--max-new-tokens", 1)
        check_int(self.batch_size, "--batch-size", 1)
        check_float(self.temperature, "--temperature", low=0.0, high=100.0)


@dataclass(kw_only=True)
class ReproduceArgs(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (results.json / results.md / win_rate_vs_kl.png)."""

    workers: int | None = None
    """Processes the two jobs (kl_enumeration, pipeline) run in (default min(2, #CPUs), one torch thread each;
    1: in-process)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (records/<job>.json); changed settings are refused."""
