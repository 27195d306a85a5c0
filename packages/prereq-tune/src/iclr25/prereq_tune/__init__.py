"""iclr25-prereq-tune: Prereq-Tune (Liu, Chang, Jaakkola & Zhang, ICLR 2025) — learn the task skill on
fictitious data while frozen knowledge LoRAs supply the facts, then deploy the skill LoRA alone.

Stage 1 trains knowledge LoRAs on knowledge corpora (:func:`train_knowledge_adapter`); stage 2
trains the skill LoRA with a knowledge LoRA active and frozen (:func:`train_skill_adapter`:
multi-version routing, mixed real/fictitious mode with ``real_weight``, alternating adapter
groups). :func:`make_world` builds the CPU-scale synthetic world where every fact is known.
Attributes are imported lazily (``--help`` and ``import`` stay light; torch loads on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    # world
    "World": "world", "Entity": "world", "make_world": "world", "knowledge_corpus": "world",
    "pretraining_corpus": "world", "skill_examples": "world", "qa_items": "world", "statement_prompts": "world", "passage_prompts": "world", "probe_ceiling": "world",
    "chance_accuracy": "world", "world_tokenizer": "world", "world_vocabulary": "world", "TINY_FORMAT": "world",
    "ATTRIBUTES": "world", "VALUES": "world",
    # data
    "PromptFormat": "data", "OFFICIAL_FORMAT": "data", "SkillExample": "data", "QAItem": "data",
    "KnowledgeText": "data", "parse_version": "data", "read_knowledge_jsonl": "data", "read_skill_jsonl": "data",
    "read_qa_jsonl": "data", "read_entities": "data", "encode_completions": "data", "encode_texts": "data",
    "read_hub_split": "data", "hub_split_path": "data",
    # LoRA
    "LoraSpec": "lora", "KNOWLEDGE_TINY": "lora", "SKILL_TINY": "lora", "KNOWLEDGE_LLAMA3": "lora",
    "SKILL_BIO_LLAMA3": "lora", "SKILL_POPQA_LLAMA3": "lora", "add_knowledge_adapter": "lora",
    "add_skill_adapter": "lora", "active_adapters": "lora", "adapter_parameters": "lora", "tensor_hashes": "lora",
    "changed_tensors": "lora", "base_fingerprint": "lora", "save_adapter": "lora", "load_adapter": "lora",
    "FrozenTensorError": "lora", "set_trainable": "lora",
    # training
    "TrainArgs": "training", "TrainResult": "training", "train_knowledge_adapter": "training",
    "train_skill_adapter": "training", "adapter_groups": "training", "completion_loss": "training", "merged_knowledge_weights": "training",
    "KNOWLEDGE_ARGS_TINY": "training", "SKILL_ARGS_TINY": "training",
    # evaluation
    "qa_accuracy": "evaluation", "em_match": "evaluation", "normalize_answer": "evaluation",
    "completion_accuracy": "evaluation", "generate_answers": "evaluation", "generate_longform": "evaluation",
    "ClaimScorer": "evaluation", "qa_em_accuracy": "evaluation",
    # models
    "M0Spec": "model", "pretrain_m0": "model", "load_base_model": "model", "fuse_gelu": "model",
    # reproduction
    "reproduce": "reproduce",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
