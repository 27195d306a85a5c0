"""The merged knowledge forward: a frozen knowledge LoRA folded into copies of the base weights
(:func:`merged_knowledge_weights`), used with ``completion_loss(..., param_overrides=)``."""

from __future__ import annotations

from typing import Any

__all__ = ["merged_knowledge_weights"]


def merged_knowledge_weights(model: Any, adapter: str) -> dict[str, Any]:
    """The base weights with the frozen LoRA ``adapter`` folded in: ``{name: W + ΔW}`` for every base
    weight ``adapter`` adapts, with ``ΔW = scaling · B A`` in the weight's own layout (PEFT's
    ``get_delta_weight``; transposed for GPT-2 ``Conv1D``). New tensors, no gradient; the model is not
    modified. Forwarding with them (``completion_loss(..., param_overrides=)``) and only the skill LoRA
    active computes the same function as the stacked forward with ``[adapter, skill]`` active (up to
    float rounding), at the cost of a plain single-LoRA step: the knowledge LoRA's gradient is never
    needed, so its two extra matmuls per layer need not run. Memory: one copy of every adapted weight
    per knowledge adapter — meant for small models (the CPU-scale reproduction), not an 8B base.

    Raises:
        ValueError: ``adapter`` adapts no layer, a non-floating (quantised) base weight, or LoRA dropout
            > 0 on ``adapter`` (the stacked forward would apply it in training mode; merging cannot).
    """
    import torch
    from peft.tuners.lora import LoraLayer

    params = dict(model.named_parameters())
    out: dict[str, Any] = {}
    with torch.no_grad():
        for mname, mod in model.named_modules():
            if not (isinstance(mod, LoraLayer) and adapter in mod.lora_A):
                continue
            if not isinstance(mod.lora_dropout[adapter], torch.nn.Identity):
                raise ValueError(f"merged knowledge forward: adapter {adapter!r} has LoRA dropout > 0 in {mname}; "
                                 "use knowledge_forward='stacked'")
            w = mod.get_base_layer().weight
            if not w.is_floating_point():
                raise ValueError(f"merged knowledge forward: the base weight of {mname} is {w.dtype} (quantised); "
                                 "use knowledge_forward='stacked'")
            name = next((n for n, p in params.items() if p is w), None)
            if name is None:
                raise ValueError(f"merged knowledge forward: cannot find the parameter name of {mname}'s base weight")
            out[name] = (w + mod.get_delta_weight(adapter).to(w.dtype)).detach()
    if not out:
        raise ValueError(f"merged knowledge forward: adapter {adapter!r} adapts no layer of this model")
    return out
