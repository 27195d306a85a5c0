"""Known-answer tests (spec Sec. 6), each against an independent computation."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from iclr25.core.lm import dpo_loss
from iclr25.q_adapter import (
    QAdapterConfig,
    QAdapterModel,
    action_mask,
    qadapter_loss,
    residual_rewards,
    soft_values,
)
from iclr25.q_adapter.tabular import ALPHAS, tabular_check


def _rand(B=3, S=6, V=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, V, generator=g) * 2
    base = F.log_softmax(torch.randn(B, S, V, generator=g) * 2, -1)
    acts = torch.randint(0, V, (B, S - 1), generator=g)
    return q, base, acts


def test_identity_q_minus_v():
    q, base, _ = _rand()
    at, a0 = 1.0, 0.01
    v = soft_values(q, base, at, a0)
    logpt = F.log_softmax((q + a0 * base) / at, -1)
    assert torch.allclose(q - v[..., None], at * logpt - a0 * base, atol=1e-5)


@pytest.mark.parametrize("at,a0", [(1.0, 0.01), (1.0, 0.5), (2.0, 0.1)])
def test_initial_policy_is_sharpened_base(at, a0):
    z1 = torch.randn(4, 5, 11)
    base = F.log_softmax(z1, -1)
    pol = torch.softmax((z1 + a0 * base) / at, -1)  # Q = z_1 at LoRA init
    assert torch.allclose(pol, torch.softmax(z1 * (1 + a0) / at, -1), atol=1e-6)


def test_telescoping_sum():
    at, a0 = 0.7, 0.3
    q, base, acts = _rand(S=5)
    mask = torch.ones_like(acts, dtype=torch.float)
    cfg = QAdapterConfig(alpha_tilde=at, alpha_0=a0, value_index="next")
    R = residual_rewards(q, base, acts, mask, cfg).sum(-1)
    # independent: alpha~ log pi~(y|x) - alpha_0 log pi_1(y|x) + V(x), loops over tokens
    expect = []
    for b in range(q.shape[0]):
        tot = 0.0
        for t in range(acts.shape[1]):
            z = (q[b, t].double() + a0 * base[b, t].double()) / at
            tot += at * (z[acts[b, t]] - torch.logsumexp(z, 0)) - a0 * base[b, t, acts[b, t]].double()
        v0 = at * torch.logsumexp((q[b, 0].double() + a0 * base[b, 0].double()) / at, 0)
        expect.append(tot + v0)
    assert torch.allclose(R.double(), torch.stack(expect), atol=1e-4)


def test_equals_dpo_when_alphas_equal():
    beta = 0.5
    q, base, acts = _rand(B=4, S=6)
    # rows 0,1 chosen and 2,3 rejected share their prompt: states s_0..s_2 (and V(x) = V(s_2)) coincide
    q[2:, :3], base[2:, :3], acts[2:, :2] = q[:2, :3], base[:2, :3], acts[:2, :2]
    cfg = QAdapterConfig(alpha_tilde=beta, alpha_0=beta, reg_beta=0.0, normalize="none", value_index="next")
    mask = torch.zeros(acts.shape)
    mask[:, 2:] = 1  # response actions
    r = residual_rewards(q, base, acts, mask, cfg)
    loss, _ = qadapter_loss(r, mask, cfg)
    logpt = F.log_softmax((q + beta * base) / beta, -1)[:, :-1].gather(-1, acts[..., None]).squeeze(-1)
    ref = base[:, :-1].gather(-1, acts[..., None]).squeeze(-1)
    lp, lr = (logpt * mask).sum(-1), (ref * mask).sum(-1)
    dpo, _, _ = dpo_loss(lp[:2], lp[2:], lr[:2], lr[2:], beta=beta)
    assert abs(float(loss) - float(dpo)) < 1e-5


def test_bt_values():
    cfg = QAdapterConfig(normalize="none", reg_beta=0.0)
    mask = torch.ones(2, 1)
    loss0, _ = qadapter_loss(torch.tensor([[0.3], [0.3]]), mask, cfg)
    loss1, _ = qadapter_loss(torch.tensor([[1.0], [0.0]]), mask, cfg)
    assert float(loss0) == pytest.approx(math.log(2), abs=1e-6)
    assert float(loss1) == pytest.approx(0.313262, abs=1e-6)


def test_label_direction_swap():
    cfg = QAdapterConfig(normalize="none", reg_beta=0.0)
    r = torch.tensor([[2.0, 0.5], [0.1, 0.3]])
    mask = torch.ones_like(r)
    m = 2.5 - 0.4
    assert float(qadapter_loss(r, mask, cfg)[0]) == pytest.approx(F.softplus(torch.tensor(-m)).item(), abs=1e-6)
    assert float(qadapter_loss(r.flip(0), mask, cfg)[0]) == pytest.approx(F.softplus(torch.tensor(m)).item(), abs=1e-6)


def test_train_step_increases_margin(tiny_lm):
    model, tok = tiny_lm
    cfg = QAdapterConfig(lora_dropout=0.0)
    qm = QAdapterModel(model, cfg)
    from iclr25.q_adapter.data import PreferencePair, collate_pairs, tokenize_pairs

    tp = tokenize_pairs([PreferencePair("Q: hi\nA:", " good answer", " bad reply!")], tok, max_length=40,
                        max_prompt_length=16)
    b = collate_pairs(tp, tok.pad_token_id)
    ids, attn, resp = b["input_ids"], b["attention_mask"], b["response_mask"]

    def margin():
        with torch.no_grad():
            r, m = qm.token_rewards(ids, attn, resp)
            R = (r * m).sum(-1)
        return float(R[0] - R[1])

    before = margin()
    opt = torch.optim.SGD(qm.trainable_parameters(), lr=0.05)
    for _ in range(3):
        loss, _ = qm.loss(ids, attn, resp)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert margin() > before


def test_prompt_tokens_never_change_loss():
    q, base, acts = _rand(B=2, S=8)
    mask = torch.zeros(2, 7)
    mask[:, 4:] = 1  # response actions start at 4: states 4..7 and V(s_5..s_7) matter
    cfg = QAdapterConfig(normalize="none", reg_beta=0.1)
    l1, _ = qadapter_loss(residual_rewards(q, base, acts, mask, cfg), mask, cfg)
    q2, base2, acts2 = q.clone(), base.clone(), acts.clone()
    q2[:, :4] += torch.randn(2, 4, q.shape[-1])
    base2[:, :4] = F.log_softmax(torch.randn(2, 4, q.shape[-1]), -1)
    acts2[:, :4] = (acts2[:, :4] + 1) % q.shape[-1]
    l2, _ = qadapter_loss(residual_rewards(q2, base2, acts2, mask, cfg), mask, cfg)
    assert float(l1) == pytest.approx(float(l2), abs=1e-6)


@pytest.mark.parametrize("normalize", ["tokens", "none"])
def test_padding_invariance(normalize):
    q, base, acts = _rand(B=2, S=6)
    mask = torch.ones(2, 5)
    mask[1, 3:] = 0
    cfg = QAdapterConfig(normalize=normalize, reg_beta=0.1)
    l1, _ = qadapter_loss(residual_rewards(q, base, acts, mask, cfg), mask, cfg)
    pad = 4
    qp = torch.cat([q, torch.randn(2, pad, q.shape[-1])], 1)
    bp = torch.cat([base, F.log_softmax(torch.randn(2, pad, q.shape[-1]), -1)], 1)
    ap = torch.cat([acts, torch.zeros(2, pad, dtype=torch.long)], 1)
    mp = torch.cat([mask, torch.zeros(2, pad)], 1)
    l2, _ = qadapter_loss(residual_rewards(qp, bp, ap, mp, cfg), mp, cfg)
    assert float(l1) == pytest.approx(float(l2), abs=1e-5)


def test_code_alignment_hand_computed():
    """Two sequences (chosen, rejected) of length 4 with prompt length 2; the second is 1 token shorter."""
    at, a0, gamma, beta = 1.0, 0.01, 1.0, 0.1
    V = 3
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, V, generator=g)
    base = F.log_softmax(torch.randn(2, 4, V, generator=g), -1)
    ids = torch.tensor([[0, 1, 2, 1], [0, 1, 2, 0]])
    attn = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    resp = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 0]])
    cfg = QAdapterConfig.official_code()
    mask = action_mask(resp, attn, "code")
    loss, _ = qadapter_loss(residual_rewards(q, base, ids[:, 1:], mask, cfg), mask, cfg)

    # by hand, official formula: mask_t = attn_t & label_t != -100 for t in 0..L-2, V at the same index
    def v(b, t):
        return at * math.log(sum(math.exp((q[b, t, k].item() + a0 * base[b, t, k].item()) / at) for k in range(V)))

    def r(b, t):
        return q[b, t, ids[b, t + 1]].item() - gamma * v(b, t)

    code_mask = [[0, 0, 1], [0, 0, 1]]  # position 2 is a response token in both rows (attended)
    R = [sum(r(b, t) for t in range(3) if code_mask[b][t]) for b in range(2)]
    pref = math.log1p(math.exp(-(R[0] - R[1]) / 3))  # divided by the padded action length 3
    reg = beta * (r(0, 2) ** 2 + r(1, 2) ** 2) / 2
    assert float(loss) == pytest.approx(pref + reg, abs=1e-5)


def test_regulariser_constant_reward():
    c, beta = 0.7, 0.1
    r = torch.full((4, 5), c)
    mask = torch.ones(4, 5)
    mask[2, 3:] = 0
    _, stats = qadapter_loss(r * mask, mask, QAdapterConfig(reg_beta=beta))
    assert stats["reg_loss"] == pytest.approx(beta * c * c, abs=1e-6)


def test_tabular_population_optimum():
    res = tabular_check(iters=300)
    for at, a0 in ALPHAS:
        assert res[f"tv[{at},{a0}]"] < 1e-3
    assert res["tv_dpo_max"] < 1e-3


def _prompts(tok):
    tok.padding_side = "left"
    enc = tok(["Hello there, how", "Tell me a story about"], return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def test_dual_cache_equals_no_cache(tiny_lm, lora_randomizer):
    model, tok = tiny_lm
    qm = QAdapterModel(model, QAdapterConfig(alpha_0=0.5))
    lora_randomizer(qm.peft_model)
    ids, attn = _prompts(tok)
    a = qm.generate(ids, attn, max_new_tokens=12, eos_token_id=-1)
    b = qm.generate(ids, attn, max_new_tokens=12, eos_token_id=-1, use_cache=False)
    assert torch.equal(a, b)
    assert a.shape == (2, ids.shape[1] + 12)


def test_generation_after_disabled_forward_unchanged(tiny_lm, lora_randomizer):
    """peft pitfall: a forward inside disable_adapter() must not leave the adapter off."""
    model, tok = tiny_lm
    qm = QAdapterModel(model, QAdapterConfig())
    lora_randomizer(qm.peft_model)
    ids, attn = _prompts(tok)
    before = qm.generate(ids, attn, max_new_tokens=10, eos_token_id=-1)
    qm.base_log_probs(ids, attn)
    after = qm.generate(ids, attn, max_new_tokens=10, eos_token_id=-1)
    assert torch.equal(before, after)
    base_only = qm.generate(ids, attn, max_new_tokens=10, eos_token_id=-1, policy="base")
    assert not torch.equal(before, base_only)  # the adapter is really on in the customised policy


def test_log_probs_come_from_forward_passes(tiny_lm, lora_randomizer):
    """log pi~ = log_softmax((z_on + a0 log_softmax(z_off)) / a~) from two plain forwards of independent copies,
    whatever sampling settings generated the sequence (no processed generation scores)."""
    model, tok = tiny_lm
    plain = copy.deepcopy(model)
    cfg = QAdapterConfig(alpha_tilde=0.8, alpha_0=0.3, lora_dropout=0.0)
    qm = QAdapterModel(model, cfg)
    lora_randomizer(qm.peft_model)
    merged = copy.deepcopy(qm.peft_model).merge_and_unload()
    ids, attn = _prompts(tok)
    out = qm.generate(ids, attn, max_new_tokens=8, do_sample=True, temperature=0.3, top_k=3, eos_token_id=-1,
                      generator=torch.Generator().manual_seed(0))
    full_attn = torch.cat([attn, torch.ones(2, 8, dtype=attn.dtype)], 1)
    pos = (full_attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        z_on = merged(input_ids=out, attention_mask=full_attn, position_ids=pos).logits
        z_off = plain(input_ids=out, attention_mask=full_attn, position_ids=pos).logits
        got = qm.log_probs(out, full_attn)
    expect = F.log_softmax((z_on + cfg.alpha_0 * F.log_softmax(z_off, -1)) / cfg.alpha_tilde, -1)
    m = full_attn.bool()
    assert torch.allclose(got[m], expect[m], atol=1e-4)


@pytest.mark.realdata
def test_data_counts(need_file):
    need = need_file
    need("hh-rlhf/harmless-base.test.jsonl.gz")
    need("hh-rlhf/helpful.test.json")
    need("dsp/domain_specific_preference.test.json")
    import gzip
    import json

    from iclr25.q_adapter.data import _hh_pair, load_dsp, load_dsp_pairs

    raw = [json.loads(x) for x in gzip.open(need("hh-rlhf/harmless-base.test.jsonl.gz"), "rt")]
    assert len(raw) == 2312
    st = [_hh_pair(d["chosen"], d["rejected"])[1] for d in raw]
    assert st.count("prefix_fixed") == 5
    helpful = json.loads(need("hh-rlhf/helpful.test.json").read_text())
    assert len(helpful) == 2352
    assert [_hh_pair(*d["text"][:2])[1] for d in helpful].count("prefix_fixed") == 9
    recs = load_dsp()
    assert len(recs) == 661
    cand = [(r["responses"]["literature"], r["responses"][o]) for r in recs
            for o in ("academy", "business", "entertainment", "normal")]
    assert len(cand) == 2644
    bad = sum(1 for a, b in cand if a == b or not a.strip() or not b.strip())
    assert bad == 29  # 28 identical + 1 empty: dropped with a logged count
    assert len(load_dsp_pairs(records=recs, domain="literature")) == 2644 - bad
