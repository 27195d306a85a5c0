"""Config dataclasses of the ``iclr25-prereq-tune`` commands (defaults: the official recipes, spec §1.7).

Presets ship in the package (``iclr25/prereq_tune/configs/<name>.yaml``; :data:`PRESETS`, :func:`preset_path`):
``--config tiny_knowledge`` / ``tiny_skill`` (CPU scale), ``llama3_bio_knowledge`` / ``llama3_bio_skill`` /
``llama3_popqa_skill`` (the official recipes); ``deepspeed_zero2`` is an ``accelerate launch --config_file``.
``--model tiny`` is the M0 of the quick synthetic world (packaged). Only standard-library imports here, so
``--help`` stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = [
    "PRESETS",
    "preset_path",
    "ModelOptions",
    "LoraOptions",
    "OptimOptions",
    "FormatOptions",
    "TrainKnowledgeConfig",
    "TrainSkillConfig",
    "EvaluateConfig",
    "GenerateConfig",
    "DemoConfig",
    "PrereqReproduceConfig",
]


#: the packaged presets, by name (``--config NAME``)
PRESETS = ("tiny_knowledge", "tiny_skill", "llama3_bio_knowledge", "llama3_bio_skill", "llama3_popqa_skill",
           "deepspeed_zero2")


def preset_path(name: str) -> Path:
    """The packaged preset ``name`` (one of :data:`PRESETS`) as a file path (:mod:`importlib.resources`).

    Raises:
        ValueError: ``name`` is not a packaged preset.
        FileNotFoundError: the installed package lacks the file (a broken install: reinstall it).
    """
    from importlib.resources import files

    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; the packaged presets are {list(PRESETS)} (or give a YAML path)")
    res = files("iclr25.prereq_tune") / "configs" / f"{name}.yaml"
    if not res.is_file():
        raise FileNotFoundError(f"the packaged preset {name}.yaml is missing from {res}; reinstall iclr25-prereq-tune")
    return Path(str(res))


@dataclass(kw_only=True)
class ModelOptions:
    """The base model."""

    model: str = "tiny"
    """Local folder or Hugging Face id of the base model; 'tiny' is M0 of the quick synthetic world
    (pre-trained once, cached under the user cache), e.g. meta-llama/Meta-Llama-3-8B at full scale."""
    bf16: bool = False
    """Load the weights in bfloat16 (the official recipes' torch_dtype)."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weights dtype (auto: the checkpoint's own)."""
    device_map: str | None = None
    """'auto' spreads layers over the visible GPUs (accelerate); None: one device."""
    load_in_4bit: bool = False
    """4-bit NF4 weights (bitsandbytes, CUDA only)."""
    load_in_8bit: bool = False
    """8-bit weights (bitsandbytes, CUDA only)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory)."""
    trust_remote_code: bool = False
    """Allow model code shipped with the checkpoint."""
    world_seed: int = 0
    """With --model tiny: the seed of the quick synthetic world whose M0 is used."""


@dataclass(kw_only=True)
class LoraOptions:
    """LoRA recipe (α = 2r as in the paper)."""

    r: int = 32
    """LoRA rank (official knowledge LoRAs 32; skill LoRA 64 for persons, 32 for PopQA; tiny 32 / 16)."""
    alpha: float = 64.0
    """LoRA alpha (2r)."""
    lora_dropout: float = 0.05
    """LoRA dropout (official 0.05; tiny 0)."""
    target_modules: tuple[str, ...] | None = None
    """Modules to adapt (default: c_attn c_proj c_fc for GPT-2-style models, else q/k/v/o/gate/up/down_proj)."""


@dataclass(kw_only=True)
class OptimOptions:
    """Optimisation (AdamW, warm-up then cosine)."""

    epochs: float = 15.0
    """Passes over the data."""
    lr: float = 3e-5
    """Peak learning rate."""
    batch_size: int = 64
    """Rows (skill, multi-version: subjects) per micro-batch and process."""
    grad_accum: int = 1
    """Micro-batches per optimiser step."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    beta2: float = 0.95
    """AdamW beta2."""
    warmup_ratio: float = 0.03
    """Linear warm-up share of the steps."""
    max_length: int = 128
    """Token limit per row."""
    checkpoint_every: int = 0
    """Checkpoint every N optimiser steps (0: at the end of every epoch; formerly --save-every)."""
    resume: bool = False
    """Continue from the last checkpoint in OUT/checkpoints (same data, settings and frozen tensors)."""
    accelerate: bool = False
    """Use accelerate (on automatically under `accelerate launch`): shards the data, averages gradients."""


@dataclass(kw_only=True)
class FormatOptions:
    """The question/answer text format (default: the official one; 'question : {question} answer :' for --model tiny)."""

    prompt_template: str | None = None
    """Prompt with {question}, ending where the answer begins (default 'Question: {question}\\nAnswer:')."""
    answer_template: str = " {answer}"
    """Completion with {answer} (EOS is appended as a token)."""


@dataclass(kw_only=True)
class TrainKnowledgeConfig(CommonOptions, SeedOption, ModelOptions, LoraOptions, OptimOptions):
    """Stage 1: train knowledge LoRA(s) (causal-LM loss on all tokens, base frozen); each is saved as a PEFT adapter in OUT/<name>."""

    data: Path | None = None
    """Knowledge JSONL: {"text": ..., "name": ...} or {"text": ..., "version": N} (-> name know_v{N})."""
    hub_config: str | None = None
    """Instead of --data: a config of a local copy of Shiyu-Lab/Prereq_Tune (e.g. bio_knowledge), via ICLR25_DATA."""
    hub_split: str = "train"
    """Split of --hub-config."""
    names: tuple[str, ...] | None = None
    """Train only these adapter names of the data (default: every name in the data)."""
    name_template: str = "know_v{version}"
    """Adapter name for rows that give a version instead of a name."""


@dataclass(kw_only=True)
class TrainSkillConfig(CommonOptions, SeedOption, ModelOptions, LoraOptions, OptimOptions, FormatOptions):
    """Stage 2: train the skill LoRA with the knowledge LoRAs active and frozen; saves only the skill adapter (OUT/skill)."""

    knowledge: tuple[Path, ...] = ()
    """Knowledge adapter folders (from train-knowledge), in group order (first half | second half for --alternate-groups)."""
    names: tuple[str, ...] | None = None
    """Adapter names for --knowledge (default: the names they were saved with); multi-version names end in the version."""
    data: Path | None = None
    """Skill JSONL: {"question", "answer", "version": int, "fake": bool (optional, mixed mode)}."""
    hub_config: str | None = None
    """Instead of --data: a skill config of a local copy of Shiyu-Lab/Prereq_Tune (e.g. bio_skill)."""
    hub_split: str = "train_fake"
    """Split of --hub-config."""
    multi_version: bool = True
    """Route every micro-batch to one drawn knowledge version (official multi_version_training)."""
    real_weight: float = 1.0
    """Weight of the skill-only CE on real rows in mixed mode (official default 1.0; PopQA 0.5)."""
    real_knowledge: tuple[str, ...] | None = None
    """Names of the real knowledge adapters in mixed mode (default: names without 'fake')."""
    alternate_groups: bool = False
    """Alternate between the two halves of the knowledge list per loss computation (official alternate_cpt_group)."""
    sampler: Literal["routed", "all_versions"] = "routed"
    """routed: forward only the drawn version's rows; all_versions: the official sampler (V rows per counted row)."""
    skill_name: str = "skill"
    """Name of the skill adapter."""
    r: int = 64
    """Skill LoRA rank (official bio 64, PopQA 32; tiny 16)."""
    alpha: float = 128.0
    """Skill LoRA alpha (2r)."""
    epochs: float = 50.0
    """Passes over the data (official bio 50; PopQA 3)."""
    batch_size: int = 8
    """Rows per micro-batch (official 8 × grad-accum 2)."""
    grad_accum: int = 2
    """Micro-batches per optimiser step."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    beta2: float = 0.999
    """AdamW beta2."""
    warmup_ratio: float = 0.1
    """Warm-up share."""
    max_length: int = 768
    """Token limit per row."""


@dataclass(kw_only=True)
class EvaluateConfig(CommonOptions, SeedOption, ModelOptions, FormatOptions):
    """QA accuracy of θ₀+Δskill (optionally with a knowledge LoRA plugged back in)."""

    data: Path
    """QA JSONL: {"question": ..., "answers": ["alias", ...]}."""
    skill: Path | None = None
    """Skill adapter folder (from train-skill); none: the base model."""
    knowledge: Path | None = None
    """A knowledge adapter folder to plug in (knowledge-controlled answers)."""
    metric: Literal["em", "first-token"] = "em"
    """em: greedy generation + the official PopQA match; first-token: greedy first answer token (CPU-scale metric)."""
    max_new_tokens: int = 32
    """Generation length for --metric em (the paper's evaluation uses 128)."""
    batch_size: int = 16
    """Prompts per generation batch."""


@dataclass(kw_only=True)
class GenerateConfig(CommonOptions, SeedOption, ModelOptions):
    """Long-form generation for a list of entities (e.g. data/prereq-tune/bio_skill_test.json), scored by a pluggable claim scorer."""

    entities: Path
    """JSON list of entity names."""
    template: str = "Generate a biography for {entity}."
    """Prompt template with {entity}."""
    skill: Path | None = None
    """Skill adapter folder (local transformers backend)."""
    knowledge: Path | None = None
    """A knowledge adapter folder to plug in (local backend)."""
    backend: Literal["transformers", "openai-chat", "openai-completion"] = "transformers"
    """transformers: the local model + adapters; openai-*: an OpenAI-compatible server (e.g. vLLM serving the skill LoRA)."""
    base_url: str | None = None
    """Server URL (…/v1) for the openai backends (default $OPENAI_BASE_URL)."""
    served_model: str | None = None
    """Model name on the server: with vLLM --lora-modules skill=DIR, the LoRA's name (e.g. skill)."""
    scorer: str | None = None
    """'module:attr' of a claim scorer ((entity, text) -> {'supported', 'claims'}); none ships (FActScore is unreleased)."""
    max_new_tokens: int = 512
    """Tokens per generation."""
    limit: int | None = None
    """Only the first N entities."""
    batch_size: int = 8
    """Prompts per local generation batch."""


@dataclass(kw_only=True)
class DemoConfig(CommonOptions, SeedOption):
    """One quick seed end to end; prints the C1/C2/C3 tables and writes the world's JSONL files (usable with the other commands)."""

    cache: Path | None = None
    """M0 cache root (default: the user cache)."""


@dataclass(kw_only=True)
class PrereqReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale; write results.json / results.md."""

    cache: Path | None = None
    """M0 cache root (default: the user cache)."""
    workers: int | None = None
    """Jobs (M0, then one per seed) run in this many worker processes, one thread each (default: the cores; 1: in
    this process)."""
    resume: bool = False
    """Keep the jobs an earlier run into --out finished (out/records/); changed settings are refused."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
