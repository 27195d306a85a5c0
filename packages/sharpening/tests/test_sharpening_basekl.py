"""The full preset's base recipe: exact KL to the data distribution, and the stop-by-KL rule with its cap."""

import json
import logging
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr25.sharpening.base import (
    TrapBaseConfig,
    cached_trap_base,
    data_kl,
    pretrain_trap_base_to_kl,
    trap_data_kl,
    validation_pairs,
)
from iclr25.sharpening.task import TrapArithmeticTask

TINY = TrapBaseConfig(n_layer=1, n_embd=32, n_head=2, batch_size=32, lr=1e-2, eval_every=5, n_val=8,
                      warmup_steps=2, stop_kl=0.05, max_steps=10)


def test_data_kl_equals_the_definition_on_a_toy_distribution():
    # 3 prompts, 5 responses; the model leaks mass outside the enumerated responses (rows sum < 1)
    p = np.array([[0.5, 0.5, 0, 0, 0], [0.1, 0.2, 0.3, 0.4, 0.0], [1.0, 0, 0, 0, 0]])
    q = np.array([[0.4, 0.3, 0.1, 0.1, 0.05], [0.25, 0.25, 0.25, 0.2, 0.05], [0.9, 0.05, 0.0, 0.0, 0.0]])
    with np.errstate(divide="ignore"):
        got = data_kl(np.log(p), np.log(q))
    want = [sum(pi * math.log(pi / qi) for pi, qi in zip(pr, qr) if pi > 0) for pr, qr in zip(p, q)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[2] == pytest.approx(-math.log(0.9))            # all data mass on one response the model gives 0.9
    with np.errstate(divide="ignore"):
        assert data_kl(np.log(p), np.log(p)).max() == pytest.approx(0.0, abs=1e-15)
        assert np.isinf(data_kl(np.log(p), np.log(np.where(np.arange(5) == 1, 0.0, q)))[0])
    with pytest.raises(ValueError, match="one shape"):
        data_kl(np.log(p + 1e-3), np.log(q[:2]))


def test_trap_data_kl_against_an_independent_full_sequence_enumeration(tiny_lm):
    model, tok = tiny_lm
    task = TrapArithmeticTask()
    pairs = task.pairs()[[0, 37, 555]]
    got = trap_data_kl(model, tok, task, pairs)
    dist = task.distribution(pairs)
    want, outside = [], []
    with torch.no_grad():
        for (a, b), row in zip(pairs, dist):
            total, kl = 0.0, 0.0
            for k in range(100):
                ids = tok(f"{a}+{b}=" + f"{k:02d}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
                lp = float(sum(logp[t - 1, ids[t]] for t in range(6, len(ids))))
                total += math.exp(lp)
                if row[k] > 0:
                    kl += row[k] * (math.log(row[k]) - lp)
            want.append(kl)
            outside.append(1 - total)
    np.testing.assert_allclose(got["kl_per_prompt"], want, rtol=1e-5, atol=1e-6)
    assert got["kl"] == pytest.approx(np.mean(want), rel=1e-5)
    assert got["outside_mass"] == pytest.approx(np.mean(outside), abs=1e-5)


def test_validation_pairs_avoid_the_excluded_prompts():
    task = TrapArithmeticTask()
    _, test = task.split(1000, 400, seed=0)
    val = validation_pairs(task, 256, test)
    assert val.shape == (256, 2) and len({tuple(v) for v in val}) == 256
    assert not ({tuple(v) for v in val} & {tuple(t) for t in test})
    np.testing.assert_array_equal(val, validation_pairs(task, 256, test))
    with pytest.raises(ValueError, match="n_val"):
        validation_pairs(task, 1300, test)


def test_training_stops_at_the_first_check_below_the_threshold():
    task = TrapArithmeticTask()
    val = validation_pairs(task, 8)
    _, info = pretrain_trap_base_to_kl(task, replace(TINY, stop_kl=1e3), val, progress=False)
    assert info["converged"] is True and info["steps"] == 5 and len(info["kl_history"]) == 1
    assert info["kl_history"][0][1] == info["val_kl"] <= 1e3 and info["cpu_seconds"] > 0


def test_training_hits_the_cap_and_says_so(caplog):
    task = TrapArithmeticTask()
    val = validation_pairs(task, 8)
    with caplog.at_level(logging.WARNING):
        model, info = pretrain_trap_base_to_kl(task, replace(TINY, stop_kl=1e-6), val, progress=False)
    assert info["converged"] is False and info["steps"] == 10
    assert [h[0] for h in info["kl_history"]] == [5, 10] and info["val_kl"] > 1e-6
    lrs = [h[3] for h in info["kl_history"]]          # warm-up done at step 2: full lr, then only ever halved
    assert lrs[0] == pytest.approx(TINY.lr) and all(b in (a, a / 2) for a, b in zip(lrs, lrs[1:]))
    assert "did NOT converge" in caplog.text
    assert info["val_kl"] == pytest.approx(trap_data_kl(model, _tok(), task, val)["kl"], rel=1e-9)


def _tok():
    from iclr25.core.lm import byte_tokenizer

    return byte_tokenizer(padding_side="left")


def test_cached_base_records_the_recipe_and_its_key_covers_it(tmp_path):
    task = TrapArithmeticTask()
    _, test = task.split(40, 24, seed=0)
    cfg = replace(TINY, n_val=16)
    b = cached_trap_base(task, cfg, cache=tmp_path, progress=False, exclude=test)
    assert b.info["cached"] is False and b.info["recipe"] == "kl-stop-v3" and b.info["converged"] is False
    again = cached_trap_base(task, cfg, cache=tmp_path, progress=False, exclude=test)
    assert again.info["cached"] is True and again.info["val_kl"] == b.info["val_kl"]
    train = json.loads((tmp_path / "sharpening" / again.info["path"].split("/")[-1] / "trapbase_train.json").read_text())
    assert train["steps"] == 10 and train["converged"] is False
    # the cap is not in the key: an unconverged base is kept, another cap's base trained beside it ...
    other = cached_trap_base(task, replace(cfg, max_steps=5), cache=tmp_path, progress=False, exclude=test)
    assert other.info["cached"] is False and other.info["path"] == b.info["path"] + "-cap5"
    assert other.info["steps"] == 5
    assert cached_trap_base(task, cfg, cache=tmp_path, progress=False, exclude=test).info["cached"] is True
    # ... a converged one is reused under any cap >= its steps (training is deterministic before the cap)
    conv = replace(cfg, stop_kl=1e3)
    c1 = cached_trap_base(task, conv, cache=tmp_path, progress=False, exclude=test)
    assert c1.info["converged"] is True and c1.info["steps"] == 5
    assert cached_trap_base(task, replace(conv, max_steps=50), cache=tmp_path, progress=False,
                            exclude=test).info["cached"] is True
    again5 = cached_trap_base(task, replace(conv, max_steps=5), cache=tmp_path, progress=False, exclude=test)
    assert again5.info["cached"] is True
    assert cached_trap_base(task, replace(cfg, n_val=8), cache=tmp_path, progress=False,
                            exclude=test).info["path"] != b.info["path"]     # the validation prompts are keyed


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_stop_kl_is_validated(bad):
    with pytest.raises(ValueError, match="stop_kl"):
        TrapBaseConfig(stop_kl=bad)
    with pytest.raises(ValueError, match="max_steps"):
        TrapBaseConfig(stop_kl=0.05, max_steps=0)


@pytest.mark.parametrize("hold,kl,halved", [(0.5, 5.0, False), (0.5, 0.3, True), (0.0, 5.0, True)])
def test_lr_is_held_on_the_units_digit_plateau(monkeypatch, hold, kl, halved):
    # recipe v3: ReduceLROnPlateau acts only once the KL is below hold * p_c ln 10 (0.46 at p_c 0.4, hold 0.5);
    # a KL that never improves (here a constant one) halves the lr after patience + 1 checks otherwise
    import iclr25.sharpening.base as base_mod

    monkeypatch.setattr(base_mod, "trap_data_kl", lambda *a, **k: {"kl": kl})
    task = TrapArithmeticTask()
    cfg = replace(TINY, stop_kl=1e-6, max_steps=25, plateau_patience=1, lr_hold_fraction=hold)
    _, info = pretrain_trap_base_to_kl(task, cfg, validation_pairs(task, 8), progress=False)
    lrs = [h[3] for h in info["kl_history"]]
    assert info["lr_hold_kl"] == pytest.approx(hold * 0.4 * math.log(10))
    assert lrs[0] == pytest.approx(TINY.lr)
    assert (min(lrs) < TINY.lr) is halved
    if not halved:
        assert lrs == [pytest.approx(TINY.lr)] * len(lrs)


def test_warm_start_continues_from_the_parent_and_keys_on_its_weights(tmp_path):
    from iclr25.core.lm import tiny_causal_lm

    tok = _tok()
    parent = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=1, n_head=2, seed=3,
                            eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    parent.save_pretrained(tmp_path / "parent")
    task = TrapArithmeticTask(p_correct=0.1, n_distractors=40)
    val = validation_pairs(task, 8)
    cfg = replace(TINY, lr=1e-12, max_steps=5, init_from=str(tmp_path / "parent"))
    model, info = pretrain_trap_base_to_kl(task, cfg, val, progress=False)
    assert info["init_from"] == str(tmp_path / "parent")
    for (name, p), q in zip(parent.named_parameters(), model.parameters()):   # lr ~0: still the parent's weights
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=name)
    scratch, _ = pretrain_trap_base_to_kl(task, replace(cfg, init_from=None), val, progress=False)
    assert not torch.allclose(next(scratch.parameters()), next(parent.parameters()))
    # the cache key follows the parent's weights, not its path
    from iclr25.sharpening.base import _kl_base_dir

    k1 = _kl_base_dir(task, cfg, val, tmp_path).name
    (tmp_path / "moved").mkdir()
    for f in (tmp_path / "parent").iterdir():
        (tmp_path / "moved" / f.name).write_bytes(f.read_bytes())
    assert _kl_base_dir(task, replace(cfg, init_from=str(tmp_path / "moved")), val, tmp_path).name == k1
    with torch.no_grad():
        next(parent.parameters()).add_(1.0)
    parent.save_pretrained(tmp_path / "moved")
    assert _kl_base_dir(task, replace(cfg, init_from=str(tmp_path / "moved")), val, tmp_path).name != k1
    assert _kl_base_dir(task, replace(cfg, init_from=None), val, tmp_path).name != k1


def test_warm_start_refuses_a_missing_folder_or_another_shape(tmp_path):
    with pytest.raises(ValueError, match="init_from"):
        TrapBaseConfig(stop_kl=0.05, init_from=str(tmp_path / "nothing"))
    from iclr25.core.lm import tiny_causal_lm

    tok = _tok()
    tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=64, n_layer=1, n_head=2, seed=0,
                   eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).save_pretrained(tmp_path / "wide")
    task = TrapArithmeticTask()
    with pytest.raises(ValueError, match="n_embd"):
        pretrain_trap_base_to_kl(task, replace(TINY, init_from=str(tmp_path / "wide")), validation_pairs(task, 8),
                                 progress=False)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="lr_hold_fraction"):
            TrapBaseConfig(lr_hold_fraction=bad)


def test_full_preset_plans_bases_parents_first():
    from iclr25.sharpening.pretrain import base_plan
    from iclr25.sharpening.reproduce import ReproSettings

    st = ReproSettings.preset(False)
    plan = [(b["p_correct"], b["n_distractors"], b["seed"], b["parent"]) for b in base_plan(st)]
    # a base per seed; the warm-started sweep / XPO bases after their parent (seed-0 p_c 0.4)
    assert plan == [(0.4, 10, 0, None), (0.4, 10, 1, None), (0.4, 10, 2, None),
                    (0.2, 20, 0, "base_pc0.4_s0"), (0.1, 40, 0, "base_pc0.4_s0")]
    quick = ReproSettings.preset(True)
    assert [(b["p_correct"], b["seed"], b["parent"]) for b in base_plan(quick)] == [(0.4, quick.base.seed, None)]


def test_cache_keeps_a_converged_base_under_a_smaller_cap_and_names_damage(tmp_path):
    task = TrapArithmeticTask()
    _, test = task.split(40, 24, seed=0)
    conv = replace(TINY, n_val=16, stop_kl=1e3)                  # converges at the first check (step 5)
    c = cached_trap_base(task, conv, cache=tmp_path, progress=False, exclude=test)
    small = cached_trap_base(task, replace(conv, max_steps=3), cache=tmp_path, progress=False, exclude=test)
    assert small.info["cached"] is False and small.info["path"].endswith("-cap3") and small.info["steps"] == 3
    back = cached_trap_base(task, conv, cache=tmp_path, progress=False, exclude=test)
    assert back.info["cached"] is True and back.info["path"] == c.info["path"]        # the converged one was kept
    assert cached_trap_base(task, replace(conv, max_steps=3), cache=tmp_path, progress=False,
                            exclude=test).info["cached"] is True
    rec = tmp_path / "sharpening" / c.info["path"].split("/")[-1] / "trapbase_train.json"
    for bad in ("", "[]", '{"steps": 5}'):
        rec.write_text(bad)
        with pytest.raises(ValueError, match=r"is damaged .*delete the folder"):
            cached_trap_base(task, conv, cache=tmp_path, progress=False, exclude=test)
    # init_from as a Path is stored as a string (the record is JSON); a non-path is refused by name
    p = TrapBaseConfig(stop_kl=0.05, init_from=Path(back.info["path"]))
    assert p.init_from == back.info["path"]
    with pytest.raises(ValueError, match="init_from"):
        TrapBaseConfig(stop_kl=0.05, init_from=5)
    with pytest.raises(ValueError, match="lr_hold_fraction"):
        TrapBaseConfig(lr_hold_fraction=True)
