"""Synthetic activation gradients with a planted backdoor (spec claim 5, the ``demo`` command).

Every class ``k`` has a clean direction ``u_k``; its samples are ``u_k`` plus isotropic noise
(a von Mises-Fisher-like cluster), each rescaled by a random positive factor. In the target class a
fraction of the samples is drawn around a far direction ``v`` at ``angle`` from ``u_target``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["synthetic_gradients"]


def synthetic_gradients(n_per_class: int = 200, num_classes: int = 10, dim: int = 64, target: int = 0,
                        poison_fraction: float = 0.5, angle: float = 100.0, spread: float = 0.25,
                        clean_per_class: int = 10, seed: int = 0):
    """Draw gradients for one layer.

    Args:
        n_per_class: samples per class in the untrustworthy set.
        dim: gradient dimension C.
        target: the class holding the planted poisoned cluster.
        poison_fraction: share of the target class that is poisoned.
        angle: angle between the clean and poisoned directions, degrees.
        spread: noise norm relative to the unit direction (angular spread ~ atan(spread)).
        clean_per_class: clean (defender) samples per class.

    Returns:
        ``(grads (N, dim), labels (N,), clean_grads (M, dim), clean_labels (M,), poison_mask (N,))``.
    """
    g = torch.Generator().manual_seed(seed)

    def cloud(u: Tensor, n: int) -> Tensor:
        x = u + spread * torch.randn(n, dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
        return x * torch.empty(n, 1, dtype=torch.float64).uniform_(0.5, 2.0, generator=g)

    U = torch.nn.functional.normalize(torch.randn(num_classes, dim, generator=g, dtype=torch.float64), dim=1)
    w = torch.randn(dim, generator=g, dtype=torch.float64)
    w = torch.nn.functional.normalize(w - (w @ U[target]) * U[target], dim=0)
    a = math.radians(angle)
    v = math.cos(a) * U[target] + math.sin(a) * w
    G, Y, P, C, YC = [], [], [], [], []
    n_p = int(round(poison_fraction * n_per_class))
    for k in range(num_classes):
        nc = n_per_class - (n_p if k == target else 0)
        G.append(cloud(U[k], nc))
        Y.append(torch.full((nc,), k))
        P.append(torch.zeros(nc, dtype=torch.bool))
        if k == target and n_p:
            G.append(cloud(v, n_p))
            Y.append(torch.full((n_p,), k))
            P.append(torch.ones(n_p, dtype=torch.bool))
        C.append(cloud(U[k], clean_per_class))
        YC.append(torch.full((clean_per_class,), k))
    perm = torch.randperm(sum(len(y) for y in Y), generator=g)
    return (torch.cat(G)[perm].float(), torch.cat(Y)[perm], torch.cat(C).float(), torch.cat(YC),
            torch.cat(P)[perm])
