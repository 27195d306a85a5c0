"""The gradient circular distribution (GCD) and its statistics (paper Section 3, Eqs. 2-4).

All functions take the activation gradients of one class, ``G: (n, C)`` float, and a basis
vector ``g0: (C,)`` float (the activation gradient of a clean sample of that class, or the mean
over the clean samples). Statistics are computed in float64. A gradient of norm zero has an
undefined direction: its cosine with anything is taken as 0 (angle pi/2).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["cosine", "angles", "far_end_indices", "far_end", "cvbt", "closeness"]


def _check(G: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    if G.ndim != 2:
        raise ValueError(f"G must be (n, C), got shape {tuple(G.shape)}")
    if g.ndim not in (1, 2) or g.shape[-1] != G.shape[1]:
        raise ValueError(f"basis must be (C,) or (m, C) with C={G.shape[1]}, got shape {tuple(g.shape)}")
    return G.detach().double(), g.detach().double()


def cosine(G: Tensor, g: Tensor) -> Tensor:
    """Cosine similarity of every row of ``G: (n, C)`` with ``g: (C,)`` -> ``(n,)``, or with every
    row of ``g: (m, C)`` -> ``(m, n)``. float64, in [-1, 1]."""
    G, g = _check(G, g)
    Gn = torch.nn.functional.normalize(G, dim=-1)
    gn = torch.nn.functional.normalize(g, dim=-1)
    return (gn @ Gn.T).clamp(-1.0, 1.0)


def angles(G: Tensor, g0: Tensor) -> Tensor:
    """Eq. (2): angle ``theta_{x0}(x_i) = arccos cos(g(x_i), g(x0))`` in radians, ``(n,)`` in [0, pi].

    (The paper writes the range as [0, 2 pi); arccos gives [0, pi].)
    """
    return torch.arccos(cosine(G, g0))


def far_end_indices(G: Tensor, g0: Tensor, m: int = 1) -> Tensor:
    """Indices ``(m,)`` of the ``m`` samples farthest (largest angle) from the basis ``g0``;
    ``m=1`` gives ``n* = argmax_i theta_{x0}(x_i)`` of Eq. (3)."""
    if not 1 <= m <= G.shape[0]:
        raise ValueError(f"m must be in [1, n={G.shape[0]}], got {m}")
    return torch.topk(-cosine(G, g0), m).indices


def far_end(G: Tensor, g0: Tensor, m: int = 1) -> Tensor:
    """The far-end gradient vectors ``(m, C)`` (the set ``G_m`` of the Remark after Eq. 4)."""
    return G[far_end_indices(G, g0, m)]


def cvbt(G: Tensor, g0: Tensor, m: int = 1, include_far: bool = True) -> float:
    """Eq. (3): cosine-similarity variation towards basis transition,
    ``rho = sqrt((1/n) sum_i (cos theta_{x0}(x_i) - cos theta_{x_{n*}}(x_i))^2)`` in [0, 2].

    Args:
        G: ``(n, C)`` class gradients; g0: ``(C,)`` basis.
        m: number of far-end vectors; the statistic is averaged over them (paper's Remark).
        include_far: ``True`` (paper) sums over all ``n`` samples; ``False`` (BackdoorBench
            ``gap``) leaves the far-end sample(s) out of the sum but still divides by ``n``.

    Returns:
        ``rho`` as a Python float; ``0.0`` for an empty class.
    """
    n = G.shape[0]
    if n == 0:
        return 0.0
    idx = far_end_indices(G, g0, min(m, n))
    c0 = cosine(G, g0)  # (n,)
    cf = cosine(G, G[idx])  # (m, n)
    sq = (c0.unsqueeze(0) - cf) ** 2
    if not include_far:
        sq[torch.arange(len(idx)), idx] = 0.0
    return float(torch.sqrt(sq.sum(1) / n).mean())


def closeness(G: Tensor, g0: Tensor, g_far: Tensor) -> Tensor:
    """Eq. (4): sample-level closeness to the clean basis,
    ``s = (1 - cos(g_i, g_far)) / ((1 - cos(g_i, g_far)) + (1 - cos(g_i, g0)))`` in [0, 1].

    1 = aligned with ``g0`` and opposite to the far end, 0 = the reverse. With ``g_far: (m, C)``
    the closeness is averaged over the ``m`` far-end vectors. A sample parallel to both (0/0)
    gets 0.5. Returns ``(n,)`` float64.
    """
    d0 = 1.0 - cosine(G, g0)
    df = 1.0 - cosine(G, g_far)
    if df.ndim == 2:
        d0 = d0.unsqueeze(0)
    den = df + d0
    s = torch.where(den > 0, df / den.clamp_min(1e-300), torch.full_like(den, 0.5))
    return s.mean(0) if s.ndim == 2 else s
