"""The SEAL data selector: one logit per fine-tuning sample (the released code's ``TrainableTensorModule``)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

__all__ = ["Selector", "selector_loss", "selector_gradient", "SOFTMAX_INIT", "SIGMOID_INIT"]

SOFTMAX_INIT = 0.1
"""ω₀ of the softmax selector (code: ``ones(N) * 0.1``), so w ≡ 1 at start."""
SIGMOID_INIT = -1e-4
"""ω₀ of the sigmoid selector (code: ``-ones(N) * 1e-4``), so w = 2·sigmoid(−1e-4) ≈ 0.99995."""


class Selector(nn.Module):
    """Sample weights w(ω) over the N fine-tuning samples (spec §1.2).

    ``kind="softmax"``: w = N·softmax(ω), ω₀ = 0.1 (π(ω) ∈ Δ^N scaled to mean 1);
    ``kind="sigmoid"``: w = 2·sigmoid(ω), ω₀ = −1e-4. Ranking always uses the raw logits ω.

    Args:
        n: the number of fine-tuning samples N (>= 1).
        kind: ``"softmax"`` or ``"sigmoid"``.
        logits: optional initial ω, ``(n,)`` float (e.g. a trained selector).

    Attributes:
        logits: ``nn.Parameter`` ``(n,)`` float32 — ω.

    Raises:
        ValueError: ``n < 1``, an unknown ``kind``, or ``logits`` of another length / non-finite.
    """

    def __init__(self, n: int, kind: Literal["softmax", "sigmoid"] = "softmax",
                 logits: torch.Tensor | None = None) -> None:
        super().__init__()
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"Selector: n must be an integer >= 1, got {n!r}")
        if kind not in ("softmax", "sigmoid"):
            raise ValueError(f"Selector: kind must be 'softmax' or 'sigmoid', got {kind!r}")
        self.n, self.kind = n, kind
        if logits is None:
            init = torch.full((n,), SOFTMAX_INIT if kind == "softmax" else SIGMOID_INIT, dtype=torch.float32)
        else:
            init = torch.as_tensor(logits, dtype=torch.float32).detach().clone().flatten()
            if init.numel() != n:
                raise ValueError(f"Selector: {init.numel()} logits given for n={n} samples")
            if not bool(torch.isfinite(init).all()):
                raise ValueError("Selector: the logits contain NaN or inf")
        self.logits = nn.Parameter(init)

    def forward(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Weights w: ``(n,)`` float32, or ``(len(idx),)`` for the samples ``idx`` (long)."""
        if self.kind == "softmax":
            w = self.n * torch.softmax(self.logits, dim=0)
        else:
            w = 2.0 * torch.sigmoid(self.logits)
        return w if idx is None else w[idx]

    def extra_repr(self) -> str:
        return f"n={self.n}, kind={self.kind!r}"


def selector_loss(selector: Selector, idx: torch.Tensor, losses: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """The selector objective of one batch, ``scale · Σ_{i∈B} w_i(ω) · stopgrad(ℓ_i)`` (spec §1.2, line 8
    of §1.4); ``scale`` defaults to ``1/|B|`` (the batch mean).

    Args:
        selector: the :class:`Selector`.
        idx: ``(|B|,)`` long — fine-tuning indices of the batch.
        losses: ``(|B|,)`` float — their per-sample losses (detached here).
        scale: normaliser (``world/n_global`` under data parallelism, see ``train_selector``).

    Returns:
        Scalar tensor, differentiable w.r.t. ``selector.logits`` only.
    """
    if idx.numel() != losses.numel():
        raise ValueError(f"selector_loss: {idx.numel()} indices but {losses.numel()} losses")
    s = (1.0 / max(1, idx.numel())) if scale is None else scale
    return s * (selector(idx) * losses.detach().to(selector.logits.dtype)).sum()


def selector_gradient(logits: torch.Tensor, losses: torch.Tensor, idx: torch.Tensor,
                      kind: Literal["softmax", "sigmoid"] = "softmax") -> torch.Tensor:
    """Closed-form ∇_ω of the batch-mean selector objective (spec §1.2).

    softmax (p = softmax(ω)): ``∂/∂ω_j = (N/|B|)·(1[j∈B]·p_j ℓ_j − p_j Σ_{i∈B} p_i ℓ_i)`` — every
    out-of-batch coordinate gets ``−(N/|B|) p_j Σ p_i ℓ_i`` (pushed up when losses are positive);
    sigmoid (s = sigmoid(ω)): ``∂/∂ω_j = 1[j∈B]·(2/|B|)·s_j(1−s_j)·ℓ_j``.

    Args:
        logits: ``(N,)`` float — ω.
        losses: ``(|B|,)`` float — ℓ of the batch, aligned with ``idx``.
        idx: ``(|B|,)`` long — distinct batch indices.

    Returns:
        ``(N,)`` tensor of ``logits.dtype``.
    """
    n, b = logits.numel(), idx.numel()
    grad = torch.zeros_like(logits)
    if kind == "softmax":
        p = torch.softmax(logits, dim=0)
        grad[idx] += (n / b) * p[idx] * losses
        grad -= (n / b) * p * (p[idx] * losses).sum()
    elif kind == "sigmoid":
        s = torch.sigmoid(logits[idx])
        grad[idx] += (2.0 / b) * s * (1 - s) * losses
    else:
        raise ValueError(f"kind must be 'softmax' or 'sigmoid', got {kind!r}")
    return grad
