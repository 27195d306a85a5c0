"""Unit tests: input validation (each bad input of issue 22 gives a clear error), data formats, losses."""

import gzip
import json
import math

import numpy as np
import pytest
import torch

from iclr25.aihf import (
    AIHFConfig,
    BanditTask,
    GridworldMDP,
    aihf_implicit_loss,
    aihf_reward_loss,
    soft_policy,
    soft_value_iteration,
)
from iclr25.aihf.data import (
    load_hh_pairs,
    read_agent_samples,
    read_demonstrations,
    read_preferences,
    split_hh_dialogue,
)
from iclr25.aihf.soft import check_transitions
from iclr25.core.jsonl import JsonlError


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# ---------------------------------------------------------------------------------------------- hyperparameters
@pytest.mark.parametrize("kw, field", [({"w": 1.5}, "w"), ({"w": -0.1}, "w"), ({"w": float("nan")}, "w"),
                                       ({"beta": 0.0}, "beta"), ({"beta": -1.0}, "beta"),
                                       ({"reward_lr": float("inf")}, "reward_lr"), ({"l2": -1e-3}, "l2")])
def test_config_rejects_bad_floats(kw, field):
    with pytest.raises(ValueError, match=field):
        AIHFConfig(**kw)


def test_losses_reject_bad_w_beta():
    r = torch.zeros(3)
    with pytest.raises(ValueError, match="w must be in"):
        aihf_reward_loss(r, r, r, r, w=1.2)
    with pytest.raises(ValueError, match="beta"):
        aihf_reward_loss(r, r, r, r, w=0.5, beta=0.0)


@pytest.mark.parametrize("gamma", [1.0, -0.1, float("nan")])
def test_gamma_outside_unit_interval(gamma):
    P = torch.ones(1, 2, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match="gamma"):
        soft_value_iteration(P, torch.zeros(1, 2, dtype=torch.float64), gamma, 1.0)


def test_transition_rows_must_sum_to_one():
    P = torch.full((2, 2, 2), 0.5, dtype=torch.float64)
    P[1, 0] = torch.tensor([0.7, 0.7])
    with pytest.raises(ValueError, match=r"P\[1, 0, :\] sums to 1.4"):
        check_transitions(P)
    with pytest.raises(ValueError, match="sum to 1"):
        GridworldMDP(P, torch.eye(2), torch.zeros(2), torch.tensor([0.5, 0.5]))


def test_nan_reward_is_an_error():
    with pytest.raises(ValueError, match="NaN"):
        soft_policy(torch.zeros(2, 3), torch.tensor([[0.0, float("nan"), 0.0]] * 2), 1.0)
    r = torch.tensor([0.0, float("nan")])
    with pytest.raises(ValueError, match="NaN"):
        aihf_reward_loss(r, torch.zeros(2), torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="NaN"):
        aihf_implicit_loss(None, None, None, None, r, torch.zeros(2), torch.zeros(2), torch.zeros(2), w=0.0)


def test_demo_without_agent_sample():
    with pytest.raises(ValueError, match="agent sample"):
        aihf_reward_loss(torch.zeros(3), None, None, None, w=1.0)
    with pytest.raises(ValueError, match="agent sample"):
        aihf_reward_loss(torch.zeros(3), torch.zeros(2), None, None, w=1.0)


def test_weighted_term_needs_data():
    with pytest.raises(ValueError, match="preference term"):
        aihf_reward_loss(torch.zeros(2), torch.zeros(2), None, None, w=0.5)


def test_zero_or_negative_counts_are_errors_naming_the_field():
    """Issue 22 review: --iters 0 (and other zero counts) trained nothing silently."""
    from iclr25.aihf import TinyLMConfig
    from iclr25.aihf.config import check_count
    from iclr25.aihf.text import PPOStep
    from iclr25.aihf.tinylm import train_aihf_dpo

    for kw, field in (({"iters": 0}, "iters"), ({"iters": -1}, "iters"), ({"policy_steps": -1}, "policy_steps"),
                      ({"agent_samples": -2}, "agent_samples"), ({"demo_batch": 0}, "demo_batch")):
        with pytest.raises(ValueError, match=f"^{field} must be an integer"):
            AIHFConfig(**kw)
    for field in ("rounds", "epochs", "sft_epochs", "lm_batch", "n_eval"):
        with pytest.raises(ValueError, match=f"^{field} must be an integer >= 1, got 0"):
            TinyLMConfig(**{field: 0})
    for kw, field in (({"ppo_epochs": 0}, "ppo_epochs"), ({"batch_size": 0}, "batch_size"),
                      ({"max_new_tokens": 0}, "max_new_tokens"), ({"clip": 0.0}, "clip")):
        with pytest.raises(ValueError, match=field):
            PPOStep(**kw)
    with pytest.raises(ValueError, match="rounds must be an integer >= 1"):
        train_aihf_dpo(None, None, rounds=0)  # checked before anything is built
    with pytest.raises(ValueError, match="got True"):
        check_count("iters", True)
    AIHFConfig(iters=1, policy_steps=0, agent_samples=0)  # 0 policy steps / agent samples are meaningful


def test_bandit_policy_steps_zero_is_the_exact_lower_level():
    """policy_steps = 0 used to run one mirror step silently on the bandit; it is the soft-optimal policy now."""
    task = BanditTask.random(10, 4, 3, seed=3)
    theta = torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    state = task.policy_init()
    expected = torch.log_softmax(task.log_pi_ref + task.features @ theta / task.beta, -1)  # independent closed form
    assert torch.allclose(task.policy_step(state, theta, 0, 0.5)["log_pi"], expected, atol=1e-12)
    one = task.policy_step(state, theta, 1, 0.5)["log_pi"]
    assert (one - expected).abs().max() > 1e-3  # one mirror step with eta = 0.5 is not there yet


def test_implicit_epoch_weighted_term_needs_data():
    from iclr25.aihf.implicit import implicit_epoch

    kw = dict(agents=None, demo_old=None, agent_old=None, rejected=None, ref_chosen=None, ref_rejected=None,
              batch_size=4, rng=np.random.default_rng(0), pad_id=0)
    with pytest.raises(ValueError, match="no demonstrations"):
        implicit_epoch(None, None, w=0.5, beta=0.5, demos=None, chosen=None, **kw)
    with pytest.raises(ValueError, match="no preference pairs"):
        implicit_epoch(None, None, w=0.0, beta=0.5, demos=None, chosen=None, **kw)


# ------------------------------------------------------------------------------------------------------ losses
def test_implicit_loss_closed_form_and_dpo_special_case():
    from iclr25.core.lm import dpo_loss

    g = torch.Generator().manual_seed(0)
    t = [torch.randn(5, generator=g, dtype=torch.float64) for _ in range(8)]
    beta, w = 0.3, 0.4
    got = aihf_implicit_loss(*t, w=w, beta=beta)
    ls = torch.nn.functional.logsigmoid
    demo = -ls(beta * ((t[0] - t[2]) - (t[1] - t[3]))).mean()
    pref = -ls(beta * ((t[4] - t[6]) - (t[5] - t[7]))).mean()
    assert math.isclose(float(got), w * float(demo) + (1 - w) * float(pref), rel_tol=1e-12)
    dpo = dpo_loss(t[4], t[5], t[6], t[7], beta=beta)[0]
    assert math.isclose(float(aihf_implicit_loss(*t, w=0.0, beta=beta)), float(dpo), rel_tol=1e-12)


def test_irl_loss_value_and_w_endpoints():
    rd, ra = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.0])
    rw, rl = torch.tensor([1.0]), torch.tensor([0.0])
    assert math.isclose(float(aihf_reward_loss(rd, ra, None, None, w=1.0, beta=2.0)), -(0.5 + 2.0) / 2 / 2)
    assert math.isclose(float(aihf_reward_loss(None, None, rw, rl, w=0.0)), math.log1p(math.exp(-1.0)), rel_tol=1e-6)


# ------------------------------------------------------------------------------------------------------- tasks
def test_bandit_regret_zero_at_optimum_and_positive_elsewhere():
    task = BanditTask.random(seed=0)
    assert abs(task.regret(task.optimal_log_policy())) < 1e-12
    assert task.regret(task.log_pi_ref) > 0.1


def test_gridworld_normalised_return_endpoints():
    mdp = GridworldMDP.grid(seed=0)
    lp, _ = mdp.soft_optimal()
    assert math.isclose(mdp.normalized_return(lp), 1.0, abs_tol=1e-12)
    assert abs(mdp.normalized_return(mdp.policy_init()["log_pi"])) < 1e-12


def test_warm_start_needs_fewer_backups():
    mdp = GridworldMDP.grid(seed=0)
    r = mdp.reward(mdp.theta_star)
    _, V, n_cold = soft_value_iteration(mdp.P, r, mdp.gamma, 1.0, return_iters=True)
    _, _, n_warm = soft_value_iteration(mdp.P, r * 1.001, mdp.gamma, 1.0, V0=V, return_iters=True)
    assert n_warm < 0.8 * n_cold  # geometric rate gamma: saves log(initial error ratio) / log(1/gamma) backups


def test_biased_demos_differ_from_optimal():
    task = BanditTask.random(seed=0)
    lp = task.biased_demo_policy(0.7, np.random.default_rng(0))
    assert task.regret(lp) > 0.05


# -------------------------------------------------------------------------------------------------- data files
def test_demonstrations_errors(tmp_path):
    ok = _write(tmp_path / "d.jsonl", [{"prompt": "p", "response": "r"}])
    assert read_demonstrations(ok) == [{"prompt": "p", "response": "r"}]
    bad = _write(tmp_path / "bad.jsonl", [{"prompt": "p", "response": "r"}, '{"prompt": "p", "resp'])
    with pytest.raises(JsonlError, match="bad.jsonl:2"):
        read_demonstrations(bad)
    miss = _write(tmp_path / "miss.jsonl", [{"prompt": "p"}])
    with pytest.raises(JsonlError, match="miss.jsonl:1.*response"):
        read_demonstrations(miss)
    empty = _write(tmp_path / "empty.jsonl", [{"prompt": "p", "response": "  "}])
    with pytest.raises(JsonlError, match="empty.jsonl:1.*empty"):
        read_demonstrations(empty)
    with pytest.raises(JsonlError, match="empty"):
        read_demonstrations(_write(tmp_path / "e2.jsonl", [{"prompt": "", "response": "x"}]))
    with pytest.raises(FileNotFoundError):
        read_demonstrations(tmp_path / "nope.jsonl")


def test_identical_pair_named_or_dropped(tmp_path):
    f = _write(tmp_path / "p.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"},
                                      {"prompt": "p", "chosen": "same", "rejected": "same"}])
    with pytest.raises(JsonlError, match="p.jsonl:2: chosen and rejected are identical"):
        read_preferences(f)
    stats: dict = {}
    pairs = read_preferences(f, drop_invalid=True, stats=stats)
    assert len(pairs) == 1 and stats["n_identical"] == 1


def test_hh_style_dialogues_split_at_last_assistant(tmp_path):
    c = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: and?\n\nAssistant: good answer"
    r = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: and?\n\nAssistant: bad answer"
    mism = "\n\nHuman: other\n\nAssistant: x"
    p = tmp_path / "hh.jsonl.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(json.dumps({"chosen": c, "rejected": r}) + "\n" + json.dumps({"chosen": c, "rejected": mism}) + "\n")
    prompt, resp = split_hh_dialogue(c)
    assert prompt.endswith("\n\nAssistant:") and resp == "good answer"
    stats: dict = {}
    pairs = load_hh_pairs(p, stats=stats)
    assert pairs == [{"prompt": prompt, "chosen": "good answer", "rejected": "bad answer"}]
    assert stats["n_prompt_mismatch"] == 1 and stats["mismatch_lines"] == [2]
    with pytest.raises(JsonlError, match="hh.jsonl.gz:2: chosen and rejected dialogues differ"):
        read_preferences(p)


def test_agent_samples_must_cover_demo_prompts(tmp_path):
    demos = [{"prompt": "a", "response": "x"}, {"prompt": "b", "response": "y"}]
    f = _write(tmp_path / "agent.jsonl", [{"prompt": "a", "response": "z"}])
    with pytest.raises(ValueError, match="demonstration 2 has no agent sample"):
        read_agent_samples(f, demos)
    f2 = _write(tmp_path / "agent2.jsonl", [{"prompt": "b", "response": "w"}, {"prompt": "a", "response": "z"}])
    assert read_agent_samples(f2, demos) == ["z", "w"]


def test_hh_mirror_counts(hh_mirror):
    stats: dict = {}
    pairs = load_hh_pairs(hh_mirror, stats=stats)
    assert stats["n_records"] == 2312 and stats["n_prompt_mismatch"] == 5 and len(stats["mismatch_lines"]) == 5
    assert all(p["chosen"] != p["rejected"] and p["chosen"].strip() for p in pairs)


def test_chat_message_records(tmp_path):
    """UltraChat-style demonstrations and UltraFeedback-binarized-style preferences (message lists)."""
    from iclr25.aihf.data import messages_to_pair

    u = {"role": "user", "content": "hi"}
    d = _write(tmp_path / "uc.jsonl", [{"prompt": "hi", "messages": [u, {"role": "assistant", "content": "hello"}]}])
    assert read_demonstrations(d) == [{"prompt": "\n\nHuman: hi\n\nAssistant:", "response": "hello"}]
    p = _write(tmp_path / "uf.jsonl", [{"prompt": "hi", "chosen": [u, {"role": "assistant", "content": "good"}],
                                        "rejected": [u, {"role": "assistant", "content": "bad"}]}])
    assert read_preferences(p) == [{"prompt": "\n\nHuman: hi\n\nAssistant:", "chosen": "good", "rejected": "bad"}]
    bad = _write(tmp_path / "bad.jsonl", [{"chosen": [u], "rejected": [u]}])
    with pytest.raises(JsonlError, match="bad.jsonl:1: 'chosen': the last message must be the assistant"):
        read_preferences(bad)
    with pytest.raises(ValueError, match="list of"):
        messages_to_pair("text")
