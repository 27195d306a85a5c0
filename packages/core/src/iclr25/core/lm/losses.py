"""Preference losses: Bradley–Terry and DPO."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["bradley_terry_loss", "dpo_loss"]


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor,
                       reduction: str = "mean") -> torch.Tensor:
    """Negative log-likelihood of the Bradley–Terry model ``P(y_w > y_l) = sigmoid(r_w - r_l)``.

    Args:
        chosen_rewards, rejected_rewards: ``(batch,)`` float rewards of the preferred and the
            dispreferred response.
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (returns ``(batch,)``).

    Returns:
        ``-log sigmoid(r_w - r_l)`` reduced as asked.
    """
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(f"shape mismatch: {tuple(chosen_rewards.shape)} vs {tuple(rejected_rewards.shape)}")
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards)
    return _reduce(loss, reduction)


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Direct Preference Optimization loss (Rafailov et al. 2023, Eq. 7), with conservative
    label smoothing (cDPO: the label is flipped with probability ``label_smoothing``).

    ``h = beta * [(log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))]``;
    ``loss = -(1 - eps) log sigmoid(h) - eps log sigmoid(-h)``.

    Args:
        *_logps: ``(batch,)`` float summed response log-probabilities (see ``sequence_logprobs``).
        beta: the KL coefficient ``beta > 0``.
        label_smoothing: ``eps`` in ``[0, 0.5)``.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
        ``(loss, chosen_rewards, rejected_rewards)``; the implicit rewards are
        ``beta * (log pi - log ref)`` (detached), each ``(batch,)``.

    Raises:
        ValueError: ``beta <= 0``, ``label_smoothing`` outside ``[0, 0.5)``, or shape mismatch.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    shapes = {tuple(t.shape) for t in (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
                                        ref_rejected_logps)}
    if len(shapes) != 1:
        raise ValueError(f"all log-prob tensors must have one shape, got {sorted(shapes)}")
    chosen = policy_chosen_logps - ref_chosen_logps
    rejected = policy_rejected_logps - ref_rejected_logps
    h = beta * (chosen - rejected)
    loss = -(1 - label_smoothing) * F.logsigmoid(h) - label_smoothing * F.logsigmoid(-h)
    return _reduce(loss, reduction), (beta * chosen).detach(), (beta * rejected).detach()


def _reduce(x: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "mean":
        return x.mean()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
