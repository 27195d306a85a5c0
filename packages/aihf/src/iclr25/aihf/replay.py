"""The replay buffer of the MuJoCo SAC policy step."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """A ring buffer of transitions (numpy, float32): obs, act (normalised), true reward, next obs, terminated."""

    def __init__(self, obs_dim: int, act_dim: int, capacity: int):
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.act = np.zeros((capacity, act_dim), np.float32)
        self.rew = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, np.float32)
        self.capacity, self.size, self.ptr = capacity, 0, 0

    def add(self, o, a, r, o2, d) -> None:
        i = self.ptr
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.done[i] = o, a, r, o2, d
        self.ptr = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n: int, rng: np.random.Generator, device: str) -> dict[str, torch.Tensor]:
        idx = rng.integers(0, self.size, n)
        return {k: torch.as_tensor(getattr(self, k)[idx], device=device)
                for k in ("obs", "act", "rew", "next_obs", "done")}
