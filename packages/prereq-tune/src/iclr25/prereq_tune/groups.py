"""Adapter groups and routing: the two halves of ``alternate_cpt_group`` (:func:`adapter_groups`), the
trained-vs-frozen split of a run's parameters, the uniform draw of a knowledge adapter, and activation with
``requires_grad`` re-applied and asserted (PEFT issue 1374)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .lora import FrozenTensorError, adapter_names, adapter_parameters

__all__ = ["adapter_groups"]


def adapter_groups(names: Sequence[str], alternate: bool) -> tuple[list[str], list[str]]:
    """The two adapter groups of ``alternate_cpt_group`` (spec §1.5): first and second half of the
    ordered list, or the whole list twice when ``alternate`` is off.

    Raises:
        ValueError: ``alternate`` with fewer than two adapters.
    """
    names = list(names)
    if not alternate:
        return names, names
    if len(names) < 2:
        raise ValueError(f"alternate_groups needs at least two knowledge adapters, got {names}")
    h = len(names) // 2
    return names[:h], names[h:]


class _Roles:
    """The run's parameters split once: trained adapter vs everything else."""

    def __init__(self, model: Any, trained: str) -> None:
        ids = {id(p) for p in adapter_parameters(model, trained).values()}
        from peft.tuners.lora import LoraLayer

        self.model = model
        self.trained = trained
        self.lora_layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
        self.trainable = [(n, p) for n, p in model.named_parameters() if id(p) in ids]
        self.frozen = [(n, p) for n, p in model.named_parameters() if id(p) not in ids]
        for _, p in self.frozen:        # stale gradients from earlier work (e.g. pre-training) are not ours
            p.grad = None
        for _, p in self.trainable:
            p.grad = None

    def apply(self) -> None:
        """Re-apply requires_grad after an activation: True for the trained adapter only."""
        for _, p in self.frozen:
            p.requires_grad_(False)
        for _, p in self.trainable:
            p.requires_grad_(True)

    def check(self, where: str) -> None:
        for n, p in self.frozen:
            if p.requires_grad or p.grad is not None:
                raise FrozenTensorError(f"{where}: {n} is trainable or has a gradient although it must stay frozen")

    def freeze_all(self) -> None:
        for _, p in self.trainable:
            p.requires_grad_(False)


def _draw(rng: np.random.Generator, group: Sequence[str]) -> str:
    """One knowledge adapter of ``group``, uniformly (spec §1.6 line 6)."""
    return group[int(rng.integers(len(group)))]


def _activate(model: Any, names: Sequence[str], roles: _Roles, where: str) -> None:
    """Activate exactly ``names``; then re-apply ``requires_grad`` (trained adapter only) and assert it.

    PEFT's ``set_adapter`` walks every module (≈ 20 ms per call on the tiny model under load, ~12 % of a
    skill step); it is skipped when ``names`` are already the active adapters (and adapters are not
    disabled), which changes nothing: the re-application and the check below run on every call.
    """
    names = list(names)
    if list(model.base_model.active_adapters) != names or any(
            list(m.active_adapters) != names or m.disable_adapters for m in roles.lora_layers):
        model.base_model.set_adapter(names)
    roles.apply()           # PEFT's set_adapter re-enables gradients of every activated adapter
    roles.check(where)


def _prepare(model: Any, name: str) -> None:
    if name not in adapter_names(model):
        raise ValueError(f"the model has no adapter {name!r} (it has {adapter_names(model)}); add it first with "
                         "add_knowledge_adapter / add_skill_adapter")
