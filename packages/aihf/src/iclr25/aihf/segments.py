"""Trajectory segments of the MuJoCo task: the state-action reward MLP, segment returns, chopping rollouts into
segments, and the AIHF loss over demonstration / agent / preference segments."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .losses import aihf_reward_loss
from .sac import mlp

__all__ = ["RewardMLP", "Segments", "segment_returns", "chop_segments", "aihf_segment_loss"]


class RewardMLP(nn.Module):
    """``r_theta(s, a)``: an MLP on ``concat(s, a)``, ReLU, output clamped to ``[-clip, clip]`` (ML-IRL).

    ``forward(obs (..., d_s) float32, act (..., d_a) float32 in [-1, 1]) -> (...,)``.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...] = (64, 64), clip: float = 10.0):
        super().__init__()
        self.net = mlp(obs_dim + act_dim, hidden, 1)
        self.clip = float(clip)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, act], -1)).squeeze(-1).clamp(-self.clip, self.clip)


def segment_returns(reward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], obs: torch.Tensor,
                    act: torch.Tensor, gamma: float) -> torch.Tensor:
    """``R(seg) = sum_{t<L} gamma^t r(s_t, a_t)`` for a batch of segments (spec: ``R_theta(tau)``).

    Args:
        reward: maps ``(N, L, d_s)``, ``(N, L, d_a)`` to per-step rewards ``(N, L)``.
        obs: ``(N, L, d_s)``; act: ``(N, L, d_a)``.
        gamma: discount in [0, 1].

    Returns:
        ``(N,)`` discounted returns (differentiable in the reward's parameters).
    """
    if obs.dim() != 3 or act.dim() != 3 or obs.shape[:2] != act.shape[:2]:
        raise ValueError(f"segments must be (N, L, d): obs {tuple(obs.shape)}, act {tuple(act.shape)}")
    r = reward(obs, act)
    disc = gamma ** torch.arange(obs.shape[1], dtype=r.dtype, device=r.device)
    return (r * disc).sum(-1)


@dataclass
class Segments:
    """A batch of ``N`` segments of ``L`` steps: ``obs (N, L, d_s)``, ``act (N, L, d_a)`` (normalised to [-1, 1]),
    ``true_r (N, L)`` (the environment's reward; used only to label preferences and to evaluate)."""

    obs: np.ndarray
    act: np.ndarray
    true_r: np.ndarray

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    def true_returns(self, gamma: float) -> np.ndarray:
        return (self.true_r * gamma ** np.arange(self.true_r.shape[1])).sum(-1)

    def tensors(self, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.as_tensor(self.obs, dtype=torch.float32, device=device),
                torch.as_tensor(self.act, dtype=torch.float32, device=device))


def chop_segments(obs: np.ndarray, act: np.ndarray, true_r: np.ndarray, episode: np.ndarray, length: int) -> Segments:
    """Cut a stream of steps into non-overlapping segments of ``length`` steps that never cross an episode end.

    Args:
        obs ``(T, d_s)``, act ``(T, d_a)``, true_r ``(T,)``, episode ``(T,)`` int episode ids (non-decreasing).

    Returns:
        :class:`Segments` (possibly empty); leftovers shorter than ``length`` are dropped.
    """
    starts: list[int] = []
    bounds = np.flatnonzero(np.diff(episode)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(episode)]):
        starts.extend(range(int(lo), int(hi) - length + 1, length))
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(length)[None, :]
    if len(starts) == 0:
        idx = np.zeros((0, length), dtype=np.int64)
    return Segments(obs[idx], act[idx], true_r[idx])


def aihf_segment_loss(reward: nn.Module, demo: Segments | None, agent: Segments | None, chosen: Segments | None,
                      rejected: Segments | None, *, w: float, beta: float, gamma: float, demo_loss: str = "irl",
                      device: str = "cpu") -> tuple[torch.Tensor, dict[str, float]]:
    """The AIHF reward loss over segments (minimise): ``w * L_D + (1 - w) * L_P`` (spec "Bi-level objective").

    ``L_D``: every demonstration segment is contrasted with the mean return of all agent segments
    (``r_agent`` of :func:`~iclr25.aihf.losses.aihf_reward_loss` is the ``(N_D, M)`` matrix of the ``M`` agent
    returns, uniform weights), so with ``demo_loss='irl'`` its gradient is
    ``-(1/beta)(mean grad R(demo) - mean grad R(agent))``, the ML-IRL identity.

    Returns:
        ``(loss, parts)`` with ``parts`` = ``demo_term``, ``pref_term`` (each ``nan`` when unused), ``pref_acc``.

    Raises:
        ValueError: a weighted term without data, NaN/inf rewards (from ``aihf_reward_loss``).
    """
    r_demo = r_agent = r_c = r_r = None
    parts = {"demo_term": math.nan, "pref_term": math.nan, "pref_acc": math.nan}
    if w > 0 and demo is not None and len(demo) > 0:
        if agent is None or len(agent) == 0:
            raise ValueError("no agent segment to contrast the demonstrations with: the policy step produced no "
                             "complete segment (episodes shorter than --segment-len); lower --segment-len or raise "
                             "--policy-steps")
        r_demo = segment_returns(reward, *demo.tensors(device), gamma)
        ra = segment_returns(reward, *agent.tensors(device), gamma)
        r_agent = ra.unsqueeze(0).expand(len(demo), -1)
        d = aihf_reward_loss(r_demo, r_agent, None, None, w=1.0, beta=beta, demo_loss=demo_loss)
        parts["demo_term"] = float(d.detach())
    if w < 1 and chosen is not None and len(chosen) > 0:
        assert rejected is not None
        r_c = segment_returns(reward, *chosen.tensors(device), gamma)
        r_r = segment_returns(reward, *rejected.tensors(device), gamma)
        parts["pref_term"] = float(aihf_reward_loss(None, None, r_c, r_r, w=0.0).detach())
        parts["pref_acc"] = float((r_c > r_r).float().mean())
    loss = aihf_reward_loss(r_demo, r_agent, r_c, r_r, w=w, beta=beta, demo_loss=demo_loss)
    return loss, parts
