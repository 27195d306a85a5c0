"""Data-poisoning backdoor attacks (BackdoorBench settings): BadNets, Blended, all-to-all.

Images are float tensors ``(N, C, H, W)`` in [0, 1]; labels ``(N,)`` int64. Every attack returns
``(x_bd, y_bd, poison_mask)`` with ``poison_mask: (N,) bool``; the inputs are not modified.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["PatchTrigger", "BlendTrigger", "make_trigger", "poison", "badnets", "blended", "all_to_all",
           "attack_success_rate"]

Trigger = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class PatchTrigger:
    """BadNets (Gu et al. 2017): a ``size x size`` patch of value ``value`` in the bottom-right corner."""

    size: int = 3
    value: float = 1.0

    def __call__(self, x: Tensor) -> Tensor:
        if self.size < 1 or self.size > min(x.shape[-2:]):
            raise ValueError(f"patch size {self.size} does not fit images of size {tuple(x.shape[-2:])}")
        x = x.clone()
        x[..., -self.size:, -self.size:] = self.value
        return x


@dataclass(frozen=True)
class BlendTrigger:
    """Blended (Chen et al. 2017): ``x' = (1 - alpha) x + alpha P`` with a fixed pattern ``P``
    ``(C, H, W)`` in [0, 1] (here a seeded uniform-noise image; the paper's Hello-Kitty image is not
    shipped)."""

    pattern: Tensor
    alpha: float = 0.2

    def __call__(self, x: Tensor) -> Tensor:
        if tuple(self.pattern.shape) != tuple(x.shape[1:]):
            raise ValueError(f"blend pattern has shape {tuple(self.pattern.shape)}, images {tuple(x.shape[1:])}")
        return (1 - self.alpha) * x + self.alpha * self.pattern.to(x)


def make_trigger(attack: str, image_shape: tuple[int, int, int], seed: int = 0, patch_size: int | None = None,
                 alpha: float = 0.2) -> Trigger:
    """The trigger of ``attack`` (``"badnets"``, ``"blended"``) for images ``(C, H, W)``. The BadNets
    patch defaults to 3x3 (2x2 for images smaller than 16 pixels); the Blended pattern is seeded
    uniform noise."""
    if patch_size is not None and (isinstance(patch_size, bool) or int(patch_size) != patch_size or patch_size < 1):
        raise ValueError(f"patch_size={patch_size!r} must be an integer >= 1 (or None for the default)")
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and 0 < alpha <= 1):
        raise ValueError(f"alpha={alpha!r} must be finite and in (0, 1]")
    if attack == "badnets":
        return PatchTrigger(patch_size if patch_size is not None else (3 if min(image_shape[1:]) >= 16 else 2))
    if attack == "blended":
        g = torch.Generator().manual_seed(seed + 7919)
        return BlendTrigger(torch.rand(image_shape, generator=g), alpha)
    raise ValueError(f"unknown attack {attack!r}; choose 'badnets' or 'blended'")


def poison(x: Tensor, y: Tensor, trigger: Trigger, ratio: float = 0.1, target: int | None = 0,
           seed: int = 0, num_classes: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Poison ``round(ratio * N)`` samples: apply ``trigger`` and relabel them.

    Args:
        x: ``(N, C, H, W)`` float; y: ``(N,)`` int64.
        trigger: callable on a batch of images.
        ratio: poisoning ratio ``r = n_p / N`` in [0, 1).
        target: all-to-one target label; ``None`` = all-to-all, ``t = (y + 1) mod K``.
        seed: selects the poisoned samples (drawn among samples whose label differs from the target
            for all-to-one; among all samples for all-to-all).
        num_classes: K for all-to-all (default ``y.max() + 1``).

    Returns:
        ``(x_bd, y_bd, poison_mask)``; unpoisoned samples are bit-identical to the input.

    Raises:
        ValueError: for a ratio outside [0, 1) or more poisoned samples than candidates.
    """
    from .data import check_images

    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and 0.0 <= ratio < 1.0):
        raise ValueError(f"ratio must be finite and in [0, 1), got {ratio!r}")
    check_images(x, y, name="images to poison")
    n_p = int(round(ratio * len(y)))
    cand = np.flatnonzero(y.numpy() != target) if target is not None else np.arange(len(y))
    if n_p > len(cand):
        raise ValueError(f"cannot poison {n_p} samples: only {len(cand)} have a label other than {target}")
    idx = torch.from_numpy(np.sort(np.random.default_rng(seed).choice(cand, n_p, replace=False)))
    mask = torch.zeros(len(y), dtype=torch.bool)
    mask[idx] = True
    x_bd, y_bd = x.clone(), y.clone()
    if n_p:
        x_bd[idx] = trigger(x[idx])
        if target is not None:
            y_bd[idx] = target
        else:
            k = num_classes or int(y.max()) + 1
            y_bd[idx] = (y[idx] + 1) % k
    return x_bd, y_bd, mask


def badnets(x: Tensor, y: Tensor, target: int = 0, ratio: float = 0.1, patch_size: int = 3, seed: int = 0,
            value: float = 1.0):
    """BadNets all-to-one poisoning; see :func:`poison`."""
    return poison(x, y, PatchTrigger(patch_size, value), ratio, target, seed)


def blended(x: Tensor, y: Tensor, target: int = 0, ratio: float = 0.1, alpha: float = 0.2,
            pattern: Tensor | None = None, seed: int = 0):
    """Blended all-to-one poisoning; ``pattern`` defaults to seeded uniform noise. See :func:`poison`."""
    trig = BlendTrigger(pattern, alpha) if pattern is not None else make_trigger("blended", tuple(x.shape[1:]), seed,
                                                                                 alpha=alpha)
    return poison(x, y, trig, ratio, target, seed)


def all_to_all(x: Tensor, y: Tensor, trigger: Trigger, ratio: float = 0.1, seed: int = 0,
               num_classes: int | None = None):
    """All-to-all poisoning, ``t = (y + 1) mod K``; see :func:`poison`."""
    return poison(x, y, trigger, ratio, None, seed, num_classes)


def attack_success_rate(model: torch.nn.Module, x_test: Tensor, y_test: Tensor, trigger: Trigger,
                        target: int | None = 0, num_classes: int | None = None) -> float:
    """ASR: fraction of triggered test images (those whose label is not the target) classified as
    the target (all-to-all: as ``(y + 1) mod K``). In [0, 1]."""
    from .gradients import predict

    keep = y_test != target if target is not None else torch.ones_like(y_test, dtype=torch.bool)
    if not keep.any():
        raise ValueError("no test sample with a label other than the target")
    pred = predict(model, trigger(x_test[keep]))
    if target is not None:
        want = torch.full_like(pred, target)
    else:
        want = (y_test[keep] + 1) % (num_classes or int(y_test.max()) + 1)
    return float((pred == want).float().mean())
