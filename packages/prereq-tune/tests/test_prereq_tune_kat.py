"""Known-answer tests of spec §6 (independent computations: closed forms, hand formulas, binomial test)."""

import math

import pytest
import torch

from iclr25.prereq_tune import (
    ATTRIBUTES,
    TINY_FORMAT,
    VALUES,
    FrozenTensorError,
    SkillExample,
    TrainArgs,
    active_adapters,
    adapter_groups,
    adapter_parameters,
    add_knowledge_adapter,
    add_skill_adapter,
    chance_accuracy,
    em_match,
    encode_completions,
    make_world,
    normalize_answer,
    parse_version,
    qa_accuracy,
    qa_items,
    skill_examples,
    tensor_hashes,
    train_skill_adapter,
)
from iclr25.prereq_tune.lora import KNOWLEDGE_TINY, SKILL_TINY

FAST = TrainArgs(epochs=1, lr=5e-3, batch_size=8, max_length=32)


def _stack(base):
    m = add_knowledge_adapter(base, "know_v1", KNOWLEDGE_TINY)
    m = add_knowledge_adapter(m, "know_v2", KNOWLEDGE_TINY)
    return add_skill_adapter(m, "skill", SKILL_TINY)


# 1 ------------------------------------------------------------------------------------------------
def test_zero_init_adapters_leave_logits_exactly_equal(base, tok):
    ids = torch.randint(4, len(tok), (3, 12))
    with torch.no_grad():
        ref = base(input_ids=ids).logits.clone()
    m = _stack(base)
    with active_adapters(m, ["know_v1", "skill"]), torch.no_grad():
        out = m(input_ids=ids).logits
    assert torch.equal(out, ref)


# 2 ------------------------------------------------------------------------------------------------
def test_two_active_loras_on_conv1d_match_hand_formula(base):
    from transformers.pytorch_utils import Conv1D

    m = _stack(base)
    torch.manual_seed(3)
    for n in ("know_v1", "skill"):
        for p in adapter_parameters(m, n).values():
            with torch.no_grad():
                p.normal_(0, 0.2)
    layer = m.base_model.model.transformer.h[1].attn.c_attn
    conv = layer.base_layer
    assert isinstance(conv, Conv1D)
    x = torch.randn(5, 96)
    W, b = conv.weight.detach(), conv.bias.detach()           # Conv1D stores W as (in, out)
    expect = x @ W + b
    for n, spec in (("know_v1", KNOWLEDGE_TINY), ("skill", SKILL_TINY)):
        A = layer.lora_A[n].weight.detach()                  # (r, in)
        B = layer.lora_B[n].weight.detach()                  # (out, r)
        expect = expect + spec.alpha / spec.r * (x @ A.T) @ B.T
    with active_adapters(m, ["know_v1", "skill"]), torch.no_grad():
        got = layer(x)
    torch.testing.assert_close(got, expect, atol=1e-6, rtol=1e-6)
    # and one adapter alone drops the other's term
    with active_adapters(m, ["know_v1"]), torch.no_grad():
        one = layer(x)
    assert not torch.allclose(one, got)


# 3 ------------------------------------------------------------------------------------------------
def test_frozen_knowledge_after_5_skill_steps(world, tok, base):
    m = _stack(base)
    for p in adapter_parameters(m, "know_v1").values():       # a non-trivial knowledge adapter
        with torch.no_grad():
            p.normal_(0, 0.05)
    before = tensor_hashes(m, exclude=["skill"])
    skill0 = {k: v.detach().clone() for k, v in adapter_parameters(m, "skill").items()}
    ex = skill_examples(world, "fictitious", 1)               # 30 rows, batch 6 -> 5 steps
    r = train_skill_adapter(m, tok, ex, ["know_v1"], TrainArgs(epochs=1, lr=5e-3, batch_size=6, max_length=32),
                            fmt=TINY_FORMAT, quiet=True)
    assert r.steps == 5
    assert r.draws == {"know_v1": 5}
    after = tensor_hashes(m, exclude=["skill"])
    assert before == after and len(before) > 0               # every know_v1, know_v2 and base tensor bit-identical
    assert all(not torch.equal(v, skill0[k]) for k, v in adapter_parameters(m, "skill").items())
    assert not r.trainable_unchanged and not r.frozen_changed


def test_peft_set_adapter_trap_is_neutralised(base):
    """PEFT's set_adapter([...]) re-enables gradients of every activated adapter (PEFT issue 1374):
    active_adapters re-freezes, whatever PEFT does."""
    m = _stack(base)
    m.base_model.set_adapter(["know_v1", "skill"])
    raw = any(p.requires_grad for p in adapter_parameters(m, "know_v1").values())
    with active_adapters(m, ["know_v1", "skill"], trainable=["skill"]):
        assert not any(p.requires_grad for p in adapter_parameters(m, "know_v1").values())
        assert all(p.requires_grad for p in adapter_parameters(m, "skill").values())
        assert not any(p.requires_grad for n, p in m.named_parameters() if "lora_" not in n)
    assert not any(p.requires_grad for p in m.parameters())
    # record what this PEFT version does (the invariant above holds either way)
    assert raw in (True, False)


def test_trainer_catches_a_knowledge_tensor_left_trainable(world, tok, base, monkeypatch):
    """If re-freezing were skipped, the pre-step assertion fires (the check can fail)."""
    import iclr25.prereq_tune.skill_stage as T

    m = _stack(base)
    orig = T._Roles.apply

    def leaky(self):
        orig(self)
        for p in adapter_parameters(self.model, "know_v1").values():
            p.requires_grad_(True)

    monkeypatch.setattr(T._Roles, "apply", leaky)
    with pytest.raises(FrozenTensorError):
        train_skill_adapter(m, tok, skill_examples(world, "fictitious", 1)[:16], ["know_v1"], FAST, fmt=TINY_FORMAT,
                            quiet=True)


# 4 ------------------------------------------------------------------------------------------------
def test_completion_only_labels_answer_and_eos(tok):
    rows = encode_completions(tok, [SkillExample("where was bako ruvin born ?", "paris")], TINY_FORMAT)
    lab = rows.labels[0]
    keep = lab[lab != -100].tolist()
    assert keep == [tok.convert_tokens_to_ids("paris"), tok.eos_token_id]
    # the prompt tokens (bos + "question : where ... answer :") carry no label
    n_prompt = len(tok(TINY_FORMAT.render_prompt("where was bako ruvin born ?"))["input_ids"])
    assert (lab[:n_prompt] == -100).all() and int(rows.lengths[0]) == n_prompt + 2


def test_eos_label_survives_when_pad_equals_eos(tok):
    import copy

    t2 = copy.deepcopy(tok)
    t2.pad_token = t2.eos_token
    assert t2.pad_token_id == t2.eos_token_id
    rows = encode_completions(t2, [SkillExample("where was x born ?", "paris"),
                                   SkillExample("what is the job of bako ruvin ?", "pilot")], TINY_FORMAT)
    for i in range(2):
        keep = rows.labels[i][rows.labels[i] != -100].tolist()
        assert len(keep) == 2 and keep[-1] == t2.eos_token_id


# 5 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sampler", ["routed", "all_versions"])
def test_routed_step_counts_only_drawn_version_rows(world, tok, base, monkeypatch, sampler):
    """Every step draws know_v2; version-1 rows get labels outside the vocabulary (cross-entropy on
    them fails or is NaN). Training stays finite: only version-2 rows count, whether version-1 rows
    are not forwarded (ours) or forwarded with masked labels (the official sampler)."""
    import iclr25.prereq_tune.skill_stage as T

    m = _stack(base)
    ex = skill_examples(world, "fictitious", [1, 2])
    rows = encode_completions(tok, ex, TINY_FORMAT, max_length=32)
    v1 = [i for i, e in enumerate(ex) if e.version == 1]
    for i in v1:
        rows.labels[i][rows.labels[i] != -100] = 10 ** 6
    monkeypatch.setattr(T, "_draw", lambda rng, group: next(k for k in group if k.endswith("_v2")))
    r = train_skill_adapter(m, tok, ex, ["know_v1", "know_v2"], TrainArgs(epochs=1, lr=1e-3, batch_size=4, max_length=32),
                            multi_version=True, sampler=sampler, fmt=TINY_FORMAT, quiet=True, encoded=rows)
    assert r.draws == {"know_v1": 0, "know_v2": r.steps} and all(math.isfinite(x) for x in r.losses)
    assert r.rows_counted == len(ex) // 2
    assert r.rows_forwarded == (1 if sampler == "routed" else 2) * r.rows_counted
    # and the poisoned labels do break a step that counts them (the check can fail)
    monkeypatch.setattr(T, "_draw", lambda rng, group: group[0])
    with pytest.raises((IndexError, RuntimeError, FloatingPointError)):
        train_skill_adapter(add_skill_adapter(m, "skill2", SKILL_TINY), tok, ex, ["know_v1", "know_v2"],
                            TrainArgs(epochs=1, lr=1e-3, batch_size=4, max_length=32), skill="skill2",
                            multi_version=True, sampler=sampler, fmt=TINY_FORMAT, quiet=True, encoded=rows)


def test_routed_loss_equals_hand_ce_on_drawn_rows(world, tok, base):
    from iclr25.prereq_tune import completion_loss

    m = _stack(base)
    ex = skill_examples(world, "fictitious", [1, 2])
    rows = encode_completions(tok, ex, TINY_FORMAT, max_length=32)
    v2 = torch.tensor([i for i, e in enumerate(ex) if e.version == 2])
    ids, att, lab = rows.batch(v2)
    with active_adapters(m, ["know_v2", "skill"]), torch.no_grad():
        logits = m(input_ids=ids, attention_mask=att).logits[:, :-1]
        s, n = completion_loss(m, ids, att, lab)
    tgt = lab[:, 1:]
    hand = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    assert int(n) == 2 * len(v2)
    torch.testing.assert_close(s, hand, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("name,v", [("know_v2", 2), ("lora_fake_statement_3", 3), ("know_statement_v12", 12), ("a_1", 1)])
def test_version_parsed_from_name_suffix(name, v):
    assert parse_version(name) == v


@pytest.mark.parametrize("name", ["know", "know_vx", "statement", "know_v0"])
def test_name_without_version_is_refused(name):
    with pytest.raises(ValueError, match="version suffix"):
        parse_version(name)


def test_alternate_groups_even_first_half_odd_second_half(world, tok, base):
    m = add_knowledge_adapter(base, "know_statement_v1", KNOWLEDGE_TINY)
    for n in ("know_statement_v2", "know_passage_v1", "know_passage_v2"):
        m = add_knowledge_adapter(m, n, KNOWLEDGE_TINY)
    m = add_skill_adapter(m, "skill", SKILL_TINY)
    names = ["know_statement_v1", "know_statement_v2", "know_passage_v1", "know_passage_v2"]
    assert adapter_groups(names, True) == (names[:2], names[2:])
    assert adapter_groups(names, False) == (names, names)
    seq = []
    import iclr25.prereq_tune.skill_stage as T

    orig = T._activate

    def spy(model, act, roles, where):
        if len(act) == 2:
            seq.append(act[0])
        return orig(model, act, roles, where)

    T._activate = spy
    try:
        train_skill_adapter(m, tok, skill_examples(world, "fictitious", [1, 2]), names,
                            TrainArgs(epochs=2, lr=1e-3, batch_size=4, grad_accum=2, max_length=32),
                            alternate_groups=True, fmt=TINY_FORMAT, quiet=True)
    finally:
        T._activate = orig
    assert len(seq) >= 6
    assert all(k in names[:2] for k in seq[0::2]) and all(k in names[2:] for k in seq[1::2])


# 6 ------------------------------------------------------------------------------------------------
def test_world_deterministic_disjoint_and_versions_agree_at_chance():
    from scipy.stats import binomtest

    a, b = make_world(200, 100, 3, seed=4), make_world(200, 100, 3, seed=4)
    assert a.to_dict() == b.to_dict() and a.digest() == b.digest()
    assert make_world(200, 100, 3, seed=5).digest() != a.digest()
    real = {e.name for e in a.real}
    fict = {e.name for e in a.fictitious}
    assert len(real) == 200 and len(fict) == 100 and not real & fict
    w = make_world(200, 400, 2, seed=1)
    for attr in ATTRIBUTES:
        k = sum(e.fact(attr, 1) == e.fact(attr, 2) for e in w.fictitious)
        p = binomtest(k, len(w.fictitious), 1 / len(VALUES[attr])).pvalue
        assert p > 0.001, (attr, k)


# 7 ------------------------------------------------------------------------------------------------
def test_metrics():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert em_match("i don't know, maybe paris", ["paris"]) is False
    assert em_match("it is Paris.", ["paris"]) is True
    assert em_match("berlin", ["paris", "Berlin"]) is True


# 8 ------------------------------------------------------------------------------------------------
def test_chance_level_closed_form():
    assert chance_accuracy() == pytest.approx((1 / 24 + 1 / 16 + 1 / 20) / 3)
    assert chance_accuracy() == pytest.approx(0.05139, abs=1e-5)


def test_untrained_skill_adapter_gives_base_predictions(world, tok, base):
    items = qa_items(world, "real_test")
    acc0, p0 = qa_accuracy(base, tok, items, fmt=TINY_FORMAT, return_predictions=True)
    m = _stack(base)
    acc1, p1 = qa_accuracy(m, tok, items, adapters=["skill"], fmt=TINY_FORMAT, return_predictions=True)
    assert p0 == p1 and acc0 == acc1


def test_uniform_random_predictor_near_chance(world, tok):
    """A predictor drawing the answer uniformly from each attribute's values scores ≈ chance."""
    import numpy as np

    rng = np.random.default_rng(0)
    w = make_world(2000, 2, 1, seed=2, name_pool=60)
    hits = [rng.choice(VALUES[a]) == e.fact(a) for e in w.real for a in ATTRIBUTES]
    assert abs(np.mean(hits) - chance_accuracy()) < 3 * math.sqrt(0.05 * 0.95 / len(hits))
