"""LoRA plumbing shared by every policy: the causal-LM check, forward inputs and the peft ``LoraConfig``."""

from __future__ import annotations

from typing import Any

import torch

from .config import QAdapterConfig

__all__ = ["check_causal_lm", "forward_inputs", "lora_config"]


def check_causal_lm(model: Any) -> None:
    """Raise ``ValueError`` unless ``model`` is a causal LM with an output (LM) head.

    A bare backbone (``GPT2Model``, ``AutoModel``) returns hidden states, not logits over the vocabulary,
    so it cannot serve as ``Q``/``pi_1``.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ValueError(
            f"{type(model).__name__} has no causal-LM head (get_output_embeddings() is None); load the base "
            "model with transformers.AutoModelForCausalLM.from_pretrained(...) instead of AutoModel"
        )


def forward_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> dict[str, torch.Tensor | None]:
    """Forward kwargs; position ids follow the attention mask so left padding is handled."""
    if attention_mask is None:
        return {"input_ids": input_ids}
    pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": pos}


def lora_config(cfg: QAdapterConfig, model: Any = None):
    from peft import LoraConfig, TaskType

    # GPT-2 style Conv1D layers store weights transposed; tell peft up front (it would warn and fix it)
    conv1d = getattr(getattr(model, "config", None), "model_type", None) in ("gpt2", "gpt_bigcode")
    return LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules) if cfg.target_modules else None,
        fan_in_fan_out=conv1d,
    )


