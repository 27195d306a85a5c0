"""The Q-Adapter objective as pure tensor functions (paper Sec. 3-4; official ``utils/q_adapter.py``).

Notation. ``q`` is ``Q_theta(s, .)`` for a sequence of states ``s_0 .. s_{S-1}``: shape ``[B, S, V]``
(for a causal LM: the logits with the adapter on, position ``t`` = state ``x_{<=t}``). ``base_logp`` is
``log pi_1(. | s)`` of the same states, ``[B, S, V]``. ``actions[b, t]`` is the action taken in state
``s_t`` (the token at position ``t+1``), ``[B, S-1]``; ``action_mask`` marks the actions that belong to
the response, ``[B, S-1]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import QAdapterConfig

__all__ = [
    "policy_logits",
    "soft_values",
    "action_mask",
    "residual_rewards",
    "sequence_rewards",
    "qadapter_loss",
    "implicit_scores",
]


def policy_logits(q: torch.Tensor, base_logp: torch.Tensor, alpha_tilde: float, alpha_0: float) -> torch.Tensor:
    """Logits of the customised policy ``(Q + alpha_0 log pi_1) / alpha_tilde`` (residual-Q policy).

    Args:
        q: ``[..., V]`` float Q-values (nats).
        base_logp: ``[..., V]`` float base log-probabilities (nats), same shape.
    Returns:
        ``[..., V]`` float32 logits; ``log_softmax`` of them is ``log pi~``.
    """
    # (alpha_0 log pi_1 + Q) / alpha~ with one [..., V] buffer instead of three (the same IEEE operations in the
    # same order, addition commuting exactly: bitwise the former (q + alpha_0 * base) / alpha~)
    out = base_logp.float().mul(alpha_0)
    return out.add_(q.float()).div_(alpha_tilde)


def soft_values(q: torch.Tensor, base_logp: torch.Tensor, alpha_tilde: float, alpha_0: float) -> torch.Tensor:
    """Soft state value ``V(s) = alpha~ logsumexp_a((Q(s,a) + alpha_0 log pi_1(a|s)) / alpha~)``.

    Args: as :func:`policy_logits`. Returns: ``[...]`` float32 (last axis reduced).
    """
    return alpha_tilde * torch.logsumexp(policy_logits(q, base_logp, alpha_tilde, alpha_0), dim=-1)


def action_mask(response_mask: torch.Tensor, attention_mask: torch.Tensor, alignment: str = "shifted") -> torch.Tensor:
    """Mask of the response actions of a right- or left-padded LM batch.

    Args:
        response_mask: ``[B, L]`` 0/1, 1 on response tokens (prompt and padding 0).
        attention_mask: ``[B, L]`` 0/1.
        alignment: ``"shifted"``: action ``t`` (which emits token ``t+1``) counts when token ``t+1`` is
            a response token; ``"code"``: when token ``t`` is (the official code's
            ``attention_mask & labels != -100`` at ``[:, :-1]``).
    Returns:
        ``[B, L-1]`` float32 0/1.
    Raises:
        ValueError: unknown ``alignment`` or mismatching shapes.
    """
    if response_mask.shape != attention_mask.shape:
        raise ValueError(f"response_mask {tuple(response_mask.shape)} != attention_mask {tuple(attention_mask.shape)}")
    m = (response_mask.bool() & attention_mask.bool()).float()
    if alignment == "shifted":
        return m[:, 1:]
    if alignment == "code":
        return m[:, :-1]
    raise ValueError(f"alignment must be 'shifted' or 'code', got {alignment!r}")


def residual_rewards(
    q: torch.Tensor,
    base_logp: torch.Tensor,
    actions: torch.Tensor,
    mask: torch.Tensor,
    cfg: QAdapterConfig,
) -> torch.Tensor:
    """Per-action reward of the inverted residual Bellman equation ``r_2 = Q(s,a) - gamma V(s')``.

    With ``cfg.value_index == "next"`` (paper) ``V`` is taken at the next state and is 0 where the next
    state has no masked action (terminal, after EOS or the end of the response); with ``"same"``
    (official code) it is ``V(s_t)``.

    Args:
        q: ``[B, S, V]`` Q-values (adapter-on logits).
        base_logp: ``[B, S, V]`` base log-probs (detached by the caller).
        actions: ``[B, S-1]`` long, action taken in ``s_t``.
        mask: ``[B, S-1]`` 0/1 response actions.
        cfg: the config (``alpha_tilde``, ``alpha_0``, ``gamma``, ``value_index``).
    Returns:
        ``[B, S-1]`` float32 rewards (nats), 0 where ``mask == 0``.
    """
    if q.dim() != 3 or q.shape != base_logp.shape:
        raise ValueError(f"q {tuple(q.shape)} and base_logp {tuple(base_logp.shape)} must both be [B, S, V]")
    if actions.shape != (q.shape[0], q.shape[1] - 1) or mask.shape != actions.shape:
        raise ValueError(f"actions {tuple(actions.shape)} / mask {tuple(mask.shape)} must be [B, S-1] = "
                         f"{(q.shape[0], q.shape[1] - 1)}")
    q = q.float()
    mask = mask.float()
    values = soft_values(q, base_logp, cfg.alpha_tilde, cfg.alpha_0)  # [B, S]
    q_taken = q[:, :-1].gather(-1, actions.unsqueeze(-1)).squeeze(-1)  # [B, S-1]
    if cfg.value_index == "next":
        nonterminal = torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], dim=1)
        v = values[:, 1:] * nonterminal
    else:
        v = values[:, :-1]
    return (q_taken - cfg.gamma * v) * mask


def sequence_rewards(rewards: torch.Tensor, mask: torch.Tensor, normalize: str = "none") -> torch.Tensor:
    """``R(x, y) = sum_t r_t`` over the response actions, scaled as ``normalize`` says.

    Args:
        rewards, mask: ``[B, T]``.
        normalize: ``"none"`` | ``"padded"`` (divide by ``T``, the official code) | ``"tokens"`` (divide
            each row by its number of masked actions).
    Returns: ``[B]`` float32.
    """
    total = (rewards * mask).sum(-1)
    if normalize == "none":
        return total
    if normalize == "padded":
        return total / rewards.shape[1]
    if normalize == "tokens":
        return total / mask.sum(-1).clamp(min=1)
    raise ValueError(f"normalize must be 'padded', 'tokens' or 'none', got {normalize!r}")


def qadapter_loss(
    rewards: torch.Tensor,
    mask: torch.Tensor,
    cfg: QAdapterConfig,
    *,
    chosen_first: bool = True,
    soft_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Bradley-Terry loss on the residual rewards plus the official code's regulariser.

    ``L = mean_pairs softplus(-(R_w - R_l)) + reg_beta * sum(mask r^2) / sum(mask)`` (paper Eq. for
    ``L(theta)``; the second term is the code's ``chi2_loss``). The target is the *chosen* response
    (the official repo's label 0; an older mirror used 1, which trains toward the rejected one).

    Args:
        rewards: ``[2B, T]`` per-action rewards from :func:`residual_rewards`; rows ``0..B-1`` are the
            chosen responses and ``B..2B-1`` the rejected ones (``chosen_first=False``: interleaved
            ``w, l, w, l, ...``).
        mask: ``[2B, T]`` response-action mask.
        cfg: ``normalize``, ``reg_beta``.
        soft_labels: optional ``[B]`` probability that the first response is preferred (for the
            population loss of the tabular check); default 1.
    Returns:
        ``(loss, stats)``: scalar loss and floats ``pref_loss``, ``reg_loss``, ``margin``,
        ``accuracy``, ``reward_mean``.
    Raises:
        ValueError: odd batch or shape mismatch.
    """
    if rewards.shape != mask.shape or rewards.dim() != 2 or rewards.shape[0] % 2:
        raise ValueError(f"rewards {tuple(rewards.shape)} and mask {tuple(mask.shape)} must be equal [2B, T]")
    mask = mask.float()
    R = sequence_rewards(rewards, mask, cfg.normalize)
    if chosen_first:
        b = R.shape[0] // 2
        r_w, r_l = R[:b], R[b:]
    else:
        r_w, r_l = R[0::2], R[1::2]
    margin = r_w - r_l
    if soft_labels is None:
        pref = F.softplus(-margin).mean()
    else:
        pref = (soft_labels * F.softplus(-margin) + (1 - soft_labels) * F.softplus(margin)).mean()
    n = mask.sum().clamp(min=1)
    reg = cfg.reg_beta * (rewards.pow(2) * mask).sum() / n if cfg.reg_beta > 0 else rewards.new_zeros(())
    loss = pref + reg
    stats = {
        "pref_loss": float(pref.detach()),
        "reg_loss": float(reg.detach()),
        "margin": float(margin.detach().mean()),
        "accuracy": float((margin.detach() > 0).float().mean()),
        "reward_mean": float(((rewards * mask).sum() / n).detach()),
    }
    return loss, stats


def implicit_scores(
    policy_logp: torch.Tensor,
    base_logp: torch.Tensor,
    actions: torch.Tensor,
    mask: torch.Tensor,
    alpha_tilde: float,
    alpha_0: float,
) -> torch.Tensor:
    """Telescoped sequence reward without the shared ``V(x)``:
    ``alpha~ log pi~(y|x) - alpha_0 log pi_1(y|x)`` (Sec. 1.3 of the spec; used to rank responses).

    Args:
        policy_logp, base_logp: ``[B, S, V]`` log-probs of ``pi~`` and ``pi_1``.
        actions, mask: ``[B, S-1]``.
    Returns: ``[B]`` float32.
    """
    lp = policy_logp[:, :-1].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    lb = base_logp[:, :-1].gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    return ((alpha_tilde * lp - alpha_0 * lb) * mask).sum(-1)
