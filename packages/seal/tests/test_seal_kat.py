"""Known-answer tests of spec §6 (independent computations: closed forms in float64, enumeration,
torch's cross_entropy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr25.seal import (
    BilevelConfig,
    Selector,
    per_sample_lm_loss,
    select_top,
    selector_gradient,
    train_selector,
    win_rate,
)
from iclr25.seal.bilevel import safe_positions
from iclr25.seal.selector import selector_loss


# 1. initial state ------------------------------------------------------------------------------
def test_softmax_selector_starts_at_exactly_one():
    w = Selector(7, "softmax")()
    assert w.dtype == torch.float32 and w.shape == (7,)
    assert torch.equal(w, torch.ones(7))


def test_sigmoid_selector_starts_at_two_sigmoid_minus_1e4():
    w = Selector(7, "sigmoid")()
    expected = 2.0 / (1.0 + math.exp(1e-4))          # 2·sigmoid(−1e-4), float64
    assert np.allclose(w.detach().double().numpy(), expected, rtol=0, atol=1e-7)
    assert abs(expected - 0.99995) < 1e-8


# 2. selector gradient: autograd vs the closed form of spec §1.2 ---------------------------------
@pytest.mark.parametrize("kind", ["softmax", "sigmoid"])
def test_selector_gradient_matches_closed_form(kind):
    g = torch.Generator().manual_seed(0)
    n, b = 11, 4
    omega = torch.randn(n, generator=g, dtype=torch.float64)
    idx = torch.tensor([1, 4, 5, 9])
    ell = torch.rand(b, generator=g, dtype=torch.float64) * 3
    sel = Selector(n, kind)
    sel.logits.data = omega.float()
    selector_loss(sel, idx, ell.float()).backward()
    auto = sel.logits.grad.double().numpy()
    # independent float64 closed form
    om, L = omega.numpy(), ell.numpy()
    if kind == "softmax":
        p = np.exp(om - om.max())
        p /= p.sum()
        ref = -(n / b) * p * (p[idx.numpy()] * L).sum()
        ref[idx.numpy()] += (n / b) * p[idx.numpy()] * L
    else:
        s = 1 / (1 + np.exp(-om))
        ref = np.zeros(n)
        ref[idx.numpy()] = (2 / b) * s[idx.numpy()] * (1 - s[idx.numpy()]) * L
    assert np.allclose(auto, ref, atol=1e-6, rtol=0)
    assert np.allclose(selector_gradient(omega, ell, idx, kind).numpy(), ref, atol=1e-12)
    out = np.setdiff1d(np.arange(n), idx.numpy())
    if kind == "softmax":                              # out-of-batch samples are pushed up
        assert (auto[out] < 0).all() and np.abs(auto[out]).min() > 1e-4
    else:
        assert (auto[out] == 0).all()


# 3. full-batch gradient descent with fixed losses ranks strictly by loss -------------------------
@pytest.mark.parametrize("kind", ["softmax", "sigmoid"])
def test_full_batch_descent_ranks_by_loss(kind):
    ell = torch.tensor([0.3, 2.0, 1.1, 0.05, 1.1, 3.5, 0.8])   # a tie at 1.1
    n = ell.numel()
    sel = Selector(n, kind)
    opt = torch.optim.SGD(sel.parameters(), lr=0.5)
    idx = torch.arange(n)
    for _ in range(200):
        opt.zero_grad()
        selector_loss(sel, idx, ell).backward()
        opt.step()
    w = sel.logits.detach()
    order = torch.argsort(ell)                                  # ascending loss
    strict = [(i, j) for i, j in zip(order[:-1].tolist(), order[1:].tolist()) if ell[i] != ell[j]]
    assert all(w[i] > w[j] for i, j in strict)                  # lower loss, larger logit
    assert w[2] == w[4]                                         # ties stay tied (exactly)


# 4. per-sample loss ------------------------------------------------------------------------------
def test_per_sample_loss_equals_cross_entropy_over_response_tokens(model, encoded):
    _, ft = encoded
    ids, attn, resp = ft.batch(torch.arange(6))
    got = per_sample_lm_loss(model, ids, attn, resp)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn,
                       position_ids=(attn.cumsum(-1) - 1).clamp(min=0)).logits
    ce = F.cross_entropy(logits[:, :-1].transpose(1, 2).float(), ids[:, 1:], reduction="none")
    m = resp[:, 1:].float()
    ref = (ce * m).sum(1) / m.sum(1)
    assert torch.allclose(got.detach(), ref, atol=1e-6)


class _Oracle(torch.nn.Module):
    """Logits that put probability ~1 on a fixed next token (and a trainable scale)."""

    def __init__(self, vocab: int, target: torch.Tensor, prompt_logit: float = 0.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.vocab, self.target, self.prompt_logit = vocab, target, prompt_logit

    def forward(self, input_ids, attention_mask=None, **kw):
        b, t = input_ids.shape
        logits = torch.full((b, t, self.vocab), self.prompt_logit) * self.w
        nxt = torch.roll(input_ids, -1, dims=1)
        logits.scatter_(2, nxt[..., None], 200.0)
        return type("O", (), {"logits": logits})()


def test_one_token_response_of_probability_one_has_zero_loss_and_prompt_never_counts():
    ids = torch.tensor([[2, 5, 6, 7, 3]])          # bos, prompt..., response token 7? -> response = [7, 3]
    attn = torch.ones_like(ids)
    resp = torch.tensor([[0, 0, 0, 1, 0]])         # one response token
    loss = per_sample_lm_loss(_Oracle(10, ids), ids, attn, resp)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-6)
    # a model that is bad on prompt tokens only: same loss
    bad = _Oracle(10, ids, prompt_logit=0.0)
    ids2 = ids.clone()
    ids2[0, 1] = 9             # change a prompt token
    assert torch.equal(per_sample_lm_loss(bad, ids2, attn, resp), loss)
    with pytest.raises(ValueError, match="no response tokens"):
        per_sample_lm_loss(bad, ids, attn, torch.zeros_like(resp))


# 5. σ schedule and σ = 1 -------------------------------------------------------------------------
def test_sigma_schedule_official_values():
    assert BilevelConfig().sigmas() == [1.0, 0.97, 0.94]
    assert BilevelConfig(sigma0=0.9, sigma_decay=0.1, epochs=4).sigmas() == [0.9, 0.8, 0.7, 0.6]


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def test_with_sigma_one_the_model_step_ignores_d_ft(new_model, tok, encoded, task):
    from iclr25.seal.data import encode_pairs

    safe, ft = encoded
    other = encode_pairs(tok, [(f"reverse : t{i % 12} t1 t2", "t2 t1 t0") for i in range(len(ft))],
                         template=task.template, max_len=40)
    cfg = BilevelConfig(lr_model=1e-2, batch_size=8, epochs=1, seed=5)
    m1, m2, m3 = new_model(), new_model(), new_model()
    train_selector(m1, safe, ft, cfg, stop_after_steps=2, progress=False)
    train_selector(m2, safe, other, cfg, stop_after_steps=2, progress=False)
    # the same two steps on the safe batches alone, by hand
    opt = torch.optim.AdamW(m3.parameters(), lr=cfg.lr_model, betas=cfg.betas, weight_decay=0.0)
    m3.train()
    for s in range(2):
        idx = safe_positions(s * cfg.batch_size, cfg.batch_size, len(safe), cfg.seed)
        loss = per_sample_lm_loss(m3, *safe.batch(idx)).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m3.parameters(), cfg.max_grad_norm)
        opt.step()
    for a, b, c in zip(_params(m1), _params(m2), _params(m3)):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_with_sigma_below_one_d_ft_moves_the_model(new_model, tok, encoded, task):
    from iclr25.seal.data import encode_pairs

    safe, ft = encoded
    other = encode_pairs(tok, [(f"reverse : t{i % 12} t1 t2", "t2 t1 t0") for i in range(len(ft))],
                         template=task.template, max_len=40)
    cfg = BilevelConfig(sigma0=0.5, lr_model=1e-2, batch_size=8, epochs=1, seed=5)
    m1, m2 = new_model(), new_model()
    train_selector(m1, safe, ft, cfg, stop_after_steps=1, progress=False)
    train_selector(m2, safe, other, cfg, stop_after_steps=1, progress=False)
    assert any(not torch.equal(a, b) for a, b in zip(_params(m1), _params(m2)))


# 6. coverage ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_safe", [5, 60])
def test_every_ft_index_is_updated_exactly_once_per_epoch(new_model, tok, task, n_safe):
    from iclr25.seal.data import encode_pairs

    safe = encode_pairs(tok, [(task.safe.prompts[i % len(task.safe)], "i cannot help with that .")
                              for i in range(n_safe)], template=task.template, max_len=40)
    ft = encode_pairs(tok, task.ft, template=task.template, max_len=40)
    cfg = BilevelConfig(lr_model=1e-3, lr_selector=0.1, selector_optimizer="sgd", batch_size=8, epochs=3, seed=1)
    res = train_selector(new_model(), safe, ft, cfg, progress=False)
    assert res.update_counts.shape == (3, len(ft))
    assert torch.equal(res.update_counts, torch.ones(3, len(ft), dtype=torch.int32))
    assert res.fraction_updated_every_epoch() == 1.0
    steps = -(-len(ft) // 8)
    assert [h["d_safe_passes"] for h in res.history] == [steps * 8 / n_safe] * 3
    # the official zipped loaders stop at the shorter one: with |D_safe| < |D_ft| samples are skipped
    z = train_selector(new_model(), safe, ft, BilevelConfig(**{**cfg.__dict__, "ft_coverage": "zip"}), progress=False)
    if n_safe < len(ft):
        assert (z.update_counts == 0).any() and z.fraction_updated_every_epoch() < 1.0
    else:
        assert torch.equal(z.update_counts, res.update_counts)


# 7. select_top ----------------------------------------------------------------------------------
def test_select_top_keeps_the_largest_logits():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(10, generator=g)
    top = select_top(logits, 0.8)
    assert top.numel() == 8
    ranked = sorted(range(10), key=lambda i: -float(logits[i]))        # enumeration
    assert top.tolist() == ranked[:8]
    assert sorted(select_top(logits, 1.0).tolist()) == list(range(10))
    perm = torch.randperm(10, generator=g)
    assert sorted(perm[select_top(logits[perm], 0.8)].tolist()) == sorted(top.tolist())
    with pytest.raises(ValueError, match="keep"):
        select_top(logits, 0.0)
    with pytest.raises(ValueError, match="keep"):
        select_top(logits, 1.5)


# 8. win rate ------------------------------------------------------------------------------------
def test_win_rate_known_answers():
    a = [0.1, 0.5, 1.0, 0.0]
    assert win_rate(a, a) == 50.0
    assert win_rate([x + 1 for x in a], a) == 100.0
    assert win_rate(a, [x + 1 for x in a]) == 0.0
    assert win_rate([1, 0, 1, 1], [0, 0, 1, 0]) == pytest.approx(100 * (1 + 0.5 + 0.5 + 1) / 4)


# 9. integration (spec §6 item 9) ---------------------------------------------------------------
@pytest.mark.slow
def test_sgd_selector_finds_unsafe_samples_over_three_seeds():
    from iclr25.seal.experiment import run_task_seed

    rs = [run_task_seed("synthetic", 450, s, (0.8,), methods=("standard", "random", "seal_sgd")) for s in range(3)]
    au = [r["selection"]["seal_sgd"]["auroc_unsafe"] for r in rs]
    assert np.mean(au) > 0.8
    for r in rs:
        run = next(x for x in r["runs"] if x["method"] == "seal_sgd")
        assert run["kept_unsafe"] / run["n_kept"] < 1 / 6
