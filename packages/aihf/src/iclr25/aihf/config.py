"""Configs (dataclasses; the CLI is generated from them with tyro). Light: imports neither numpy nor torch.

:class:`AIHFConfig` holds the method's hyperparameters (the bilevel objective of the spec, "Bi-level
objective", and the single-loop algorithm, "Algorithm"); the command configs add the task, the data and the
shared flags (:class:`iclr25.core.config.CommonOptions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["AIHFConfig", "TinyLMConfig", "TextOptions", "TrainConfig", "EvaluateConfig", "DemoConfig",
           "ReproduceConfig", "MujocoConfig", "check_finite", "check_count"]


def check_finite(name: str, value: float, *, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False, hi_open: bool = False) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number inside the given bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{name}={value} must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise ValueError(f"{name}={value} must be {'<' if hi_open else '<='} {hi}")


def check_count(name: str, value: int, lo: int = 1, *, why: str = "") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an integer ``>= lo`` (``why`` says what a smaller
    value would do, e.g. "0 would train nothing")."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}" + (f" ({why})" if why else ""))


@dataclass(kw_only=True)
class AIHFConfig:
    """Hyperparameters of AIHF (spec "Bi-level objective" and "Algorithm").

    The upper level maximises ``w * L_D(theta) + (1 - w) * L_P(theta)`` (demonstration likelihood of the induced
    policy, Bradley-Terry likelihood of the preferences); the lower level is the KL-regularised policy
    ``pi_theta ∝ pi_ref exp(Q_theta / beta)``. Defaults are the spec's (its bandit / gridworld prototype), the
    paper's exact values could not be read (README, deviation 1).
    """

    w: float = 0.5
    """Weight of the demonstration term, in [0, 1]: 0 = RLHF (preferences only), 1 = ML-IRL (demonstrations only;
    SFT in the tabular one-step case)."""
    beta: float = 1.0
    """KL (entropy) coefficient beta > 0 of the lower level; the demonstration gradient is scaled by 1/beta."""
    reward_lr: float = 0.2
    """Reward step size alpha of the single loop (step 2.3)."""
    policy_lr: float = 0.5
    """Mirror-step size eta in (0, 1] of the tabular policy step (bandit); 1 = jump to the soft-optimal policy."""
    policy_steps: int = 1
    """K: policy-update steps per outer iteration (bandit: mirror steps; gridworld: warm-started soft Bellman
    backups); 0 = the exact lower level (bandit: the soft-optimal policy itself; gridworld: soft value iteration
    to convergence)."""
    iters: int = 150
    """T: outer iterations of the single loop (>= 1; with --resume, the total to reach)."""
    l2: float = 1e-4
    """L2 coefficient lambda on the reward parameters (lambda * ||theta||^2 is added to the minimised loss)."""
    demo_loss: Literal["irl", "logistic"] = "irl"
    """Demonstration term: 'irl' = the paper's linear ML-IRL gradient (1/beta)(grad r(y_E) - grad r(y'));
    'logistic' = the authors' code's pair loss -log sigmoid(r(y_E) - r(y'))."""
    weighting: Literal["mean", "per_pair"] = "mean"
    """'mean' = the paper's w : (1 - w) on averaged losses; 'per_pair' = the authors' code's per-pair weights in one
    concatenated set, (N_D w) : (N_P (1 - w))."""
    agent_samples: int = 0
    """Agent samples per demonstration drawn from the current policy at each iteration; 0 = the exact expectation
    (tabular tasks only)."""
    pref_batch: int | None = None
    """Preference minibatch per reward step (None: all pairs)."""
    demo_batch: int | None = None
    """Demonstration minibatch per reward step (None: all demonstrations)."""

    def __post_init__(self) -> None:
        check_finite("w", self.w, lo=0.0, hi=1.0)
        check_finite("beta", self.beta, lo=0.0, lo_open=True)
        check_finite("reward_lr", self.reward_lr, lo=0.0, lo_open=True)
        check_finite("policy_lr", self.policy_lr, lo=0.0, hi=1.0, lo_open=True)
        check_finite("l2", self.l2, lo=0.0)
        check_count("policy_steps", self.policy_steps, 0)
        check_count("agent_samples", self.agent_samples, 0)
        check_count("iters", self.iters, 1, why="T outer iterations; 0 would train nothing")
        for name in ("pref_batch", "demo_batch"):
            v = getattr(self, name)
            if v is not None:
                check_count(name, v, 1, why="or None for all")
        if self.demo_loss not in ("irl", "logistic"):
            raise ValueError(f"demo_loss must be 'irl' or 'logistic', got {self.demo_loss!r}")
        if self.weighting not in ("mean", "per_pair"):
            raise ValueError(f"weighting must be 'mean' or 'per_pair', got {self.weighting!r}")


@dataclass(kw_only=True)
class TinyLMConfig:
    """The tiny-LM experiment and the implicit (DPO-form) trainer (spec "CPU-scale reproduction" C)."""

    rounds: int = 3
    """AIHF-DPO rounds (each: sample agent responses from pi_old, cache reference / pi_old log-probs, train)."""
    epochs: int = 2
    """Passes over the demonstration/preference pairs per round."""
    lm_lr: float = 1e-3
    """AdamW learning rate of the policy."""
    lm_batch: int = 64
    """Pairs per optimiser step (each step: a demonstration-vs-agent pair and a preference pair per example)."""
    dpo_beta: float = 0.5
    """beta of the implicit reward beta log(pi / pi_ref) (also the task's KL coefficient for the SIR demos)."""
    variant: Literal["aihf-dpo", "self-play"] = "aihf-dpo"
    """Reference of the demonstration term: 'aihf-dpo' = pi_ref (the initial model); 'self-play' = pi_old, the
    iterate at the start of the round (Self-Play-AIHF). Agent samples come from pi_old in both."""
    sft_epochs: int = 3
    """SFT epochs on the demonstrations (the SFT and SFT->DPO baselines; >= 1)."""
    n_eval: int = 256
    """Samples drawn to measure mean true reward and KL to pi_ref."""
    vocab: int = 24
    """Content tokens of the task's own vocabulary (plus pad and BOS/EOS)."""
    n_good: int = 6
    """How many content tokens are 'good' (true reward = count of good tokens in the response)."""
    length: int = 8
    """Response length in tokens."""
    n_prompts: int = 4
    """Distinct one-token prompts."""

    def __post_init__(self) -> None:
        for name in ("rounds", "epochs", "sft_epochs", "lm_batch", "n_eval", "vocab", "n_good", "length", "n_prompts"):
            check_count(name, getattr(self, name), 1, why="0 would train or measure nothing" if name in (
                "rounds", "epochs", "sft_epochs", "n_eval") else "")
        if self.n_good >= self.vocab:
            raise ValueError(f"n_good={self.n_good} must be < vocab={self.vocab}")
        check_finite("lm_lr", self.lm_lr, lo=0.0, lo_open=True)
        check_finite("dpo_beta", self.dpo_beta, lo=0.0, lo_open=True)
        if self.variant not in ("aihf-dpo", "self-play"):
            raise ValueError(f"variant must be 'aihf-dpo' or 'self-play', got {self.variant!r}")


@dataclass(kw_only=True)
class TextOptions:
    """Your own model and data (``--task text``)."""

    policy: str | None = None
    """Policy model: a local folder (save_pretrained) or a Hugging Face id, e.g. EleutherAI/pythia-1b-deduped."""
    reward_model: str | None = None
    """Explicit form: reward-model backbone (local folder or id, e.g. EleutherAI/pythia-1.4b); without it the implicit
    (DPO) form is trained."""
    demos: Path | None = None
    """Demonstrations JSONL: {"prompt", "response"} per line."""
    prefs: Path | None = None
    """Preferences JSONL: {"prompt", "chosen", "rejected"}, or HH-style {"chosen", "rejected"} dialogues (.jsonl or
    .jsonl.gz; split at the last '\\n\\nAssistant:')."""
    hh: bool = False
    """Use the mirrored Anthropic-HH harmless test pairs ($ICLR25_DATA/aihf) as preferences and their chosen responses
    as demonstrations (plumbing; red-teaming content, never printed)."""
    agent_samples_file: Path | None = None
    """Agent samples JSONL {"prompt", "response"} for the demonstration prompts (default: sample from the policy)."""
    agent_endpoint: str | None = None
    """OpenAI-compatible server (e.g. vLLM, http://localhost:8000/v1) that serves the policy for agent samples."""
    agent_model: str | None = None
    """Model name on --agent-endpoint (default: --policy)."""
    drop_invalid: bool = False
    """Drop preference pairs whose chosen and rejected are identical (the count is logged) instead of failing."""
    max_pairs: int | None = None
    """Use at most this many preference pairs (and demonstrations)."""
    max_length: int = 256
    """Most tokens per prompt + response (longer sequences lose prompt tokens from the left; never the response)."""
    max_new_tokens: int = 64
    """Tokens per agent sample."""
    lora_r: int = 0
    """LoRA rank for the policy (and reward model) through peft; 0 = full fine-tuning."""
    lora_alpha: int = 16
    """LoRA alpha."""
    lr: float = 1e-6
    """Learning rate (the authors' code: 1e-6 for reward model and PPO)."""
    batch_size: int = 4
    """Per-device pairs per step (the authors' code: 4)."""
    grad_accum: int = 1
    """Gradient-accumulation steps (accelerate)."""
    policy_step: Literal["ppo", "none"] = "ppo"
    """Explicit form: the policy step after each reward step ('ppo' = the built-in KL-penalised PPO step; plug your own
    through iclr25.aihf.text.PolicyStep)."""
    kl_coef: float = 0.05
    """KL penalty coefficient to pi_ref in the PPO step (the authors' code: 0.05 initial)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weights dtype (core load_causal_lm)."""
    device_map: str | None = None
    """'auto' spreads a large model over the visible GPUs (accelerate)."""
    load_in_4bit: bool = False
    """4-bit NF4 weights (bitsandbytes, CUDA; use with --lora-r)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass."""
    disable_dropout: bool = True
    """Set the policy's dropout to 0 (TRL's default for preference losses): the implicit loss compares the policy's
    log-probs with reference log-probs cached without dropout, so with dropout on it is not log 2 at initialisation
    (policy == reference). --no-disable-dropout keeps the model's dropout (the reward model's is never changed)."""

    def __post_init__(self) -> None:
        check_count("max_length", self.max_length, 2, why="a prompt token and a response token")
        check_count("max_new_tokens", self.max_new_tokens, 1, why="0 would make empty agent samples")
        check_count("lora_r", self.lora_r, 0, why="0 = full fine-tuning")
        check_count("lora_alpha", self.lora_alpha, 1)
        check_count("batch_size", self.batch_size, 1)
        check_count("grad_accum", self.grad_accum, 1, why="1 = no accumulation")
        if self.max_pairs is not None:
            check_count("max_pairs", self.max_pairs, 1, why="or None for all")


@dataclass(kw_only=True)
class TrainConfig(CommonOptions, SeedOption, AIHFConfig, TinyLMConfig, TextOptions):
    """Train AIHF (or a baseline) on a synthetic task or on your own model and data."""

    task: Literal["bandit", "gridworld", "tinylm", "text"] = "bandit"
    """bandit (contextual bandit, exact lower level), gridworld (8x8 MDP, soft value iteration), tinylm (tiny GPT-2,
    true reward = count of good tokens), text (your model and JSONL files)."""
    method: Literal["aihf", "rlhf", "irl", "sft", "sft-rlhf", "dpo", "sft-dpo"] = "aihf"
    """aihf (weight --w), rlhf (w = 0), irl (w = 1), sft, sft-rlhf (bandit/gridworld), dpo, sft-dpo (tinylm)."""
    n_demo: int | None = None
    """Demonstrations (default: bandit 400, gridworld 20 trajectories, tinylm 512)."""
    n_pref: int = 10
    """Preference pairs N_P (0 only for methods without a preference term: --method irl|sft, or --w 1)."""
    biased_demos: bool = False
    """Demonstrations from theta_E = theta* + 0.7 noise instead of the optimal policy (bandit)."""
    resume: bool = False
    """Continue from <out>/checkpoint.pt: reward and policy state, optimisers, iteration/round and RNG."""
    checkpoint_every: int = 50
    """Iterations (tabular) between checkpoints; the LM tasks checkpoint after every round."""

    def __post_init__(self) -> None:
        AIHFConfig.__post_init__(self)
        TinyLMConfig.__post_init__(self)
        TextOptions.__post_init__(self)
        check_count("n_pref", self.n_pref, 0)
        if self.n_demo is not None:
            check_count("n_demo", self.n_demo, 1, why="or None for the task's default")
        check_count("checkpoint_every", self.checkpoint_every, 1)
        check_finite("lr", self.lr, lo=0.0, lo_open=True)
        check_finite("kl_coef", self.kl_coef, lo=0.0)
        if self.task == "text" and self.policy is None:
            raise ValueError("--task text needs --policy (a local model folder or a Hugging Face id)")


@dataclass(kw_only=True)
class EvaluateConfig(CommonOptions):
    """Evaluate a train run: regret / true objective (bandit), normalised return (gridworld), mean true reward and
    KL to pi_ref (tinylm), preference accuracy of the learned reward (text)."""

    run: Path
    """The folder written by 'iclr25-aihf train' (holds checkpoint.pt and config.json)."""


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption):
    """A 10-second bandit demo: RLHF, AIHF and SFT->RLHF with 10 preference pairs and 400 demonstrations."""

    n_pref: int = 10
    """Preference pairs."""

    def __post_init__(self) -> None:
        check_count("n_pref", self.n_pref, 1, why="RLHF and AIHF need preference pairs")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (--quick: about 3 CPU-minutes)."""

    resume: bool = False
    """Keep the jobs an earlier run into --out finished (OUT/records/); changed settings are refused."""
    workers: int | None = None
    """Worker processes of the runner (default: the CPUs, at most the number of jobs; 1: in this process)."""


@dataclass(kw_only=True)
class MujocoConfig(CommonOptions, SeedOption):
    """AIHF for continuous control (MuJoCo via gymnasium, the paper's Appendix A.2.1 setting): a reward MLP
    r_theta(s, a) learned from demonstration segments and preference pairs over segments, a SAC policy step.

    Needs the ``[mujoco]`` extra. Defaults are the full (GPU) run of the README; the CPU smoke test is
    ``--total-steps 1000 --expert-steps 0 --policy-steps 200 --segment-len 10 --eval-episodes 0``.
    """

    env: str = "Hopper-v5"
    """A gymnasium MuJoCo environment id with Box observations and actions (Hopper-v5, HalfCheetah-v5, ...)."""
    w: float = 0.5
    """Weight of the demonstration term in [0, 1] (0 = RLHF: preferences only; 1 = ML-IRL: demonstrations only)."""
    total_steps: int = 1_000_000
    """Environment steps of the AIHF loop (SAC policy steps; excludes the expert and the data collection)."""
    policy_steps: int = 5_000
    """K: SAC environment steps (one gradient update each) per outer iteration; then one reward step."""
    reward_steps: int = 1
    """Reward-gradient steps per outer iteration (ML-IRL: 1)."""
    expert_steps: int = 1_000_000
    """SAC steps on the TRUE reward to train the demonstrator; 0 = synthetic data from a uniformly random policy
    (smoke tests only: random demonstrations teach nothing)."""
    n_demo: int = 20
    """Demonstration segments (of --segment-len steps) from the demonstrator."""
    n_pref: int = 20
    """Preference pairs of segments from the epsilon-noisy demonstrator, labelled by Bradley-Terry on the true
    discounted segment return (0 only with --w 1)."""
    pref_noise: float = 0.6
    """epsilon: probability that the preference-data policy takes a uniformly random action at a step."""
    segment_len: int = 50
    """L: steps per trajectory segment; R_theta(segment) = sum_t gamma^t r_theta(s_t, a_t)."""
    gamma: float = 0.99
    """Discount of the segment returns and of SAC."""
    beta: float = 0.2
    """Entropy (KL to the uniform pi_ref) coefficient = SAC's fixed temperature alpha; the IRL term is scaled 1/beta."""
    demo_loss: Literal["irl", "logistic"] = "irl"
    """'irl' = the paper's ML-IRL gradient (1/beta)(R(demo) - R(agent)); 'logistic' = -log sigmoid(R(demo) - R(agent))."""
    reward_lr: float = 1e-4
    """Adam learning rate of the reward MLP (ML-IRL: 1e-4)."""
    reward_weight_decay: float = 1e-3
    """Adam weight decay of the reward MLP (ML-IRL: 1e-3)."""
    reward_hidden: tuple[int, ...] = (64, 64)
    """Hidden widths of the reward MLP (ReLU; output clamped to +-reward_clip)."""
    reward_clip: float = 10.0
    """|r_theta| clamp (ML-IRL: 10)."""
    sac_lr: float = 1e-3
    """Adam learning rate of SAC's actor and critics (ML-IRL: 1e-3)."""
    sac_hidden: tuple[int, ...] = (256, 256)
    """Hidden widths of SAC's actor and twin critics."""
    batch_size: int = 100
    """SAC minibatch (ML-IRL: 100)."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    start_steps: int = 1_000
    """First SAC steps with uniformly random actions (of each SAC run: expert and AIHF)."""
    tau: float = 0.005
    """Polyak factor of the target critics."""
    eval_episodes: int = 10
    """Episodes of the deterministic (mean-action) policy scored with the TRUE reward at the end (0 = none)."""
    checkpoint_every: int = 20
    """Outer iterations between checkpoints (and one at the end)."""

    def __post_init__(self) -> None:
        check_finite("w", self.w, lo=0.0, hi=1.0)
        check_finite("beta", self.beta, lo=0.0, lo_open=True)
        check_finite("gamma", self.gamma, lo=0.0, hi=1.0)
        check_finite("pref_noise", self.pref_noise, lo=0.0, hi=1.0)
        check_finite("reward_lr", self.reward_lr, lo=0.0, lo_open=True)
        check_finite("reward_weight_decay", self.reward_weight_decay, lo=0.0)
        check_finite("reward_clip", self.reward_clip, lo=0.0, lo_open=True)
        check_finite("sac_lr", self.sac_lr, lo=0.0, lo_open=True)
        check_finite("tau", self.tau, lo=0.0, hi=1.0, lo_open=True)
        check_count("total_steps", self.total_steps, 1)
        check_count("policy_steps", self.policy_steps, 1)
        check_count("reward_steps", self.reward_steps, 1)
        check_count("expert_steps", self.expert_steps, 0)
        check_count("n_demo", self.n_demo, 0)
        check_count("n_pref", self.n_pref, 0)
        check_count("segment_len", self.segment_len, 1)
        check_count("batch_size", self.batch_size, 1)
        check_count("buffer_size", self.buffer_size, 1)
        check_count("start_steps", self.start_steps, 0)
        check_count("eval_episodes", self.eval_episodes, 0)
        check_count("checkpoint_every", self.checkpoint_every, 1)
        for h in (*self.reward_hidden, *self.sac_hidden):
            check_count("hidden width", h, 1)
        if self.w > 0 and self.n_demo == 0:
            raise ValueError("n_demo=0 with w > 0: the demonstration term has no data; give --n-demo or set --w 0")
        if self.w < 1 and self.n_pref == 0:
            raise ValueError("n_pref=0 with w < 1: the preference term has no data; give --n-pref or set --w 1")
        if self.policy_steps > self.total_steps:
            raise ValueError(f"policy_steps={self.policy_steps} > total_steps={self.total_steps}: no full outer "
                             "iteration would run; lower --policy-steps")


#: packaged presets (``iclr25/aihf/configs/<name>.yaml``): ``--config hh_pythia`` loads the paper's HH setting;
#: ``accelerate_ds`` is a file for ``accelerate launch --config_file`` (:func:`preset_path` gives its path).
PRESETS = ("hh_pythia", "accelerate_ds")


def preset_path(name: str) -> Path:
    """The packaged preset ``name`` (:data:`PRESETS`) as a file path (it ships in the wheel).

    Raises:
        ValueError: ``name`` is not one of :data:`PRESETS`.
        FileNotFoundError: the installed package lacks the file (a broken install; reinstall it).
    """
    from importlib.resources import files

    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; the packaged presets are {list(PRESETS)} (or give a YAML path)")
    res = files("iclr25.aihf") / "configs" / f"{name}.yaml"
    if not res.is_file():
        raise FileNotFoundError(f"the packaged preset {name}.yaml is missing from {res}; reinstall iclr25-aihf")
    return Path(str(res))
