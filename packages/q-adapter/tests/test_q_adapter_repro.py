"""Smoke test of reproduce() at tiny settings (real data) on the core runner, and the full quick run (slow)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from iclr25.core.results import Claim

NAMES = ["tabular/recovers_optimum", "tabular/equals_dpo_when_alphas_equal", "dsp/pair_accuracy_vs_dpo",
         "dsp/forgetting_at_matched_accuracy_lt_dpo", "dsp/forgetting_at_matched_accuracy_lt_sft",
         "dsp/pair_accuracy_vs_dpo_paper_loss", "dsp/forgetting_at_matched_accuracy_lt_dpo_paper_loss",
         "dsp/forgetting_at_matched_accuracy_lt_sft_paper_loss", "mechanism/residual_ranks_heldout_pairs"]


def _tiny():
    from iclr25.core.lm import TinyLMSpec
    from iclr25.q_adapter import reproduce as rp
    from iclr25.q_adapter.base import BaseLMConfig

    return rp.ReproSettings(base=BaseLMConfig(lm=TinyLMSpec(n_layer=1, n_embd=32, n_head=2, vocab_size=300, steps=3,
                                                             seq_len=32, batch_size=4)),
                            n_train_queries=3, n_val_queries=2, n_test_queries=2, max_length=40,
                            max_prompt_length=16, n_general=3, tabular_iters=20, seeds=(0, 1), checkpoints=1)


@pytest.mark.realdata
def test_reproduce_smoke_two_workers_equal_in_process(tmp_path, monkeypatch, need_file):
    need_file("dsp/domain_specific_preference.test.json")
    need_file("hh-rlhf/helpful.test.json")
    need_file("hh-rlhf/harmless-base.test.jsonl.gz")
    from iclr25.q_adapter import reproduce as rp

    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    tiny = _tiny()
    monkeypatch.setattr(rp, "QUICK", tiny)
    claims = rp.reproduce(True, tmp_path / "out", workers=2, quiet=True)
    assert [c.name for c in claims] == NAMES
    assert all(isinstance(c, Claim) for c in claims)
    for c in claims:  # the claim record is filled (issue 45 §1)
        assert c.paper_ref and c.n_seeds is not None
        if c.name.startswith("dsp/"):
            assert c.kind == "headline" and c.n_seeds == 2 and c.spread is not None and c.plot == "headline.png"
    mech = claims[-1]
    assert mech.kind == "mechanism" and mech.n_seeds == 2 and mech.spread is not None and mech.threshold > 0
    assert (tmp_path / "out" / "raw.json").is_file()
    assert (tmp_path / "out" / "curve.csv").read_text().startswith("method,lr,seed,step,val_accuracy")
    assert len(list((tmp_path / "out" / "records").glob("*.json"))) == 2 + 4 * 2
    # the same job again, in this process: the same record
    from iclr25.q_adapter.dsp import method_job, settings_to_dict

    r2 = json.loads((tmp_path / "out" / "records" / "dpo-lr0.003-seed1.json").read_text())["record"]
    r1 = method_job({"repro": settings_to_dict(tiny), "method": "dpo", "lr": 3e-3}, 1, {})
    # bitwise: the run's step-0 point came from the base job (issue 48 §5), this one from the job itself
    assert r1["curve"] == r2["curve"]


@pytest.mark.realdata
def test_step0_from_base_equals_direct(tmp_path, monkeypatch, need_file):
    """The base job's step-0 point of every method equals the one each method job computes itself (at each seed:
    LoRA B = 0 at init, seed-independent evaluation sets), bitwise, and a method job given the base record returns
    the same record as one that computes step 0 itself; an old base record without ``step0`` is refused."""
    need_file("dsp/domain_specific_preference.test.json")
    need_file("hh-rlhf/helpful.test.json")
    need_file("hh-rlhf/harmless-base.test.jsonl.gz")
    from iclr25.q_adapter.dsp import METHODS, base_job, method_job, settings_to_dict

    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    sd = settings_to_dict(_tiny())
    base = json.loads(json.dumps(base_job(sd, 0, {})))  # as the runner passes it: through JSON
    assert set(base["step0"]) == set(METHODS)
    for name in METHODS:
        for seed in (0, 1):
            direct = method_job({"repro": sd, "method": name, "lr": 3e-3}, seed, {})
            assert direct["curve"][0] == base["step0"][name], (name, seed)
        via = method_job({"repro": sd, "method": name, "lr": 3e-3}, 1, {"base": base})
        assert {k: v for k, v in via.items() if k != "train_seconds"} == {
            k: v for k, v in direct.items() if k != "train_seconds"}
    # DPO's implied reward is 0 at init (adapter on = off): every pair a tie
    assert base["step0"]["dpo"]["test_accuracy"] == base["step0"]["dpo"]["val_accuracy"] == 0.5
    old = {k: v for k, v in base.items() if k != "step0"}
    with pytest.raises(ValueError, match="no step-0 point of 'sft'.*without --resume"):
        method_job({"repro": sd, "method": "sft", "lr": 3e-3}, 0, {"base": old})


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick_full(tmp_path, need_file):
    need_file("dsp/domain_specific_preference.test.json")
    from iclr25.core.registry import run_reproduction
    from iclr25.q_adapter.reproduce import reproduce

    rep = run_reproduction("q-adapter", reproduce, quick=True, out_dir=tmp_path)
    assert [c.name for c in rep.claims] == NAMES
    assert rep.claims[0].holds and rep.claims[1].holds
    assert dataclasses.is_dataclass(rep)


def test_reproduce_workers_get_the_heap_reuse_env(monkeypatch, tmp_path):
    """reproduce() spawns its workers with the core's glibc heap settings (issue 48 §5: no mmap/page-fault round
    trip per evaluation tensor; how the runner applies them: the core's runner tests)."""
    import iclr25.core.runner as runner
    from iclr25.q_adapter.reproduce import reproduce

    seen = {}

    class Stop(Exception):
        pass

    def fake(jobs, out, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(runner, "run_jobs", fake)
    with pytest.raises(Stop):
        reproduce(True, tmp_path, workers=2)
    assert seen["worker_env"] == runner.HEAP_REUSE_ENV and seen["worker_env"]["MALLOC_MMAP_THRESHOLD_"]

