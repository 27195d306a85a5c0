"""Reproduction: real-data checks (mirror) and a smoke run of the whole pipeline at toy scale."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

CLAIMS = ["bon/win_rate_exact", "bon/kl_exact", "vbon/win_rate_increases_with_n",
          "mechanism/vbon_log_ratio_tracks_log_cdf", "mechanism/vbon_kl_near_bon_kl", "vbon/at_or_above_rlhf_frontier",
          "vbon/inference_cost"]


def test_ols_slope_matches_normal_equations():
    from iclr25.vbon.reproduce import ols_slope

    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    y = 0.7 * x + 0.3 + rng.normal(scale=0.5, size=200)
    b, se, r = ols_slope(x, y)
    X = np.stack([x, np.ones_like(x)], 1)  # independent: normal equations with an explicit inverse
    coef = np.linalg.inv(X.T @ X) @ X.T @ y
    sigma2 = ((y - X @ coef) ** 2).sum() / (len(x) - 2)
    assert b == pytest.approx(coef[0], rel=1e-10)
    assert se == pytest.approx(np.sqrt(sigma2 * np.linalg.inv(X.T @ X)[0, 0]), rel=1e-10)
    assert r == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-10)
    with pytest.raises(ValueError, match="constant"):
        ols_slope(np.ones(5), np.arange(5.0))
    with pytest.raises(ValueError, match="non-finite"):
        ols_slope([0.0, 1.0, np.nan], [1.0, 2.0, 3.0])


def test_log_ratio_mechanism_fails_for_an_unchanged_policy(tiny_lm, count_reward):
    """pi_theta = pi_ref: every log-ratio is 0, so the slope is 0 and the claim's lower bound is not > 0."""
    from iclr25.vbon.cdf import RewardCDFCache
    from iclr25.vbon.reproduce import policy_log_ratio_vs_log_cdf
    from iclr25.vbon.sampling import sample_texts

    model, tok = tiny_lm
    prompts = ["the movie", "a film is", "the plot"]
    torch.manual_seed(0)
    cdf = RewardCDFCache.build(lambda p, m: sample_texts(model, tok, p, m, 6), count_reward, prompts, 16)
    got = policy_log_ratio_vs_log_cdf(model, model, tok, count_reward, cdf, prompts, 4, 8, 6)
    assert got["n_samples"] == 24
    assert got["mean_log_ratio"] == 0.0 and got["slope"] == 0.0
    assert not got["slope"] - 2 * got["slope_se"] > 0
    assert got["mean_log_cdf"] < 0


def test_rlhf_frontier_interpolation():
    from iclr25.vbon.reproduce import rlhf_frontier

    # points (KL, win): (0, .5) implicit, (1, .6), (2, .55) -> envelope .6 from KL 1 on
    got = rlhf_frontier([1.0, 2.0], [0.6, 0.55], [0.5, 1.5, 3.0])
    assert got == pytest.approx(np.array([0.55, 0.6, 0.6]))


@pytest.mark.realdata
def test_polarity_split_and_reward_accuracy(data_dir, shared_cache, monkeypatch):
    monkeypatch.setenv("ICLR25_DATA", str(data_dir))
    monkeypatch.setenv("ICLR25_CACHE", str(shared_cache))
    from iclr25.vbon.data import load_polarity, make_prompts
    from iclr25.vbon.rewards import TfidfSentimentReward

    d = load_polarity()
    assert len(d.train_texts) + len(d.test_texts) == 10662 and len(d.test_texts) == 1067
    assert sum(d.test_labels) in (533, 534)
    rw = TfidfSentimentReward.cached(d)
    acc = rw.accuracy(d.test_texts, d.test_labels)
    assert acc == pytest.approx(0.772, abs=0.01)  # spec §4.2: measured 0.772 on the seed-0 split
    r = rw(["a great"], [" and moving film"])
    assert r.shape == (1,) and r[0] > 0
    again = TfidfSentimentReward.cached(d)  # loaded from the cache (no pickle), identical scores
    assert np.allclose(again.score_texts(d.test_texts[:50]), rw.score_texts(d.test_texts[:50]))
    p = make_prompts(d.test_texts, 10)
    assert len(set(p)) == 10 and all(len(x.split()) == 3 for x in p)


def _tiny(monkeypatch, data_dir, shared_cache):
    monkeypatch.setenv("ICLR25_DATA", str(data_dir))
    monkeypatch.setenv("ICLR25_CACHE", str(shared_cache))  # inherited by the spawned workers
    from iclr25.vbon import reproduce as rp
    from iclr25.vbon.reflm import reference_lm_spec

    # the parent resolves LM_SIZES into the job settings, so the workers see the tiny spec too
    monkeypatch.setitem(rp.LM_SIZES, "quick", reference_lm_spec(vocab_size=300, n_layer=1, n_embd=32, n_head=2,
                                                                seq_len=24, steps=13, lr=5e-3))
    return replace(rp.QUICK, n_train_prompts=4, n_eval_prompts=4, m=8, ns=(2, 4), betas=(0.5,), steps=2,
                   prompts_per_step=2, samples_per_prompt=2, eval_samples_per_prompt=2, bon_repeats=2,
                   bon_ns=(2, 4), throughput_prompts=4, max_new_tokens=6)


def _untimed(rec: dict) -> dict:
    """A pipeline record without its wall-clock measurements (timings differ from run to run)."""
    rec = json.loads(json.dumps(rec))
    rec.pop("timings")
    rec.pop("throughput")
    for run in rec["runs"].values():
        run.pop("train_seconds")
    return rec


def _records(out: Path) -> dict:
    return {p.stem: json.loads(p.read_text())["record"] for p in sorted((out / "records").glob("*.json"))}


@pytest.mark.realdata
def test_reproduce_one_and_two_workers_give_the_same_records(data_dir, shared_cache, monkeypatch, tmp_path):
    """Issue #48: ``--workers 2`` (two spawned workers, one job each) gives the records of ``--workers 1``
    (in-process), timings aside; the claims come from the records, and the report holds the seven claims."""
    from iclr25.core.registry import run_reproduction
    from iclr25.core.results import read_report
    from iclr25.vbon import reproduce as rp

    tiny = _tiny(monkeypatch, data_dir, shared_cache)
    rep = run_reproduction("vbon", rp.reproduce, quick=True, out_dir=tmp_path / "w1", version="test", workers=1,
                           settings=tiny, quiet=True)
    assert [c.name for c in rep.claims] == CLAIMS
    back = read_report(tmp_path / "w1")
    assert [c.holds for c in back.claims] == [c.holds for c in rep.claims]
    assert back.claims[1].holds  # exact enumeration claim does not depend on the scale
    raw = json.loads((tmp_path / "w1" / "metrics.json").read_text())
    assert set(raw["runs"]) == {"vbon-exact-N2", "vbon-exact-N4", "rlhf-beta0.5"}
    assert (tmp_path / "w1" / "reward_cdf.jsonl").is_file()
    rp.reproduce(True, tmp_path / "w2", workers=2, settings=tiny, quiet=True)
    one, two = _records(tmp_path / "w1"), _records(tmp_path / "w2")
    assert set(one) == set(two) == {"kl_enumeration", "pipeline"}
    assert one["kl_enumeration"] == two["kl_enumeration"]
    assert _untimed(one["pipeline"]) == _untimed(two["pipeline"])
    run2 = json.loads((tmp_path / "w2" / "metrics.json").read_text())["runner"]
    assert run2["workers"] == 2 and run2["cpu_seconds_children"] > 0


@pytest.mark.realdata
def test_resume_reuses_finished_records_and_refuses_changed_settings(data_dir, shared_cache, monkeypatch, tmp_path):
    """A run killed after ``kl_enumeration`` finished (its record kept, ``pipeline``'s missing): ``--resume`` reuses
    the finished record and runs only ``pipeline``; resuming with other settings is refused, naming the setting."""
    from iclr25.vbon import reproduce as rp

    tiny = _tiny(monkeypatch, data_dir, shared_cache)
    out = tmp_path / "out"
    first = rp.reproduce(True, out, workers=1, settings=tiny, quiet=True)
    kl_file = out / "records" / "kl_enumeration.json"
    kl_before = kl_file.read_text()
    (out / "records" / "pipeline.json").unlink()  # as if the kill came while pipeline ran
    os.utime(kl_file, (0, 0))
    again = rp.reproduce(True, out, workers=1, settings=tiny, quiet=True, resume=True)
    assert kl_file.stat().st_mtime == 0 and kl_file.read_text() == kl_before  # reused, not rewritten
    runner = json.loads((out / "metrics.json").read_text())["runner"]
    assert runner["reused"] == ["kl_enumeration"] and runner["ran"] == ["pipeline"]
    timed = {"vbon/inference_cost"}  # wall-clock timings: equal only by chance
    assert [(c.name, c.ours, c.holds) for c in first if c.name not in timed] == \
        [(c.name, c.ours, c.holds) for c in again if c.name not in timed]
    with pytest.raises(Exception, match="steps") as e:
        rp.reproduce(True, out, workers=1, settings=replace(tiny, steps=3), quiet=True, resume=True)
    assert "resume" in str(e.value).lower()


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick_full(data_dir, tmp_path):
    """The real ``reproduce --quick`` (minutes on 2 cores); checks the claim names with the shared tool."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "iclr25.vbon", "reproduce", "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, env={"ICLR25_DATA": str(data_dir), **__import__("os").environ})
    assert r.returncode == 0, r.stderr[-2000:]
    tool = Path(os.environ.get("ICLR25_CHECK_CLAIMS", "/nonexistent"))  # the reviewers' claim checker, if given
    if tool.is_file():
        out = subprocess.run([sys.executable, str(tool), str(tmp_path), "vbon", *CLAIMS], capture_output=True, text=True)
        assert "required present: 5/5" in out.stdout, out.stdout
    assert time.perf_counter() - t < 1800


def test_bon_n_at_win_rate_interpolates_in_log_n():
    """Independent hand computation: BoN rates 0.594 (N=2), 0.750 (N=4), 0.865 (N=8); vBoN 0.631 lies
    (0.631-0.594)/(0.750-0.594) of the way from log 2 to log 4."""
    import math

    from iclr25.vbon.reproduce import bon_n_at_win_rate

    ns, rates = [2, 4, 8], [0.594, 0.750, 0.865]
    f = (0.631 - 0.594) / (0.750 - 0.594)
    assert bon_n_at_win_rate(0.631, ns, rates) == pytest.approx(math.exp((1 + f) * math.log(2)))
    assert bon_n_at_win_rate(0.55, ns, rates) == pytest.approx(2 ** ((0.55 - 0.5) / (0.594 - 0.5)))  # from N=1
    assert bon_n_at_win_rate(0.5, ns, rates) == 1.0 and bon_n_at_win_rate(0.3, ns, rates) == 1.0
    assert bon_n_at_win_rate(0.95, ns, rates) == 8.0  # capped at the largest N measured
    assert bon_n_at_win_rate(0.70, [4, 2], [0.75, 0.80]) == pytest.approx(  # non-monotone rates -> running max
        2 ** ((0.70 - 0.5) / (0.80 - 0.5)))
    with pytest.raises(ValueError, match="N >= 2"):
        bon_n_at_win_rate(0.6, [1, 2], [0.5, 0.6])


def test_matched_cost_ratio_and_its_failure():
    """Linear BoN time t(N) = N, vBoN time 1: the ratio is the matched N; a vBoN at the reference's win rate
    (1/2) gets BoN's N=1 cost, which is the claim's baseline, so the claim fails."""
    from iclr25.vbon.reproduce import matched_cost

    rows = {2: {"win_rate": 2 / 3, "se": 0.0}, 4: {"win_rate": 0.8, "se": 0.0}, 8: {"win_rate": 8 / 9, "se": 0.0}}
    tb = {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}
    got = matched_cost(0.75, 0.0, rows, 1.0, tb, draws=50)
    n = 2 ** (1 + (0.75 - 2 / 3) / (0.8 - 2 / 3))
    assert got["n_match"] == pytest.approx(n) and got["ratio"] == pytest.approx(n)
    assert got["ratio_se"] == pytest.approx(0.0, abs=1e-12)
    none = matched_cost(0.5, 0.0, rows, 1.0, tb, draws=50)
    assert none["ratio"] == pytest.approx(tb[1] / 1.0)  # equal to the baseline: no margin, the claim cannot hold
    noisy = matched_cost(0.75, 0.03, {k: {**v, "se": 0.03} for k, v in rows.items()}, 1.0, tb, draws=400)
    assert 0.1 < noisy["ratio_se"] < 2 and noisy["n_match_lo"] < n < noisy["n_match_hi"]
