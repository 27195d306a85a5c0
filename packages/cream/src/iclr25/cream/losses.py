"""The consistency-regularised DPO loss (CREAM, spec §1.4; paper Eq. for L_CREAM).

    h = beta [(log pi(y+|x) - log ref(y+|x)) - (log pi(y-|x) - log ref(y-|x))]
    L = - E[ C log sigmoid(h) + (1 - C) log sigmoid(-h) ]

With ``C = 1`` this is DPO (the SRLM baseline); it is DPO with a soft label ``C`` per pair, so
``dL/dh = sigmoid(h) - C`` and a single pair is minimised at ``h* = log(C / (1 - C))``.

The core's :func:`iclr25.core.lm.dpo_loss` takes one scalar ``label_smoothing`` in ``[0, 0.5)``;
CREAM needs a per-pair ``C`` anywhere in ``[0, 1]`` (``C < 1/2`` flips the preference), so the loss
is implemented here and tested equal to the core's where the two overlap.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["cream_dpo_loss", "check_consistency_weights"]


def check_consistency_weights(c: torch.Tensor | float, batch: int | None = None) -> None:
    """Raise ``ValueError`` unless every ``c`` is finite and in ``[0, 1]`` (and, for a tensor, has
    ``batch`` elements)."""
    if isinstance(c, torch.Tensor):
        if batch is not None and c.dim() > 0 and c.numel() != batch:
            raise ValueError(f"c has {c.numel()} values for a batch of {batch} pairs")
        if not bool(torch.isfinite(c).all()) or bool((c < 0).any()) or bool((c > 1).any()):
            bad = c[~torch.isfinite(c) | (c < 0) | (c > 1)].flatten()[:3].tolist()
            raise ValueError(f"consistency weights c must be finite and in [0, 1]; got e.g. {bad}")
    else:
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not 0 <= c <= 1:
            raise ValueError(f"consistency weight c must be finite and in [0, 1], got {c!r}")


def cream_dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                   ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor,
                   c: torch.Tensor | float = 1.0, beta: float = 0.1,
                   reduction: str = "mean") -> tuple[torch.Tensor, torch.Tensor]:
    """CREAM's soft-label DPO loss.

    Args:
        policy_chosen_logps, policy_rejected_logps: ``(B,)`` float — summed response log-probs
            ``log pi_theta(y|x)`` (nats; see :func:`iclr25.core.lm.sequence_logprobs`), with grad.
        ref_chosen_logps, ref_rejected_logps: ``(B,)`` float — the same under the frozen reference
            (the model the DPO stage starts from).
        c: the consistency rate, a float or a ``(B,)`` tensor in ``[0, 1]``; ``1`` = plain DPO.
        beta: the DPO temperature, finite and ``> 0`` (paper: 0.1).
        reduction: ``"mean"`` (the official code averages over the batch), ``"sum"`` or ``"none"``.

    Returns:
        ``(loss, margins)``: the reduced loss (or ``(B,)`` with ``"none"``) and the detached
        ``(B,)`` margins ``h``.

    Raises:
        ValueError: ``beta`` not finite and positive, ``c`` outside ``[0, 1]``, shape mismatches,
            an unknown reduction.
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be finite and > 0, got {beta!r}")
    shapes = {tuple(t.shape) for t in (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
                                        ref_rejected_logps)}
    if len(shapes) != 1:
        raise ValueError(f"all log-prob tensors must have one shape, got {sorted(shapes)}")
    batch = policy_chosen_logps.numel()
    check_consistency_weights(c, batch)
    h = beta * ((policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps))
    if isinstance(c, torch.Tensor):
        c = c.to(device=h.device, dtype=h.dtype).reshape(h.shape) if c.dim() > 0 else c.to(h)
    loss = -(c * F.logsigmoid(h) + (1 - c) * F.logsigmoid(-h))
    if reduction == "mean":
        out = loss.mean()
    elif reduction == "sum":
        out = loss.sum()
    elif reduction == "none":
        out = loss
    else:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return out, h.detach()
