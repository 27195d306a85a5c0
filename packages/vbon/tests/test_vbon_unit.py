"""Unit tests: shapes, masks, error messages, trainer mechanics (synthetic tiny LM, no mirror needed)."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from iclr25.vbon import (
    RewardCDFCache,
    VBoNConfig,
    VBoNTrainer,
    best_of_n,
    beta_from_n,
    bon_distribution,
    call_reward,
    empirical_log_cdf,
    evaluate_policy,
    response_logprobs,
    rloo_advantages,
    sample,
    sample_texts,
    vbon_reward,
    win_rate,
)
from iclr25.vbon.objective import kl_k3, policy_gradient_loss
from iclr25.vbon.runtime import clone_policy

PROMPTS = ["the movie is", "a very", "the plot and", "cast is a"]


def test_bad_n_and_inputs():
    with pytest.raises(ValueError, match="N"):
        bon_distribution([0.5, 0.5], [0, 1], 0)
    with pytest.raises(ValueError, match="N must be >= 2"):
        beta_from_n(1)
    with pytest.raises(ValueError, match="sum to 1"):
        bon_distribution([0.5, 0.6], [0, 1], 2)
    with pytest.raises(ValueError, match="NaN"):
        bon_distribution([0.5, 0.5], [0, float("nan")], 2)
    with pytest.raises(ValueError, match="n must be >= 2"):
        VBoNConfig(n=1)
    with pytest.raises(ValueError, match="bound"):
        vbon_reward(torch.zeros(2), torch.zeros(2), 2, bound="l2")


def test_ties_split_group_mass():
    p = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    r = torch.tensor([1.0, 1.0, 0.0])
    bon = bon_distribution(p, r, 3)
    # the tie group {0, 1} has mass (F + 0.5)^3 - F^3 with F = 0.5, shared 2:3
    assert float(bon[:2].sum()) == pytest.approx(1 - 0.5**3)
    assert float(bon[0] / bon[1]) == pytest.approx(2 / 3)


def test_empirical_cdf_batched_and_no_smoothing():
    refs = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 10.0]], dtype=torch.float64)
    r = torch.tensor([2.0, 5.0])
    assert empirical_log_cdf(refs, r).exp().tolist() == pytest.approx([0.5, 0.75])
    assert empirical_log_cdf(refs, torch.tensor([0.5, -1.0]), "none").exp().tolist() == pytest.approx([0.0, 0.0])
    with pytest.raises(ValueError, match="smoothing"):
        empirical_log_cdf(refs, r, "laplace")


def test_cdf_cache_lookup_roundtrip(tmp_path):
    c = RewardCDFCache.from_samples(["a  b", "c"], [[3.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
    assert c.log_cdf(["a b", "c"], [2.5, -1]).exp().tolist() == pytest.approx([0.75, 0.25])
    with pytest.raises(KeyError, match="not in the reward-CDF cache"):
        c.log_cdf(["zzz"], [0.0])
    p = c.to_jsonl(tmp_path / "c.jsonl")
    c2 = RewardCDFCache.from_jsonl(p)
    assert torch.equal(c2.sorted_rewards, c.sorted_rewards)
    # the official one-sample-per-line format
    lines = [json.dumps({"prompt": "x", "text": "t", "reward": v}) for v in (3, 1, 2)]
    (tmp_path / "o.jsonl").write_text("\n".join(lines) + "\nnot json\n")
    with pytest.raises(ValueError, match="o.jsonl:4"):
        RewardCDFCache.from_jsonl(tmp_path / "o.jsonl")


def test_vbon_reward_exact_close_to_l1_for_tiny_ref_prob():
    lf = torch.log(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    lr = torch.full((3,), -60.0, dtype=torch.float64)
    n = 8
    exact = vbon_reward(lf, lr, n, "exact", "paper")
    assert torch.allclose(exact, lf + math.log(n) / (n - 1), atol=1e-12)
    # log F = -inf (unsmoothed, below all references) stays finite through the i = N term
    out = vbon_reward(torch.tensor([-math.inf], dtype=torch.float64), torch.tensor([-1.0], dtype=torch.float64), 3, "exact", "none")
    assert float(out) == pytest.approx(-2.0)


def test_rloo_and_losses():
    ret = torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 6.0])
    adv = rloo_advantages(ret, 3)
    assert adv.tolist() == pytest.approx([-1.5, 0.0, 1.5, -3.0, -3.0, 6.0])
    assert torch.allclose(adv.view(2, 3).sum(1), torch.zeros(2))
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(ret, 1)
    logp = torch.randn(6, 5, requires_grad=True)
    mask = torch.ones(6, 5)
    a = policy_gradient_loss(logp, logp.detach(), mask, adv, clip=0.2)
    b = policy_gradient_loss(logp, logp.detach(), mask, adv, clip=None)
    ga, = torch.autograd.grad(a, logp)
    gb, = torch.autograd.grad(b, logp)
    assert torch.allclose(ga, gb, atol=1e-6)  # on-policy PPO gradient == REINFORCE gradient
    assert (kl_k3(logp.detach(), torch.randn(6, 5), mask) >= 0).all()


def test_win_rate_ties_half():
    wr, se = win_rate([1.0, 2.0, 3.0, 0.0], [0.0, 2.0, 4.0, -1.0])
    assert wr == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert se > 0


def test_call_reward_validates():
    with pytest.raises(ValueError, match="shape"):
        call_reward(lambda p, c: np.zeros(len(p) + 1), ["a"], ["b"])
    with pytest.raises(ValueError, match="must be finite"):
        call_reward(lambda p, c: np.array([np.nan]), ["a"], ["b"])


def test_sampler_masks_and_logprobs(tiny_lm):
    model, tok = tiny_lm
    torch.manual_seed(0)
    s = sample(model, tok, PROMPTS, num_samples=3, max_new_tokens=6)
    assert s.input_ids.shape[0] == 12 and len(s.continuations) == 12
    assert s.prompts[:3] == [PROMPTS[0]] * 3
    assert (s.response_mask <= s.attention_mask).all()
    assert (s.response_mask.sum(1) >= 1).all() and (s.response_mask.sum(1) <= 6).all()
    lp = response_logprobs(model, s)
    assert (lp[s.response_mask == 0] == 0).all() and (lp[s.response_mask == 1] < 0).all()
    # log-probs of a left-padded row equal those of the same row run alone (position ids ignore padding)
    i = int(torch.argmax((s.attention_mask == 0).sum(1)))
    keep = s.attention_mask[i].bool()
    ids = s.input_ids[i][keep][None]
    logits = model(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).squeeze(-1)
    alone = logits[-int(s.response_mask[i].sum()):].sum()
    assert float(lp[i].sum().detach()) == pytest.approx(float(alone.detach()), abs=1e-4)
    with pytest.raises(ValueError, match="empty"):
        sample(model, tok, [], 1)


def test_best_of_n_picks_max_and_validates(tiny_lm, count_reward):
    model, tok = tiny_lm
    res = best_of_n(model, tok, count_reward, PROMPTS, 4, max_new_tokens=6)
    assert res.rewards.shape == (4, 4)
    assert torch.equal(res.best_reward, res.rewards.max(1).values)
    with pytest.raises(ValueError, match="N must be"):
        best_of_n(model, tok, count_reward, PROMPTS, 0)
    with pytest.raises(ValueError, match="must be finite"):
        best_of_n(model, tok, lambda p, c: np.full(len(p), np.nan), PROMPTS, 2, max_new_tokens=4)


@pytest.mark.parametrize("method,bound,algo", [("vbon", "exact", "rloo"), ("vbon", "l1", "ppo"), ("rlhf", "exact", "rloo")])
def test_trainer_step_checkpoint_resume(tiny_lm, count_reward, tmp_path, method, bound, algo):
    model, tok = tiny_lm
    torch.manual_seed(0)
    cdf = RewardCDFCache.build(lambda p, m: sample_texts(model, tok, p, m, 6), count_reward, PROMPTS, 16)
    cfg = VBoNConfig(method=method, n=4, bound=bound, algo=algo, ppo_epochs=2, steps=2, prompts_per_step=2,
                     samples_per_prompt=2, max_new_tokens=6, lr=1e-2, ref_logprob_scope="full")
    policy = clone_policy(model)
    before = [p.detach().clone() for p in policy.parameters()]
    tr = VBoNTrainer(policy, model, tok, count_reward, PROMPTS, cfg, cdf=cdf if method == "vbon" else None)
    hist = tr.train(progress=False, checkpoint_dir=tmp_path / "ck", save_every=1, metrics_path=tmp_path / "m.jsonl")
    assert len(hist) == 2 and all(math.isfinite(h["loss"]) for h in hist)
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.unwrapped.parameters()))
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 2
    tr2 = VBoNTrainer(clone_policy(model), model, tok, count_reward, PROMPTS, replace(cfg, steps=3),
                      cdf=cdf if method == "vbon" else None)
    tr2.load_checkpoint(tmp_path / "ck")
    assert tr2.step == 2
    for a, b in zip(tr.unwrapped.parameters(), tr2.unwrapped.parameters()):
        assert torch.equal(a, b)
    tr2.train(progress=False)
    assert tr2.step == 3
    ev = evaluate_policy(tr2.unwrapped, model, tok, count_reward, PROMPTS, 2, 6)
    assert 0 <= ev["win_rate"] <= 1 and math.isfinite(ev["kl"])


def test_resume_refuses_changed_settings_and_torn_files(tiny_lm, count_reward, tmp_path):
    """load_checkpoint: another n / lr / prompt count, or a torn trainer_state.pt / model.safetensors, is a
    ValueError naming the change or file and the fix (changed settings were silently accepted, torn files
    were KeyError/SafetensorError tracebacks)."""
    import shutil

    model, tok = tiny_lm
    cfg = VBoNConfig(method="rlhf", n=4, steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=4)
    tr = VBoNTrainer(clone_policy(model), model, tok, count_reward, PROMPTS, cfg)
    tr.train(progress=False, checkpoint_dir=tmp_path / "ck", save_every=1)

    def resume(c=cfg, prompts=PROMPTS, ck=tmp_path / "ck"):
        VBoNTrainer(clone_policy(model), model, tok, count_reward, prompts, c).load_checkpoint(ck)

    resume(replace(cfg, steps=5))  # a longer run is fine
    for c, prompts, msg in [(replace(cfg, n=8), PROMPTS, "n: 4 -> 8"), (replace(cfg, lr=1e-2), PROMPTS, "lr: "),
                            (cfg, PROMPTS[:-1], f"n_prompts: {len(PROMPTS)} -> {len(PROMPTS) - 1}")]:
        with pytest.raises(ValueError, match=msg):
            resume(c, prompts)
    for name in ("trainer_state.pt", "model.safetensors"):
        shutil.copytree(tmp_path / "ck", tmp_path / name)
        (tmp_path / name / name).write_bytes(b"junk")
        with pytest.raises(ValueError, match=f"{name} is torn.*delete"):
            resume(ck=tmp_path / name)


def test_trainer_errors(tiny_lm, count_reward):
    model, tok = tiny_lm
    with pytest.raises(ValueError, match="empty"):
        VBoNTrainer(clone_policy(model), model, tok, count_reward, [], VBoNConfig())
    with pytest.raises(ValueError, match="RewardCDFCache"):
        VBoNTrainer(clone_policy(model), model, tok, count_reward, PROMPTS, VBoNConfig())
    cdf = RewardCDFCache.from_samples(["other"], [[0.0, 1.0]])
    with pytest.raises(KeyError, match="not in the reward-CDF cache"):
        VBoNTrainer(clone_policy(model), model, tok, count_reward, PROMPTS, VBoNConfig(), cdf=cdf)


def test_vbon_training_moves_toward_reward(tiny_lm, count_reward):
    """A few vBoN steps with a large N raise the mean reward on the synthetic word-count task."""
    model, tok = tiny_lm
    torch.manual_seed(1)
    cdf = RewardCDFCache.build(lambda p, m: sample_texts(model, tok, p, m, 8), count_reward, PROMPTS, 32)
    cfg = VBoNConfig(n=16, steps=25, prompts_per_step=4, samples_per_prompt=8, max_new_tokens=8, lr=3e-3)
    tr = VBoNTrainer(clone_policy(model), model, tok, count_reward, PROMPTS, cfg, cdf=cdf)
    torch.manual_seed(2)
    before = evaluate_policy(model, model, tok, count_reward, PROMPTS, 32, 8)
    tr.train(progress=False)
    torch.manual_seed(2)
    after = evaluate_policy(tr.unwrapped, model, tok, count_reward, PROMPTS, 32, 8)
    assert after["reward"] > before["reward"] + 0.15
    assert after["kl"] > 0


def test_logprobs_at_sampling_temperature(tiny_lm, count_reward):
    """``--vbon.temperature 0.5`` sampled from the tempered policy but scored it at temperature 1 (off-policy
    updates). Now the rollout's old log-probs, the update's log-probs and the KL estimate are those of
    ``softmax(logits / T)`` (checked against a direct log-softmax of the scaled logits); ``logprob_temperature
    ='one'`` keeps the untempered (trlx) reading; the reference is scored at temperature 1 either way."""
    model, tok = tiny_lm
    T = 0.5
    s = sample(model, tok, PROMPTS[:2], 2, 5, temperature=T)
    with torch.no_grad():
        logits = model(input_ids=s.input_ids, attention_mask=s.attention_mask, position_ids=s.position_ids).logits
        direct = torch.log_softmax(logits[:, :-1].double() / T, -1).gather(-1, s.input_ids[:, 1:, None])[..., 0]
        got = response_logprobs(model, s, temperature=T)
    m = s.response_mask[:, 1:].bool()
    assert torch.allclose(got[:, 1:][m].double(), direct[m], atol=1e-5)
    assert not torch.allclose(got, response_logprobs(model, s))  # T = 1 differs
    for scoring, t_pol in (("sampling", T), ("one", 1.0)):
        cfg = VBoNConfig(method="rlhf", n=4, steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=5,
                         temperature=T, logprob_temperature=scoring)
        tr = VBoNTrainer(clone_policy(model), model, tok, count_reward, PROMPTS, cfg)
        ro = tr.rollout()
        with torch.no_grad():
            pol = response_logprobs(tr.unwrapped.eval(), ro.samples, temperature=t_pol)
            ref = response_logprobs(model, ro.samples)  # the reference: temperature 1
        assert torch.equal(ro.old_logprobs, pol), scoring
        assert torch.allclose(ro.kl_seq, ((pol - ref) * ro.mask).sum(1)), scoring
    with pytest.raises(ValueError, match="temperature must be > 0"):
        response_logprobs(model, s, temperature=0.0)
