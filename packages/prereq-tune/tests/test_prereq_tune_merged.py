"""knowledge_forward="merged": the frozen knowledge LoRA folded into copies of the base weights computes
the same loss, gradients and training run as the stacked PEFT forward, and touches no frozen tensor."""

from dataclasses import replace

import pytest
import torch

from iclr25.prereq_tune import TINY_FORMAT, TrainArgs, skill_examples, train_skill_adapter
from iclr25.prereq_tune.data import encode_completions
from iclr25.prereq_tune.lora import (
    KNOWLEDGE_TINY,
    SKILL_TINY,
    adapter_parameters,
    add_knowledge_adapter,
    add_skill_adapter,
    tensor_hashes,
)
from iclr25.prereq_tune.training import completion_loss, merged_knowledge_weights


def _stack(base, know=KNOWLEDGE_TINY):
    torch.manual_seed(5)
    m = base
    for v in (1, 2, 3):
        m = add_knowledge_adapter(m, f"know_v{v}", know)
        with torch.no_grad():
            for p in adapter_parameters(m, f"know_v{v}").values():
                p.normal_(0, 0.05)
    m = add_skill_adapter(m, "skill", SKILL_TINY)
    with torch.no_grad():
        for p in adapter_parameters(m, "skill").values():
            p.normal_(0, 0.02)
    return m


def _grads(m, **kw):
    for p in m.parameters():
        p.grad = None
    skill = adapter_parameters(m, "skill")
    s, n = completion_loss(m, *kw.pop("batch"), **kw)
    (s / n).backward()
    return float((s / n).detach()), {k: p.grad.clone() for k, p in skill.items()}


def test_merged_forward_equals_stacked_loss_and_gradient(world, tok, base):
    m = _stack(base)
    rows = encode_completions(tok, skill_examples(world, "fictitious", 2), TINY_FORMAT, max_length=32)
    batch = rows.batch(torch.arange(12))
    hashes = tensor_hashes(m)
    merged = merged_knowledge_weights(m, "know_v2")
    assert len(merged) == 12                                   # c_attn, attn c_proj, c_fc, mlp c_proj x 3 layers
    m.train()
    m.base_model.set_adapter(["know_v2", "skill"])
    for p in adapter_parameters(m, "skill").values():
        p.requires_grad_(True)
    ref_loss, ref = _grads(m, batch=batch)
    m.base_model.set_adapter(["skill"])
    for p in adapter_parameters(m, "skill").values():
        p.requires_grad_(True)
    plain_loss, _ = _grads(m, batch=batch)
    loss, got = _grads(m, batch=batch, param_overrides=merged)
    assert loss == pytest.approx(ref_loss, rel=1e-5) and abs(plain_loss - ref_loss) > 1e-3  # the adapter matters
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-6)
    assert tensor_hashes(m) == hashes                         # nothing in the model was modified


def test_merged_training_matches_stacked(world, tok, make_base):
    ex = skill_examples(world, "fictitious")
    args = TrainArgs(epochs=1, lr=5e-3, batch_size=4, max_length=32, seed=1)   # 30 questions -> 8 steps
    out = {}
    for mode in ("stacked", "merged"):
        m = _stack(make_base(0))
        before = tensor_hashes(m, exclude=["skill"])
        r = train_skill_adapter(m, tok, ex, ["know_v1", "know_v2", "know_v3"], args, fmt=TINY_FORMAT, quiet=True,
                                knowledge_forward=mode)
        assert tensor_hashes(m, exclude=["skill"]) == before and not r.trainable_unchanged
        out[mode] = (r, {k: v.detach().clone() for k, v in adapter_parameters(m, "skill").items()})
    (rs, ws), (rm, wm) = out["stacked"], out["merged"]
    assert rs.steps == rm.steps == 8 and rs.draws == rm.draws and len(rs.draws) == 3
    assert rm.losses == pytest.approx(rs.losses, rel=1e-4)
    # 8 Adam steps at lr 5e-3 turn float-rounding gradient differences (~1e-7) into weight differences of a few
    # 1e-6 where a gradient is near zero (Adam normalises it); a wrong fold (missing scaling, transpose, adapter)
    # moves weights by ~lr = 5e-3
    for k in ws:
        torch.testing.assert_close(wm[k], ws[k], rtol=1e-3, atol=1e-5)


def test_merged_refuses_what_it_cannot_fold(world, tok, base):
    m = _stack(base, know=replace(KNOWLEDGE_TINY, dropout=0.1))
    with pytest.raises(ValueError, match="dropout"):
        merged_knowledge_weights(m, "know_v1")
    with pytest.raises(ValueError, match="adapts no layer"):
        merged_knowledge_weights(m, "nope")
    with pytest.raises(ValueError, match="knowledge_forward"):
        train_skill_adapter(m, tok, skill_examples(world, "fictitious"), ["know_v1"], fmt=TINY_FORMAT, quiet=True,
                            knowledge_forward="fused")
