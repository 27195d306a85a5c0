"""The optimised loss path (output head on the response positions only; one forward over D_safe + D_ft)
gives the same per-sample losses, gradients, selector and selection as the straightforward computation."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from iclr25.seal import BilevelConfig, SFTConfig, losses, select_top, sft, train_selector
from iclr25.seal.bilevel import _stack_batches
from iclr25.seal.losses import (
    _body_and_head,
    fuse_gelu,
    per_sample_lm_loss,
    reference_path,
    token_mean_lm_loss,
)


@pytest.fixture(autouse=True)
def _head_path_for_small_vocab(monkeypatch):
    """The test vocabulary is small: take the response-head path anyway."""
    monkeypatch.setattr(losses, "HEAD_ONLY_MIN_VOCAB", 0)


def _independent_losses(model, ids, attn, resp):
    """Full logits of the plain forward, torch cross_entropy per token, mean over response tokens."""
    logits = model(input_ids=ids, attention_mask=attn).logits
    ce = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")
    m = (resp[:, 1:] * attn[:, 1:]).float()
    return (ce * m).sum(-1) / m.sum(-1)


def test_fast_per_sample_loss_equals_independent_cross_entropy(model, encoded):
    _, ft = encoded
    assert _body_and_head(model) is not None  # the tiny GPT-2 takes the response-head path
    with reference_path():
        assert _body_and_head(model) is None
    batch = ft.batch(torch.arange(len(ft)))
    got = per_sample_lm_loss(model, *batch)
    ref = _independent_losses(model, *batch)
    with reference_path():
        core = per_sample_lm_loss(model, *batch)
    assert got.shape == (len(ft),)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(got, core, rtol=0, atol=1e-5)
    nll, n = token_mean_lm_loss(model, *batch)
    m = (batch[2][:, 1:] * batch[1][:, 1:]).float()
    assert int(n) == int(m.sum())
    torch.testing.assert_close(nll, (ref * m.sum(-1)).sum(), rtol=1e-5, atol=1e-4)


def test_fast_path_gradients_equal_reference(new_model, encoded):
    _, ft = encoded
    batch = ft.batch(torch.arange(len(ft)))
    w = torch.linspace(0.5, 1.5, len(ft))
    grads = []
    for ref in (False, True):
        m = new_model(seed=1)
        if ref:
            with reference_path():
                loss = (w * per_sample_lm_loss(m, *batch)).sum()
        else:
            loss = (w * per_sample_lm_loss(m, *batch)).sum()
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_fused_gelu_gives_the_same_losses(new_model, encoded):
    _, ft = encoded
    batch = ft.batch(torch.arange(len(ft)))
    m = new_model(seed=3)
    with torch.no_grad():
        before = _independent_losses(m, *batch)
        assert fuse_gelu(m) == m.config.n_layer
        assert fuse_gelu(m) == 0  # nothing left to swap
        torch.testing.assert_close(_independent_losses(m, *batch), before, rtol=0, atol=1e-5)


def test_stacked_batches_give_the_separate_losses(model, encoded):
    safe, ft = encoded
    a, b = safe.batch(torch.arange(5)), ft.batch(torch.arange(7, 15))
    both = per_sample_lm_loss(model, *_stack_batches(a, b, safe.pad_id))
    sep = torch.cat([_independent_losses(model, *a), _independent_losses(model, *b)])
    torch.testing.assert_close(both, sep, rtol=0, atol=1e-5)


def test_optimised_selector_and_sft_match_the_reference(new_model, encoded):
    """σ₀ = 0.9 so that D_ft enters every model step (the joint forward); lr large enough that θ moves."""
    safe, ft = encoded
    cfg = BilevelConfig(sigma0=0.9, sigma_decay=0.1, epochs=3, lr_model=1e-2, lr_selector=0.5,
                        selector_optimizer="sgd", batch_size=8, max_len=40, seed=2)
    base = new_model(seed=4)
    fused = copy.deepcopy(base)
    fuse_gelu(fused)
    fast = train_selector(copy.deepcopy(fused), safe, ft, cfg, progress=False)
    with reference_path():
        ref = train_selector(copy.deepcopy(base), safe, ft, cfg, progress=False)
    assert float(fast.logits.std()) > 1e-3  # the selector moved
    torch.testing.assert_close(fast.logits, ref.logits, rtol=0, atol=1e-4)
    assert torch.equal(fast.update_counts, ref.update_counts)
    for keep in (0.5, 0.8):
        assert set(select_top(fast.logits, keep).tolist()) == set(select_top(ref.logits, keep).tolist())
    scfg = SFTConfig(epochs=2, lr=1e-2, batch_size=8, max_len=40, seed=0)
    m_fast = sft(copy.deepcopy(fused), ft, scfg, progress=False)
    with reference_path():
        m_ref = sft(copy.deepcopy(base), ft, scfg, progress=False)
    # Adam divides by sqrt(v): float rounding of near-zero gradients shows in the weights at ~1e-4, not in the losses
    for p, q in zip(m_fast.parameters(), m_ref.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=5e-4)
    batch = safe.batch(torch.arange(len(safe)))
    with torch.no_grad():
        torch.testing.assert_close(_independent_losses(m_fast, *batch), _independent_losses(m_ref, *batch),
                                   rtol=0, atol=1e-4)
