"""Untargeted ℓ∞ PGD (Madry et al.) in pixel space, as used for every transferability number."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["pgd_linf"]


def pgd_linf(model: nn.Module, x: Tensor, y: Tensor, eps: float = 0.04, steps: int = 50,
             step_size: float | None = None, rand_init: bool = True, *, clip_min: float = 0.0,
             clip_max: float = 1.0, batch_size: int = 500, generator: torch.Generator | None = None) -> Tensor:
    """Untargeted ℓ∞ PGD maximising the cross-entropy of ``model`` (advertorch ``LinfPGDAttack``).

    Args:
        model: returns logits or log-probabilities ``(B, classes)``; put in eval mode here (its
            mode is restored afterwards).
        x: ``(B, C, H, W)`` float images in ``[clip_min, clip_max]`` (pixel space, ``[0, 1]``).
        y: ``(B,)`` int64 labels.
        eps: ℓ∞ radius in pixel units, in ``[0, 1]`` (paper: 0.04).
        steps: iterations (paper: 50).
        step_size: default ``eps / 10`` (paper).
        rand_init: uniform random start in the ε-ball.
        batch_size: images per attack batch.
        generator: RNG for the random start.

    Returns:
        ``x_adv`` ``(B, C, H, W)``, ``‖x_adv − x‖_∞ ≤ eps``, inside ``[clip_min, clip_max]``.

    Raises:
        ValueError: ``eps`` outside ``[0, 1]``, ``steps < 0``, or ``x``/``y`` of mismatched length.
    """
    if not (0.0 <= eps <= 1.0):
        raise ValueError(f"eps={eps} is outside [0, 1]: eps is an ℓ∞ radius in pixel units for "
                         "images in [0, 1] (paper: 0.04 ≈ 10/255)")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} images but y has {y.shape[0]} labels")
    if step_size is None:
        step_size = eps / 10
    was_training = model.training
    model.eval()
    outs = []
    try:
        for i in range(0, x.shape[0], batch_size):
            xb, yb = x[i:i + batch_size].detach(), y[i:i + batch_size]
            if rand_init and eps > 0:
                noise = torch.rand(xb.shape, generator=generator).to(xb) * 2 - 1
                delta = noise * eps
            else:
                delta = torch.zeros_like(xb)
            delta = (xb + delta).clamp(clip_min, clip_max) - xb
            for _ in range(steps):
                delta.requires_grad_(True)
                with torch.enable_grad():
                    loss = F.cross_entropy(model(xb + delta), yb)
                    (g,) = torch.autograd.grad(loss, delta)
                delta = (delta.detach() + step_size * g.sign()).clamp(-eps, eps)
                delta = (xb + delta).clamp(clip_min, clip_max) - xb
            outs.append((xb + delta).detach())
    finally:
        model.train(was_training)
    return torch.cat(outs, 0)
