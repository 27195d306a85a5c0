"""AIHF for continuous control (MuJoCo through gymnasium; spec "Algorithm", MuJoCo branch; paper Appendix A.2.1).

The bilevel objective of the spec with a state-action reward MLP ``r_theta(s, a)`` and a SAC lower level:

- **Data** over trajectory *segments* of ``L`` steps: demonstrations ``D`` (segments of the demonstrator) and
  preference pairs ``P`` (pairs of segments of an epsilon-noisy demonstrator, labelled by Bradley-Terry on the true
  discounted segment return). ``R_theta(seg) = sum_{t<L} gamma^t r_theta(s_t, a_t)``.
- **Policy step** (2.1): ``K = policy_steps`` SAC steps (one environment step and one gradient update each) under
  the current learned reward, relabelled at sampling time; fixed temperature ``alpha = beta`` (entropy
  regularisation = KL to the uniform ``pi_ref``).
- **Sampling** (2.2): the agent segments are the segments of the ``K`` steps just collected by the current policy.
- **Reward step** (2.3): Adam on ``w * L_D + (1 - w) * L_P`` from :func:`iclr25.aihf.losses.aihf_reward_loss`,
  with the segment returns in place of the one-step rewards: ``L_D = -(1/beta)(R(demo) - mean R(agent))`` (ML-IRL
  gradient) and ``L_P = -log sigmoid(R(chosen) - R(rejected))``.

The demonstrator is SAC trained on the TRUE reward for ``expert_steps`` steps (the ML-IRL recipe); with
``expert_steps=0`` the data come from a uniformly random policy, which is only good for a smoke test.

Needs the ``[mujoco]`` extra (``pip install 'iclr25-aihf[mujoco]'``). The SAC here is this package's own compact
torch implementation (Haarnoja et al. 2018: twin critics, target critics with Polyak averaging, tanh-Gaussian actor,
fixed temperature), README deviation list.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .config import MujocoConfig
from .losses import aihf_reward_loss

__all__ = ["RewardMLP", "SAC", "ReplayBuffer", "Segments", "segment_returns", "aihf_segment_loss", "make_env",
           "chop_segments", "train_mujoco", "run_mujoco"]

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


def _mlp(n_in: int, hidden: tuple[int, ...], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(n_in, h), nn.ReLU()]
        n_in = h
    layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class RewardMLP(nn.Module):
    """``r_theta(s, a)``: an MLP on ``concat(s, a)``, ReLU, output clamped to ``[-clip, clip]`` (ML-IRL).

    ``forward(obs (..., d_s) float32, act (..., d_a) float32 in [-1, 1]) -> (...,)``.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...] = (64, 64), clip: float = 10.0):
        super().__init__()
        self.net = _mlp(obs_dim + act_dim, hidden, 1)
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


class SAC(nn.Module):
    """Compact soft actor-critic with a fixed temperature ``alpha`` (the lower level's ``beta``).

    Actions live in ``[-1, 1]^d_a`` (tanh-Gaussian); :meth:`update` takes a ``reward_fn(obs, act) -> (B,)`` so the
    same learner trains on the true reward (expert) or on the learned ``r_theta`` (AIHF policy step).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...] = (256, 256), lr: float = 1e-3,
                 gamma: float = 0.99, alpha: float = 0.2, tau: float = 0.005):
        super().__init__()
        self.actor = _mlp(obs_dim, hidden, 2 * act_dim)
        self.q1, self.q2 = _mlp(obs_dim + act_dim, hidden, 1), _mlp(obs_dim + act_dim, hidden, 1)
        self.q1_t, self.q2_t = _mlp(obs_dim + act_dim, hidden, 1), _mlp(obs_dim + act_dim, hidden, 1)
        self.q1_t.load_state_dict(self.q1.state_dict())
        self.q2_t.load_state_dict(self.q2.state_dict())
        for p in (*self.q1_t.parameters(), *self.q2_t.parameters()):
            p.requires_grad_(False)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.q_opt = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=lr)
        self.gamma, self.alpha, self.tau = gamma, alpha, tau

    def _dist(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, log_std = self.actor(obs).chunk(2, -1)
        return mu, log_std.clamp(-20, 2)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised ``a = tanh(u)``, ``u ~ N(mu, sigma)``; returns ``(a (B, d_a), log pi(a|s) (B,))``."""
        mu, log_std = self._dist(obs)
        u = mu + log_std.exp() * torch.randn_like(mu)
        logp = torch.distributions.Normal(mu, log_std.exp()).log_prob(u).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)  # tanh Jacobian, stable form
        return torch.tanh(u), logp

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        o = torch.as_tensor(obs, dtype=torch.float32, device=self._device()).unsqueeze(0)
        a = torch.tanh(self._dist(o)[0]) if deterministic else self.sample(o)[0]
        return a.squeeze(0).cpu().numpy()

    def _device(self) -> torch.device:
        return next(self.actor.parameters()).device

    def _q(self, q1, q2, o, a) -> torch.Tensor:
        x = torch.cat([o, a], -1)
        return torch.min(q1(x), q2(x)).squeeze(-1)

    def update(self, b: dict[str, torch.Tensor], reward_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
               ) -> tuple[float, float]:
        """One critic and one actor step on minibatch ``b``; returns ``(critic_loss, actor_loss)``."""
        with torch.no_grad():
            r = reward_fn(b["obs"], b["act"])
            a2, logp2 = self.sample(b["next_obs"])
            target = r + self.gamma * (1 - b["done"]) * (self._q(self.q1_t, self.q2_t, b["next_obs"], a2)
                                                        - self.alpha * logp2)
        x = torch.cat([b["obs"], b["act"]], -1)
        q_loss = F.mse_loss(self.q1(x).squeeze(-1), target) + F.mse_loss(self.q2(x).squeeze(-1), target)
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()
        a, logp = self.sample(b["obs"])
        pi_loss = (self.alpha * logp - self._q(self.q1, self.q2, b["obs"], a)).mean()
        self.pi_opt.zero_grad(set_to_none=True)
        pi_loss.backward()
        self.pi_opt.step()
        with torch.no_grad():
            for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.lerp_(p, self.tau)
        ql, pl = float(q_loss.detach()), float(pi_loss.detach())
        if not (math.isfinite(ql) and math.isfinite(pl)):
            raise FloatingPointError(f"SAC loss is not finite (critic {ql}, actor {pl}); lower --sac-lr or "
                                     "--reward-clip")
        return ql, pl


class _Stepper:
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


def _collect(stepper: _Stepper, policy, n: int, length: int, what: str) -> Segments:
    """Roll ``policy`` until ``n`` complete segments of ``length`` steps exist (fresh episode first)."""
    if n == 0:
        return chop_segments(np.zeros((0, 1)), np.zeros((0, 1)), np.zeros(0), np.zeros(0, int), length)
    stepper.obs, _ = stepper.env.reset()
    stepper.episode += 1
    got: list[Segments] = []
    have, tries = 0, 0
    while have < n:
        tries += 1
        if tries > 50:
            raise ValueError(f"{what}: fewer than {n} segments of {length} steps in {tries - 1} rollouts (episodes end "
                             "too early); lower --segment-len")
        s = chop_segments(*stepper.rollout(policy, max(n * length, 100)), length)
        got.append(s)
        have += len(s)
    return Segments(*(np.concatenate([getattr(g, k) for g in got])[:n] for k in ("obs", "act", "true_r")))


def _run_sac(stepper: _Stepper, sac: SAC, buf: ReplayBuffer, steps: int, reward_fn, cfg: MujocoConfig,
             rng: np.random.Generator, device: str, random_steps: int, bar=None) -> dict[str, Any]:
    """``steps`` SAC steps (first ``random_steps`` with uniform actions); returns the collected stream and losses."""
    obs, act, rew, eps = [], [], [], []
    ql = pl = math.nan
    for i in range(steps):
        if i < random_steps:
            a = rng.uniform(-1.0, 1.0, buf.act.shape[1])
        else:
            a = sac.act(stepper.obs)
        o, a, r, o2, term, ep = stepper.step(a)
        buf.add(o, a, r, o2, float(term))
        obs.append(o)
        act.append(a)
        rew.append(r)
        eps.append(ep)
        if buf.size >= cfg.batch_size:
            ql, pl = sac.update(buf.sample(cfg.batch_size, rng, device), reward_fn)
        if bar is not None:
            bar.update(1)
    return {"obs": np.asarray(obs, np.float32), "act": np.asarray(act, np.float32), "rew": np.asarray(rew, np.float32),
            "episode": np.asarray(eps), "critic_loss": ql, "actor_loss": pl}


def _evaluate(env_id: str, sac: SAC, episodes: int, seed: int) -> tuple[float, float]:
    """Mean and sd of the TRUE undiscounted return of the deterministic policy over ``episodes`` episodes."""
    if episodes == 0:
        return math.nan, math.nan
    env = make_env(env_id, seed + 10_000)
    st = _Stepper(env, seed + 10_000)
    rets = []
    for _ in range(episodes):
        ep0, total = st.episode, 0.0
        while st.episode == ep0:
            total += st.step(sac.act(st.obs, deterministic=True))[2]
        rets.append(total)
    env.close()
    return float(np.mean(rets)), float(np.std(rets))


def _flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten().cpu() for p in module.parameters()])


def train_mujoco(cfg: MujocoConfig, out: Path | None = None) -> dict[str, Any]:
    """Run AIHF on a MuJoCo environment (module docstring); writes ``out/checkpoint.safetensors`` (reward, actor,
    critics; every ``checkpoint_every`` iterations and at the end) and ``out/log.jsonl`` (one record per outer
    iteration) when ``out`` is given.

    Returns:
        A metrics dict: final losses, parameter changes, preference accuracy of ``r_theta``, correlation of
        ``r_theta`` with the true reward on the agent's last transitions, the true evaluation return and step counts.

    Raises:
        ImportError: the ``[mujoco]`` extra is missing. ValueError: bad data (no segments). FloatingPointError: a
        non-finite loss.
    """
    from safetensors.torch import save_file

    from iclr25.core import choose_device, seed_everything
    from iclr25.core.jsonl import append_jsonl
    from iclr25.core.progress import progress

    rng = seed_everything(cfg.seed)
    device = choose_device(cfg.device)
    env = make_env(cfg.env, cfg.seed)
    obs_dim, act_dim = int(env.observation_space.shape[0]), int(env.action_space.shape[0])
    stepper = _Stepper(env, cfg.seed)
    t0 = time.perf_counter()

    def new_sac() -> SAC:
        return SAC(obs_dim, act_dim, cfg.sac_hidden, cfg.sac_lr, cfg.gamma, cfg.beta, cfg.tau).to(device)

    # 1. the demonstrator (SAC on the true reward) and the data
    expert_return = math.nan
    if cfg.expert_steps > 0:
        expert = new_sac()
        ebuf = ReplayBuffer(obs_dim, act_dim, min(cfg.buffer_size, cfg.expert_steps))
        with progress(total=cfg.expert_steps, desc="expert SAC (true reward)", unit="step", quiet=cfg.quiet) as bar:
            _run_expert(stepper, expert, ebuf, cfg, rng, device, bar)
        expert_return = _evaluate(cfg.env, expert, max(cfg.eval_episodes, 1), cfg.seed)[0]
        demo_policy = expert.act
        del ebuf
    else:
        def demo_policy(o: np.ndarray) -> np.ndarray:
            return rng.uniform(-1.0, 1.0, act_dim)

    def noisy_policy(o: np.ndarray) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, act_dim) if rng.random() < cfg.pref_noise else demo_policy(o)

    steps_before = stepper.steps
    demo = _collect(stepper, demo_policy, cfg.n_demo, cfg.segment_len, "demonstrations")
    pair = _collect(stepper, noisy_policy, 2 * cfg.n_pref, cfg.segment_len, "preference segments")
    data_steps = stepper.steps - steps_before
    ret = pair.true_returns(cfg.gamma)
    a_ret, b_ret = ret[: cfg.n_pref], ret[cfg.n_pref:]
    first = rng.random(cfg.n_pref) < 1.0 / (1.0 + np.exp(-(a_ret - b_ret)))  # BT labels on the true returns
    ia, ib = np.arange(cfg.n_pref), np.arange(cfg.n_pref) + cfg.n_pref
    ci, ri = np.where(first, ia, ib), np.where(first, ib, ia)
    chosen = Segments(pair.obs[ci], pair.act[ci], pair.true_r[ci])
    rejected = Segments(pair.obs[ri], pair.act[ri], pair.true_r[ri])

    # 2. the single loop: K SAC steps under r_theta, then the reward step
    reward = RewardMLP(obs_dim, act_dim, cfg.reward_hidden, cfg.reward_clip).to(device)
    ropt = torch.optim.Adam(reward.parameters(), lr=cfg.reward_lr, weight_decay=cfg.reward_weight_decay)
    sac = new_sac()
    buf = ReplayBuffer(obs_dim, act_dim, min(cfg.buffer_size, cfg.total_steps))
    reward0, actor0 = _flat(reward), _flat(sac.actor)
    iters = cfg.total_steps // cfg.policy_steps

    def learned(o: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return reward(o, a)

    def save() -> None:
        if out is None:
            return
        state = {f"reward.{k}": v for k, v in reward.state_dict().items()}
        for name in ("actor", "q1", "q2", "q1_t", "q2_t"):
            state.update({f"{name}.{k}": v for k, v in getattr(sac, name).state_dict().items()})
        tmp = out / "checkpoint.safetensors.tmp"
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(tmp),
                  metadata={"iteration": str(it + 1), "env": cfg.env, "obs_dim": str(obs_dim), "act_dim": str(act_dim)})
        tmp.replace(out / "checkpoint.safetensors")

    rec: dict[str, Any] = {}
    stream: dict[str, Any] = {}
    with progress(total=iters * cfg.policy_steps, desc="AIHF (SAC + reward steps)", unit="step",
                  quiet=cfg.quiet) as bar:
        for it in range(iters):
            reward.eval()
            random_steps = max(0, min(cfg.policy_steps, cfg.start_steps - it * cfg.policy_steps))
            stream = _run_sac(stepper, sac, buf, cfg.policy_steps, learned, cfg, rng, device, random_steps, bar)
            agent = chop_segments(stream["obs"], stream["act"], stream["rew"], stream["episode"], cfg.segment_len)
            reward.train()
            for _ in range(cfg.reward_steps):
                loss, parts = aihf_segment_loss(reward, demo, agent, chosen, rejected, w=cfg.w, beta=cfg.beta,
                                                gamma=cfg.gamma, demo_loss=cfg.demo_loss, device=device)
                ropt.zero_grad(set_to_none=True)
                loss.backward()
                ropt.step()
            rec = {"iteration": it + 1, "env_steps": (it + 1) * cfg.policy_steps, "reward_loss": float(loss.detach()),
                   **parts, "critic_loss": stream["critic_loss"], "actor_loss": stream["actor_loss"],
                   "agent_segments": len(agent), "agent_true_return_per_step": float(stream["rew"].mean())}
            if not math.isfinite(rec["reward_loss"]):
                raise FloatingPointError(f"iteration {it + 1}: the reward loss is {rec['reward_loss']}; lower "
                                         "--reward-lr")
            if out is not None:
                append_jsonl(out / "log.jsonl", [rec], fsync=False)
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == iters:
                save()
    # 3. diagnostics (no claim): does r_theta track the true reward on the agent's last transitions?
    with torch.no_grad():
        o = torch.as_tensor(stream["obs"], device=device)
        a = torch.as_tensor(stream["act"], device=device)
        r_hat = reward(o, a).cpu().numpy()
    r_true = stream["rew"]
    corr = float(np.corrcoef(r_hat, r_true)[0, 1]) if r_hat.std() > 0 and r_true.std() > 0 else math.nan
    eval_mean, eval_sd = _evaluate(cfg.env, sac, cfg.eval_episodes, cfg.seed)
    env.close()
    return {**{k: v for k, v in rec.items() if k != "iteration"}, "iterations": iters,
            "reward_param_change": float((_flat(reward) - reward0).norm()),
            "policy_param_change": float((_flat(sac.actor) - actor0).norm()),
            "reward_true_corr": corr, "eval_return": eval_mean, "eval_return_sd": eval_sd,
            "expert_eval_return": expert_return, "expert_steps": cfg.expert_steps, "data_steps": data_steps,
            "demo_true_return": float(demo.true_returns(cfg.gamma).mean()) if len(demo) else math.nan,
            "train_seconds": time.perf_counter() - t0, "device": device}


def _run_expert(stepper: _Stepper, expert: SAC, buf: ReplayBuffer, cfg: MujocoConfig, rng, device, bar) -> None:
    """SAC on the TRUE reward (stored in the buffer) for ``expert_steps`` steps: the demonstrator."""
    for i in range(cfg.expert_steps):
        a = rng.uniform(-1.0, 1.0, buf.act.shape[1]) if i < cfg.start_steps else expert.act(stepper.obs)
        o, a, r, o2, term, _ = stepper.step(a)
        buf.add(o, a, r, o2, float(term))
        if buf.size >= cfg.batch_size:
            b = buf.sample(cfg.batch_size, rng, device)
            expert.update(b, lambda _o, _a, _r=b["rew"]: _r)
        bar.update(1)


def run_mujoco(cfg: MujocoConfig) -> int:
    """``iclr25-aihf mujoco``: train, write ``config.json``, ``results.json``/``results.md``, ``log.jsonl``,
    ``checkpoint.safetensors`` into ``--out``; print a one-line summary."""
    from iclr25.core.runinfo import write_run_files

    from .commands import _md

    t0 = time.perf_counter()
    out = Path(cfg.out)  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    (out / "log.jsonl").unlink(missing_ok=True)
    write_run_files(out, cfg)
    metrics = train_mujoco(cfg, out)
    write_run_files(out, cfg, metrics, started=t0)
    (out / "results.md").write_text(_md(metrics))
    print(f"aihf mujoco: {cfg.env} w={cfg.w:g} {cfg.total_steps} steps, reward loss {metrics['reward_loss']:.4f}, "
          f"eval return {metrics['eval_return']:.1f} -> {out}/results.json")
    return 0
