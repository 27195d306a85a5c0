"""The MuJoCo environment wrapper of ``iclr25-aihf mujoco``: :func:`make_env` (gymnasium, the ``[mujoco]`` extra)
and the stepper that runs a policy on normalised actions and tracks episodes."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

__all__ = ["make_env", "Stepper"]

log = logging.getLogger("iclr25.aihf")


def make_env(env_id: str, seed: int):
    """``gymnasium.make(env_id)`` seeded with ``seed``; checks Box observation and action spaces.

    Raises:
        ImportError: gymnasium / mujoco missing (names the ``[mujoco]`` extra).
        ValueError: an environment without Box (continuous) observations and actions.
    """
    try:
        import gymnasium as gym
    except ImportError as e:
        raise ImportError("the MuJoCo task needs the [mujoco] extra: pip install 'iclr25-aihf[mujoco]' "
                          f"(gymnasium[mujoco]); import failed: {e}") from None
    try:
        env = gym.make(env_id)
    except gym.error.DependencyNotInstalled as e:
        raise ImportError(f"{env_id} needs the [mujoco] extra: pip install 'iclr25-aihf[mujoco]' ({e})") from None
    if not (isinstance(env.observation_space, gym.spaces.Box) and isinstance(env.action_space, gym.spaces.Box)):
        raise ValueError(f"env={env_id!r}: AIHF-SAC needs Box observations and actions, got "
                         f"{env.observation_space} / {env.action_space}")
    if not (np.all(np.isfinite(env.action_space.low)) and np.all(np.isfinite(env.action_space.high))):
        raise ValueError(f"env={env_id!r}: the action space must be bounded, got {env.action_space}")
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


class Stepper:
    """Steps one environment with a policy on normalised actions, tracking episodes; resets on episode end."""

    def __init__(self, env, seed: int):
        self.env = env
        self.low, self.high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
        self.obs, _ = env.reset(seed=seed)
        self.episode = 0
        self.steps = 0

    def step(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, bool, int]:
        a = np.clip(a, -1.0, 1.0)
        o = self.obs
        o2, r, term, trunc, _ = self.env.step(self.low + (a + 1.0) * 0.5 * (self.high - self.low))
        ep = self.episode
        self.steps += 1
        if term or trunc:
            self.obs, _ = self.env.reset()
            self.episode += 1
        else:
            self.obs = o2
        return o, a, float(r), o2, bool(term), ep

    def rollout(self, policy: Callable[[np.ndarray], np.ndarray], n_steps: int) -> tuple[np.ndarray, ...]:
        rows = [self.step(policy(self.obs)) for _ in range(n_steps)]
        o, a, r, _, _, ep = zip(*rows)
        return np.asarray(o, np.float32), np.asarray(a, np.float32), np.asarray(r, np.float32), np.asarray(ep)
