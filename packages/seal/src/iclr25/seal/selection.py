"""Top-k selection (spec §1.3) and the baselines' subsets (spec §4.3)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .config import check_finite

__all__ = ["n_kept", "select_top", "random_subset", "loss_filter_subset", "oracle_subset", "BENIGN_LABELS"]

BENIGN_LABELS = ("benign", "benign_a", "benign_b")
"""Labels the oracle keeps (the synthetic task's tasks A and B; the real-text variant's GSM8K)."""


def n_kept(n: int, keep: float) -> int:
    """k = ⌊keep·N⌋ (with a 1e-9 guard against float round-down, e.g. 0.29·100).

    Raises:
        ValueError: ``keep`` outside (0, 1], or k = 0.
    """
    check_finite("keep", keep, 0.0, 1.0, lo_open=True)
    k = int(math.floor(keep * n + 1e-9))
    if k < 1:
        raise ValueError(f"keep={keep} keeps no sample of N={n}; raise keep to at least {1 / n:.4g}")
    return k


def select_top(logits: torch.Tensor, keep: float) -> torch.Tensor:
    """Indices of the ⌊keep·N⌋ largest logits (the released code's ``torch.topk(selector, k)``).

    Args:
        logits: ``(N,)`` float — ω (or any score; larger = keep).
        keep: fraction in (0, 1] (the code's ``--topp``; 0.8 in the Llama-3 script).

    Returns:
        ``(k,)`` long, in rank order (largest first; ties broken by the lower index, so the result does
        not depend on how the sort breaks ties).

    Raises:
        ValueError: ``keep`` outside (0, 1], k = 0, non-1-D or non-finite logits.
    """
    t = torch.as_tensor(logits).detach().flatten()
    if t.numel() == 0:
        raise ValueError("select_top: no logits")
    if not bool(torch.isfinite(t.float()).all()):
        raise ValueError("select_top: the logits contain NaN or inf")
    k = n_kept(t.numel(), keep)
    return torch.argsort(t.float().cpu(), descending=True, stable=True)[:k]


def random_subset(n: int, keep: float, seed: int) -> torch.Tensor:
    """⌊keep·N⌋ indices drawn uniformly without replacement (the Random-selection baseline)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:n_kept(n, keep)]


def loss_filter_subset(base_loss: torch.Tensor, keep: float) -> torch.Tensor:
    """The base-loss filter: keep the ⌊keep·N⌋ samples with the *lowest* loss under θ₀ (a non-bilevel
    ablation: SEAL without the model moving)."""
    return select_top(-torch.as_tensor(base_loss, dtype=torch.float64), keep)


def oracle_subset(labels: Sequence[str | None], benign: Sequence[str] = BENIGN_LABELS) -> torch.Tensor:
    """The oracle: every sample labelled benign (drops all unsafe and low-quality samples).

    Raises:
        ValueError: no benign sample (or no labels).
    """
    idx = [i for i, lab in enumerate(labels) if lab in benign]
    if not idx:
        raise ValueError(f"oracle_subset: no sample labelled {list(benign)}")
    return torch.tensor(idx, dtype=torch.long)
