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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import MujocoConfig
from .mujoco_env import Stepper as _Stepper
from .mujoco_env import make_env
from .replay import ReplayBuffer
from .sac import SAC
from .segments import RewardMLP, Segments, aihf_segment_loss, chop_segments, segment_returns

__all__ = ["RewardMLP", "SAC", "ReplayBuffer", "Segments", "segment_returns", "aihf_segment_loss", "make_env",
           "chop_segments", "train_mujoco", "run_mujoco"]

log = logging.getLogger("iclr25.aihf")


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
