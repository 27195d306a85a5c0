"""The closed-form lower level: the KL-regularised (soft) optimal policy (spec "Bi-level objective").

One-step case (bandit, LLM): ``pi_theta(y|x) = pi_ref(y|x) exp(r_theta(x, y) / beta) / Z_theta(x)``.
MDP case: soft value iteration ``Q(s,a) = r(s,a) + gamma E_{s'|s,a} V(s')``,
``V(s) = beta log sum_a pi_ref(a|s) exp(Q(s,a) / beta)``, ``pi = pi_ref exp((Q - V) / beta)``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["soft_policy", "soft_value_iteration", "check_transitions", "mirror_step"]


def _beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    return float(beta)


def soft_policy(log_pi_ref: torch.Tensor, reward: torch.Tensor, beta: float) -> torch.Tensor:
    """The KL-regularised optimal policy of a one-step task, in log space.

    Args:
        log_pi_ref: ``(X, Y)`` float — log pi_ref(y|x) (rows are log-distributions).
        reward: ``(X, Y)`` float — r(x, y).
        beta: KL coefficient > 0.

    Returns:
        ``(X, Y)`` — ``log pi(y|x) = log_softmax(log pi_ref + r / beta)`` (rows sum to 1 after ``exp``).

    Raises:
        ValueError: ``beta <= 0`` or not finite; shape mismatch; a NaN/inf reward.
    """
    b = _beta(beta)
    if log_pi_ref.shape != reward.shape:
        raise ValueError(f"log_pi_ref shape {tuple(log_pi_ref.shape)} != reward shape {tuple(reward.shape)}")
    if not bool(torch.isfinite(reward).all()):
        raise ValueError("reward contains NaN or inf; check the reward model / parameters")
    return torch.log_softmax(log_pi_ref + reward / b, dim=-1)


def mirror_step(log_pi: torch.Tensor, log_pi_target: torch.Tensor, eta: float) -> torch.Tensor:
    """One tabular mirror (soft policy iteration) step of the single loop (spec "Algorithm", 2.1):
    ``log pi_new ∝ (1 - eta) log pi + eta log pi_target``, renormalised over the last axis."""
    return torch.log_softmax((1.0 - eta) * log_pi + eta * log_pi_target, dim=-1)


def check_transitions(P: torch.Tensor, atol: float = 1e-6) -> None:
    """Raise ``ValueError`` unless ``P`` is an ``(S, A, S)`` tensor of non-negative rows that sum to 1."""
    if P.dim() != 3 or P.shape[0] != P.shape[2]:
        raise ValueError(f"transition tensor must be (S, A, S), got shape {tuple(P.shape)}")
    if not bool(torch.isfinite(P).all()) or bool((P < 0).any()):
        raise ValueError("transition tensor has negative, NaN or inf entries")
    err = (P.sum(-1) - 1).abs()
    if bool((err > atol).any()):
        s, a = divmod(int(err.argmax()), P.shape[1])
        raise ValueError(f"transition rows must sum to 1: P[{s}, {a}, :] sums to {float(P[s, a].sum()):.6g}")


def soft_value_iteration(P: torch.Tensor, r: torch.Tensor, gamma: float, beta: float,
                         log_pi_ref: torch.Tensor | None = None, iters: int = 10_000, V0: torch.Tensor | None = None,
                         tol: float = 1e-10, return_iters: bool = False, check: bool = True):
    """Soft (KL-regularised) value iteration on a finite MDP.

    Args:
        P: ``(S, A, S)`` float — transition probabilities ``P[s, a, s']`` (rows sum to 1).
        r: ``(S, A)`` or ``(S,)`` float — reward (a state reward is broadcast over actions).
        gamma: discount in ``[0, 1)``.
        beta: KL coefficient > 0 (``beta -> 0`` approaches the greedy, hard-max policy).
        log_pi_ref: ``(S, A)`` log reference policy (default uniform: entropy regularisation).
        iters: the most Bellman backups (``tol`` usually stops earlier); a fixed small number with a warm start
            ``V0`` is the single loop's inexact policy step.
        V0: ``(S,)`` warm start (default zeros).
        tol: stop when ``max |V_new - V| < tol``.
        return_iters: also return the number of backups done.
        check: validate ``P`` (skip inside hot loops once validated).

    Returns:
        ``(log_pi, V)``: ``(S, A)`` log-policy ``log pi_ref + (Q - V) / beta`` and ``(S,)`` soft values, plus the
        iteration count when ``return_iters``.

    Raises:
        ValueError: ``gamma`` outside ``[0, 1)``, ``beta <= 0``, bad transitions, a NaN/inf reward, bad shapes.
    """
    b = _beta(beta)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) \
            or not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1), got {gamma!r}")
    if check:
        check_transitions(P)
    S, A, _ = P.shape
    if r.dim() == 1:
        r = r.unsqueeze(-1).expand(S, A)
    if tuple(r.shape) != (S, A):
        raise ValueError(f"reward must be (S, A) = ({S}, {A}) or (S,), got {tuple(r.shape)}")
    if not bool(torch.isfinite(r).all()):
        raise ValueError("reward contains NaN or inf; check the reward parameters")
    if log_pi_ref is None:
        log_pi_ref = torch.full((S, A), -math.log(A), dtype=r.dtype, device=r.device)
    V = torch.zeros(S, dtype=r.dtype, device=r.device) if V0 is None else V0.to(r.dtype).clone()
    n = 0
    for n in range(1, max(iters, 1) + 1):  # noqa: B007 (n is the returned backup count)
        Q = r + gamma * (P @ V)
        V_new = b * torch.logsumexp(log_pi_ref + Q / b, dim=-1)
        delta = float((V_new - V).abs().max())
        V = V_new
        if delta < tol:
            break
    Q = r + gamma * (P @ V)
    log_pi = torch.log_softmax(log_pi_ref + Q / b, dim=-1)
    return (log_pi, V, n) if return_iters else (log_pi, V)
