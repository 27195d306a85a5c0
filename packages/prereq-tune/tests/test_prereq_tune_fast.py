"""The optimised reproduction path equals the straightforward one: fused GELU, skipped no-op adapter
activations, one evaluation pass scored against several answer versions, passage-format probes."""

from dataclasses import replace

import pytest
import torch

import iclr25.prereq_tune.skill_stage as T
from iclr25.prereq_tune import (
    TINY_FORMAT,
    add_knowledge_adapter,
    add_skill_adapter,
    knowledge_corpus,
    passage_prompts,
    probe_ceiling,
    qa_items,
    skill_examples,
    statement_prompts,
    train_skill_adapter,
)
from iclr25.prereq_tune.evaluation import first_token_accuracy, first_token_predictions, qa_accuracy
from iclr25.prereq_tune.model import fuse_gelu
from iclr25.prereq_tune.training import SKILL_ARGS_TINY


def test_fuse_gelu_same_function(base, tok, world):
    enc = tok([p for p, _ in statement_prompts(world, "real")], padding=True, return_tensors="pt")
    with torch.no_grad():
        a = base(**enc).logits
        n = fuse_gelu(base)
        b = base(**enc).logits
    assert n == 3 and fuse_gelu(base) == 0
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    # and the gradient agrees too
    x = torch.randn(4, 7, 384, dtype=torch.float32, requires_grad=True)
    from transformers.activations import ACT2FN
    g1, = torch.autograd.grad(ACT2FN["gelu_new"](x).sum(), x)
    g2, = torch.autograd.grad(ACT2FN["gelu_pytorch_tanh"](x).sum(), x)
    torch.testing.assert_close(g2, g1, atol=1e-5, rtol=1e-5)


def _slow_activate(model, names, roles, where):  # the straightforward path: set_adapter on every call
    model.base_model.set_adapter(list(names))
    roles.apply()
    roles.check(where)


@pytest.mark.parametrize("knowledge", [(), ("know_v1",)])
def test_skipping_noop_activation_is_bit_identical(make_base, tok, world, monkeypatch, knowledge):
    ex = skill_examples(world, "fictitious", 1)
    args = replace(SKILL_ARGS_TINY, epochs=3, batch_size=8)
    out = []
    for act in (T._activate, _slow_activate):
        monkeypatch.setattr(T, "_activate", act)
        torch.manual_seed(0)
        m = add_knowledge_adapter(make_base(0), "know_v1")
        with torch.no_grad():          # a non-zero knowledge LoRA, so it matters whether it is active
            for n, p in m.named_parameters():
                if ".know_v1." in n:
                    p.normal_(0, 0.05)
        m = add_skill_adapter(m, "skill")
        r = train_skill_adapter(m, tok, ex, list(knowledge), args, fmt=TINY_FORMAT, quiet=True)
        out.append(({n: p.detach().clone() for n, p in m.named_parameters()}, r.losses))
    (w1, l1), (w2, l2) = out
    assert l1 == l2
    assert all(torch.equal(w1[n], w2[n]) for n in w1)


def test_one_pass_scored_per_version_equals_separate_passes(base, tok, world):
    m = add_skill_adapter(base, "skill")
    with torch.no_grad():
        for n, p in m.named_parameters():
            if ".skill." in n:
                p.normal_(0, 0.2)
    items = {v: qa_items(world, "fictitious", v) for v in (1, 2, 3)}
    pred = first_token_predictions(m, tok, [TINY_FORMAT.render_prompt(it.question) for it in items[1]], adapters=["skill"])
    for v in (1, 2, 3):
        assert [it.question for it in items[v]] == [it.question for it in items[1]]
        sep = qa_accuracy(m, tok, items[v], adapters=["skill"], fmt=TINY_FORMAT)
        assert first_token_accuracy(tok, pred, [it.answers for it in items[v]], TINY_FORMAT) == sep


def test_passage_prompts_are_prefixes_of_the_adapters_own_corpus(world):
    for v in (1, 2):
        corpus = knowledge_corpus(world, v, "passage")
        probes = passage_prompts(world, "fictitious", v)
        assert len(probes) == len(corpus) * 3
        for (p, val), k in zip(probes, range(len(probes))):
            assert corpus[k // 3].startswith(f"{p} {val} ")
        other = passage_prompts(world, "fictitious", v, answer_version=3)
        assert [p for p, _ in other] == [p for p, _ in probes]
        # the probes are (nearly) determined by the corpus; statement prompts mostly are not in it
        assert probe_ceiling(corpus, probes) > 0.9
        assert probe_ceiling(corpus, statement_prompts(world, "fictitious", v)) < 0.4
        assert probe_ceiling(corpus, other) < 0.3


def test_probe_ceiling_counts_ties():
    corpus = ["a b c .", "a b d .", "a x y ."]
    assert probe_ceiling(corpus, [("a b", "c")]) == 0.5        # tie with d
    assert probe_ceiling(corpus, [("a", "b")]) == 1.0
    assert probe_ceiling(corpus, [("a", "x"), ("q", "b")]) == 0.0
