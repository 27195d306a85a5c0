"""LoRA (peft) and dropout for a training stage: attach and merge an adapter, switch dropout off for DPO."""

from __future__ import annotations

import logging
from typing import Any

import torch

from .config import TrainConfig

__all__ = ['apply_lora', 'merge_lora', 'disable_dropout', 'is_peft']

log = logging.getLogger(__name__)


def _peft():
    try:
        import peft
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'iclr25-cream[peft]'") from None
    return peft


def apply_lora(model: Any, cfg: TrainConfig) -> Any:
    """Wrap ``model`` in a fresh peft LoRA adapter (``r``, ``alpha``, ``dropout`` from ``cfg``)."""
    peft = _peft()
    targets: Any = cfg.lora_target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    lcfg = peft.LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                           target_modules=targets, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, lcfg)


def merge_lora(model: Any) -> Any:
    """Merge a peft adapter into the base weights and return the plain model (no-op otherwise)."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


_DROPOUT_ATTRS = ("attention_dropout", "attn_dropout", "hidden_dropout", "dropout", "activation_dropout")


def disable_dropout(model: Any) -> int:
    """Set every dropout probability of ``model`` to 0 (TRL's ``disable_dropout_in_model``, extended to the
    float ``attention_dropout``-style attributes some attention modules pass to a functional dropout).

    Returns:
        how many probabilities were non-zero before (0: the model had no active dropout).
    """
    n = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            n += m.p > 0
            m.p = 0.0
        for a in _DROPOUT_ATTRS:
            v = getattr(m, a, None)
            if isinstance(v, float) and not isinstance(v, bool) and v > 0:
                setattr(m, a, 0.0)
                n += 1
    return n


def is_peft(model: Any) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
