"""Smoke test of reproduce() at tiny settings (real data), and the full quick run (slow)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from iclr25.core.results import Claim

NAMES = ["tabular/recovers_optimum", "tabular/equals_dpo_when_alphas_equal", "dsp/pair_accuracy_vs_dpo",
         "dsp/forgetting_lt_dpo", "dsp/forgetting_lt_sft", "dsp/pair_accuracy_vs_dpo_paper_loss",
         "dsp/forgetting_lt_dpo_paper_loss", "dsp/forgetting_lt_sft_paper_loss",
         "mechanism/code_regulariser_dominates_loss_at_init"]


@pytest.mark.realdata
def test_reproduce_smoke_parallel_seeds_equal_in_process(tmp_path, monkeypatch, need_file):
    need_file("dsp/domain_specific_preference.test.json")
    need_file("hh-rlhf/helpful.test.json")
    need_file("hh-rlhf/harmless-base.test.jsonl.gz")
    from iclr25.core.lm import TinyLMSpec
    from iclr25.q_adapter import reproduce as rp
    from iclr25.q_adapter.base import BaseLMConfig

    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    tiny = rp.ReproSettings(base=BaseLMConfig(lm=TinyLMSpec(n_layer=1, n_embd=32, n_head=2, vocab_size=300, steps=3,
                                                             seq_len=32, batch_size=4)),
                            n_train_queries=3, n_test_queries=2, max_length=40, max_prompt_length=16,
                            n_general=3, tabular_iters=20, seeds=(0, 1), curve_points=1, curve_pairs=4)
    monkeypatch.setattr(rp, "QUICK", tiny)
    claims = rp.reproduce(True, tmp_path / "out", workers=2)
    assert [c.name for c in claims] == NAMES
    assert all(isinstance(c, Claim) for c in claims)
    assert (tmp_path / "out" / "raw.json").is_file()
    assert (tmp_path / "out" / "curve.csv").read_text().startswith("method,seed,step,pair_accuracy")
    # the seeds ran in 2 spawned processes; seed 1 again in this process gives the same numbers
    raw = json.loads((tmp_path / "out" / "raw.json").read_text())
    assert raw["workers"] == 2
    again = rp.run_dsp(tiny, 1)
    for m in (*rp.METHODS, "base"):
        for k in ("pair_accuracy", "general_nll"):
            assert raw["dsp_runs"][1][m][k] == pytest.approx(again[m][k], rel=1e-5, abs=1e-6), (m, k)
    flat = lambda c: [x for pt in c for x in pt]  # noqa: E731
    assert flat(raw["dsp_runs"][1]["q-adapter-code"]["curve"]) == pytest.approx(flat(again["q-adapter-code"]["curve"]))


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
