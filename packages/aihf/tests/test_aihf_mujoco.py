"""MuJoCo AIHF: the segment loss against a hand computation (fast) and a 1,000-step CPU smoke run (slow)."""

import json
import math

import numpy as np
import pytest
import torch

from iclr25.aihf.config import MujocoConfig
from iclr25.aihf.mujoco import Segments, aihf_segment_loss, chop_segments, segment_returns


def _segs(rng, n, length, ds=3, da=2):
    return Segments(rng.normal(size=(n, length, ds)).astype(np.float32),
                    rng.uniform(-1, 1, size=(n, length, da)).astype(np.float32), np.zeros((n, length), np.float32))


class _Linear(torch.nn.Module):
    """r(s, a) = phi(s, a)^T theta with phi = concat(s, a)."""

    def __init__(self, theta):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor(theta, dtype=torch.float32))

    def forward(self, o, a):
        return torch.cat([o, a], -1) @ self.theta


@pytest.mark.parametrize("w", [0.0, 0.3, 1.0])
def test_segment_loss_matches_hand_computation(w):
    rng = np.random.default_rng(0)
    gamma, beta, length = 0.9, 0.5, 4
    demo, agent, ch, rej = _segs(rng, 3, length), _segs(rng, 5, length), _segs(rng, 4, length), _segs(rng, 4, length)
    theta = rng.normal(size=5)
    reward = _Linear(theta)
    loss, parts = aihf_segment_loss(reward, demo, agent, ch, rej, w=w, beta=beta, gamma=gamma)
    loss.backward()

    # independent numpy: discounted feature sums Phi(seg) = sum_t gamma^t phi_t, R = Phi theta
    disc = gamma ** np.arange(length)

    def phi(s):
        return (np.concatenate([s.obs, s.act], -1).astype(np.float64) * disc[None, :, None]).sum(1)

    pd, pa, pc, pr = phi(demo), phi(agent), phi(ch), phi(rej)
    demo_term = -(pd @ theta).mean() / beta + (pa @ theta).mean() / beta
    delta = (pc - pr) @ theta
    pref_term = np.mean(np.log1p(np.exp(-delta)))
    want = w * demo_term + (1 - w) * pref_term
    sig = 1 / (1 + np.exp(-delta))
    grad = -w / beta * (pd.mean(0) - pa.mean(0)) - (1 - w) * ((1 - sig)[:, None] * (pc - pr)).mean(0)
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(reward.theta.grad.numpy(), grad, rtol=1e-4, atol=1e-5)
    if 0 < w < 1:
        assert parts["demo_term"] == pytest.approx(demo_term, rel=1e-5)
        assert parts["pref_term"] == pytest.approx(pref_term, rel=1e-5)
        assert parts["pref_acc"] == pytest.approx(float(np.mean(delta > 0)))


def test_segment_returns_discount():
    o, a = torch.zeros(1, 3, 1), torch.zeros(1, 3, 1)
    r = segment_returns(lambda o, a: torch.tensor([[1.0, 2.0, 4.0]]), o, a, 0.5)
    assert float(r) == pytest.approx(1 + 0.5 * 2 + 0.25 * 4)
    with pytest.raises(ValueError, match="segments must be"):
        segment_returns(lambda o, a: o, torch.zeros(3, 1), torch.zeros(3, 1), 0.5)


def test_chop_segments_respects_episode_ends():
    ep = np.array([0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2])
    t = np.arange(len(ep), dtype=np.float32)
    s = chop_segments(t[:, None], t[:, None], t, ep, 2)
    # episode 0 (steps 0-4) -> [0,1], [2,3]; episode 1 (5-6) -> [5,6]; episode 2 (7-10) -> [7,8], [9,10]
    np.testing.assert_array_equal(s.true_r, [[0, 1], [2, 3], [5, 6], [7, 8], [9, 10]])
    assert len(chop_segments(t[:, None], t[:, None], t, ep, 6)) == 0


def test_missing_agent_segments_is_an_error():
    rng = np.random.default_rng(0)
    empty = chop_segments(np.zeros((0, 3)), np.zeros((0, 2)), np.zeros(0), np.zeros(0, int), 4)
    with pytest.raises(ValueError, match="segment-len"):
        aihf_segment_loss(_Linear(np.zeros(5)), _segs(rng, 2, 4), empty, None, None, w=1.0, beta=1.0, gamma=0.9)


def test_mujoco_config_validation():
    with pytest.raises(ValueError, match="n_pref"):
        MujocoConfig(n_pref=0, w=0.5)
    with pytest.raises(ValueError, match="beta"):
        MujocoConfig(beta=float("nan"))
    with pytest.raises(ValueError, match="policy_steps"):
        MujocoConfig(total_steps=10, policy_steps=20)


@pytest.mark.slow
def test_mujoco_smoke_1000_steps(tmp_path):
    """1,000 AIHF environment steps on HalfCheetah-v5 (CPU) with random-policy demonstrations/preferences."""
    pytest.importorskip("gymnasium")
    pytest.importorskip("mujoco")
    from safetensors.torch import load_file

    from iclr25.aihf.cli import main

    out = tmp_path / "mj"
    rc = main(["mujoco", "--env", "HalfCheetah-v5", "--total-steps", "1000", "--policy-steps", "200",
               "--expert-steps", "0", "--start-steps", "200", "--segment-len", "10", "--n-demo", "10",
               "--n-pref", "10", "--eval-episodes", "0", "--sac-hidden", "64", "64", "--reward-lr", "1e-3",
               "--threads", "1", "--quiet", "--out", str(out)])
    assert rc == 0
    for f in ("config.json", "results.json", "results.md", "log.jsonl", "checkpoint.safetensors"):
        assert (out / f).is_file(), f
    res = json.loads((out / "results.json").read_text())
    assert res["env_steps"] == 1000 and res["iterations"] == 5
    for k in ("reward_loss", "demo_term", "pref_term", "critic_loss", "actor_loss"):
        assert math.isfinite(res[k]), k
    assert res["reward_param_change"] > 0 and res["policy_param_change"] > 0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log] == [1, 2, 3, 4, 5]
    assert len({r["reward_loss"] for r in log}) > 1  # the reward step moved the loss
    ckpt = load_file(str(out / "checkpoint.safetensors"))
    assert any(k.startswith("reward.") for k in ckpt) and any(k.startswith("actor.") for k in ckpt)
    assert all(torch.isfinite(v).all() for v in ckpt.values())
