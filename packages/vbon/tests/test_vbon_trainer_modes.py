"""Rollouts, old log-probs and the KL estimate in eval mode; dropout off as in TRL (issue 28)."""

import torch

from iclr25.vbon import VBoNConfig, VBoNTrainer
from iclr25.vbon.runtime import clone_policy
from iclr25.vbon.sampling import response_logprobs

PROMPTS = ["the movie", "a film is", "the plot", "very fun"]


def _with_dropout(model, p=0.3):
    m = clone_policy(model)
    n = 0
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p, n = p, n + 1
    assert n > 0
    return m


def _trainer(tiny_lm, reward, disable_dropout):
    model, tok = tiny_lm
    cfg = VBoNConfig(method="rlhf", beta=0.1, algo="ppo", steps=1, prompts_per_step=4, samples_per_prompt=2,
                     max_new_tokens=6, disable_dropout=disable_dropout)
    return VBoNTrainer(_with_dropout(model), model, tok, reward, PROMPTS, cfg)


def test_on_policy_ppo_ratio_is_exactly_one(tiny_lm, count_reward):
    torch.manual_seed(0)
    tr = _trainer(tiny_lm, count_reward, disable_dropout=True)
    ro = tr.rollout()
    tr.policy.train(not tr.cfg.disable_dropout)  # exactly the mode update() uses
    logp = response_logprobs(tr.policy, ro.samples)
    assert logp.requires_grad
    ratio = torch.exp((logp.detach() - ro.old_logprobs) * ro.mask)
    assert torch.equal(ratio, torch.ones_like(ratio))
    tr.policy.train()  # and even in train mode: every dropout probability is 0
    assert torch.equal(response_logprobs(tr.policy, ro.samples).detach() * ro.mask, ro.old_logprobs * ro.mask)


def test_rollout_is_in_eval_mode_even_with_dropout_kept(tiny_lm, count_reward):
    torch.manual_seed(0)
    tr = _trainer(tiny_lm, count_reward, disable_dropout=False)
    tr.policy.train()
    ro = tr.rollout()
    assert tr.policy.training  # mode restored
    with torch.no_grad():
        tr.policy.eval()
        again = response_logprobs(tr.policy, ro.samples)
        tr.policy.train()
        noisy = response_logprobs(tr.policy, ro.samples)
    assert torch.equal(again * ro.mask, ro.old_logprobs * ro.mask)  # old log-probs: deterministic (eval)
    assert not torch.equal(noisy * ro.mask, ro.old_logprobs * ro.mask)  # dropout is really there
    ref = response_logprobs(tr.ref_policy, ro.samples)
    assert torch.allclose(((again - ref) * ro.mask).sum(1), ro.kl_seq)  # the KL estimate is the eval-mode one


def test_policy_loads_through_core_loader(tiny_lm, tmp_path):
    import pytest

    from iclr25.vbon.config import ModelArgs
    from iclr25.vbon.runtime import load_policy

    model, tok = tiny_lm
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    m, t = load_policy(ModelArgs(policy=str(tmp_path / "m"), dtype="bfloat16"), device="cpu")
    assert next(m.parameters()).dtype == torch.bfloat16 and t.pad_token_id is not None
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_policy(ModelArgs(policy=str(tmp_path / "missing")), device="cpu")
