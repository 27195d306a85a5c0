"""The training losses: summed next-token cross-entropy over label positions (:func:`completion_loss`), and the
finite-loss guard of every step."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["completion_loss"]


def _supports_logits_to_keep(model: Any) -> bool:
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def completion_loss(model: Any, input_ids: Any, attention_mask: Any, labels: Any, *,
                    logits_to_keep: bool | None = None, param_overrides: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Summed next-token cross-entropy over label positions, and their count.

    Args:
        model: a causal LM (``model(input_ids=, attention_mask=).logits``: ``(B, T, V)``).
        input_ids, attention_mask, labels: ``(B, T)`` long; ``labels == -100`` where no loss is taken
            (label ``t`` is predicted from position ``t - 1``).
        logits_to_keep: compute logits only at positions that predict a label (union over the
            batch) when the model supports it (``None``: detect).
        param_overrides: parameter name -> tensor used in place of that parameter for this forward
            (``torch.func.functional_call``; the module's own tensors are not touched), e.g. base
            weights with a frozen knowledge LoRA folded in (:func:`merged_knowledge_weights`).

    Returns:
        ``(loss_sum, n_tokens)``: float32 scalar (nats) and a long scalar. The token-mean CE is
        ``loss_sum / n_tokens``.
    """
    import torch
    import torch.nn.functional as F

    dev = next(model.parameters()).device
    input_ids, attention_mask, labels = input_ids.to(dev), attention_mask.to(dev), labels.to(dev)
    target = labels[:, 1:]
    if logits_to_keep is None:
        logits_to_keep = _supports_logits_to_keep(model)
    if param_overrides:
        def fwd(**kw: Any) -> Any:
            return torch.func.functional_call(model, param_overrides, (), kw, strict=False)
    else:
        fwd = model
    if logits_to_keep:
        pos = torch.nonzero((target != -100).any(0)).flatten()
        logits = fwd(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=pos).logits
        target = target[:, pos]
    else:
        logits = fwd(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    mask = target != -100
    n = mask.sum()
    loss = F.cross_entropy(logits[mask].float(), target[mask], reduction="sum")
    return loss, n


def _finite(loss: Any, where: str) -> float:
    v = float(loss.detach())
    if not math.isfinite(v):
        raise FloatingPointError(f"{where}: the loss became {v}; lower the learning rate")
    return v
