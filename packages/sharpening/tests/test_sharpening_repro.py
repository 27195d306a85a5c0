"""The reproduction end to end at a tiny scale (a seconds-long base, not the real one): claims, files, caching."""

import json
import os
from dataclasses import replace

import pytest

from iclr25.core.registry import run_reproduction
from iclr25.sharpening.base import TrapBaseConfig
from iclr25.sharpening.reproduce import ReproSettings, reproduce

TINY_BASE = TrapBaseConfig(n_layer=1, n_embd=32, n_head=2, n_strings=2048, epochs=1, batch_size=64, lr=1e-2)
TINY = ReproSettings(seeds=(0, 1), base=TINY_BASE, n_train=40, n_test=24, bon_ns=(1, 2, 4), eval_samples=2, sft_n=4,
                     sft_epochs=1, rlhf_betas=(1.0, 0.25), rlhf_epochs=1)

QUICK_CLAIMS = {"base/trap_learned", "bon/beats_greedy", "bon/matches_coverage_formula",
                "mechanism/bon_likelihood_rises_with_n", "sft/accuracy_lift_over_greedy",
                "sft/likelihood_lift_over_greedy", "sft/greedy_flips", "mechanism/sharpened_fraction",
                "rlhf/matches_tilted_optimum", "rlhf/smaller_beta_sharper", "mechanism/rlhf_pushes_down_distractors"}


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_reproduce_tiny_writes_every_quick_claim(tmp_path, cache):
    rep = run_reproduction("sharpening", lambda quick, out_dir: reproduce(quick, out_dir, settings=TINY),
                           quick=True, out_dir=tmp_path / "out", version="test")
    names = {c.name for c in rep.claims}
    assert names == QUICK_CLAIMS
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    for c in data["claims"]:
        assert c["ours"] is None or isinstance(c["ours"], float)
        assert c["note"]
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert len(m["runs"]) == 2 and m["base"][0]["cached"] is False and m["one_time_pretraining_s"] > 0
    trap = next(c for c in rep.claims if c.name == "base/trap_learned")
    if not trap.holds:   # a seconds-long base does not learn addition: every other note says it cannot be read
        assert all("cannot be read" in c.note for c in rep.claims if c.name != "base/trap_learned")
    # second run: the base comes from the cache and its pre-training time is not counted again
    reproduce(True, tmp_path / "out2", settings=replace(TINY, seeds=(0,)))
    m2 = json.loads((tmp_path / "out2" / "metrics.json").read_text())
    assert m2["base"][0]["cached"] is True and m2["one_time_pretraining_s"] == 0
    assert any(p.name.startswith("tinylm-") for p in (cache / "sharpening").iterdir())


def test_full_only_experiments_run_at_tiny_scale(tmp_path, cache):
    st = replace(TINY, seeds=(0,), coverage=True, coverage_tasks=((0.4, 10), (0.1, 40)), coverage_draws=8,
                 xpo=True, xpo_alphas=(0.0, 0.1), xpo_iterations=2, xpo_prompts_per_iteration=4,
                 xpo_steps_per_iteration=2, offline_pairs=(8, 16), offline_steps=4, n_train=40,
                 # the full preset's to-convergence recipe, with a threshold this tiny base cannot reach in 20 steps
                 base=replace(TINY_BASE, stop_kl=1e-3, max_steps=20, eval_every=10, n_val=16, warmup_steps=5))
    claims = reproduce(False, tmp_path / "full", settings=st)
    names = {c.name for c in claims}
    trap = next(c for c in claims if c.name == "base/trap_learned")
    assert not trap.holds and trap.ours == 0.0
    assert "NOT converged" in trap.note and "did not converge" in trap.note and "after 20 steps" in trap.note
    cov = next(c for c in claims if c.name == "coverage/required_n_tracks_ccov")
    assert "NOT converged" in cov.note
    assert {"coverage/required_n_tracks_ccov", "xpo/fewer_samples_than_offline"} <= names
    m = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert set(m["extra"]["coverage"]) == {"0.4", "0.1"}
    assert set(m["extra"]["xpo"]["xpo"]) == {"0.0", "0.1"}
    assert m["resumed_stages"] == []
    assert all(b["recipe"] == "kl-stop-v3" and b["converged"] is False and b["steps"] == 20 for b in m["base"])
    assert any(p.name.startswith("trapbase-") for p in (cache / "sharpening").iterdir())
    # --resume: every finished stage is reloaded (numeric keys restored), the claims are the same numbers
    again = reproduce(False, tmp_path / "full", settings=st, resume=True)
    assert [(c.name, c.ours, c.baseline, c.holds) for c in again] == [(c.name, c.ours, c.baseline, c.holds)
                                                                       for c in claims]
    m2 = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert m2["resumed_stages"] == ["seed0", "coverage", "xpo"]
    assert m2["experiment_cpu_s"] >= 0.9 * m["experiment_cpu_s"]     # the reloaded stages' time is counted
    # a torn stage file and one from other settings: a ValueError naming the file and the fix
    stage = tmp_path / "full" / "stages" / "xpo.json"
    stage.write_text(stage.read_text()[:50])
    with pytest.raises(ValueError, match=r"xpo\.json: not a complete stage file.*delete it"):
        reproduce(False, tmp_path / "full", settings=st, resume=True)
    with pytest.raises(ValueError, match=r"seed0\.json was written by a reproduction with other settings"):
        reproduce(False, tmp_path / "full", settings=replace(st, sft_n=2), resume=True)


@pytest.mark.realdata
def test_realtext_check_reads_the_vbon_mirror(cache):
    root = os.environ.get("ICLR25_DATA", "")
    if not any(os.path.isfile(os.path.join(r, "vbon", "rt-polarity.pos")) for r in root.split(os.pathsep) if r):
        pytest.skip("mirrored file vbon/rt-polarity.pos not found under ICLR25_DATA (set ICLR25_DATA=/path/to/data)")
    from iclr25.sharpening.realtext import movie_snippets

    texts = movie_snippets()
    assert len(texts) == 10662 and all(t for t in texts)


def test_coverage_claim_with_a_censored_p_c_is_nan_and_writes(tmp_path):
    """A p_c whose BoN never reaches 90% within the draws: scored N = 10 x draws (finite; inf cannot go in JSON)."""
    import math

    from iclr25.sharpening.reproduce import _coverage_claim

    cov = {0.4: {"ccov": 2.5, "mode_is_correct": 1.0, "required_n": 5, "predicted_n": 5.8, "ratio": 5 / 5.8,
                 "curve": {1: 0.4, 64: 1.0}},
           0.1: {"ccov": 38.0, "mode_is_correct": 0.0, "required_n": None, "predicted_n": 87.6, "ratio": None,
                 "curve": {1: 0.02, 64: 0.05}}}
    c = _coverage_claim(cov)
    assert c.ours == pytest.approx(math.log2(640 / 87.6)) and not c.holds and "never reached 90% within 64" in c.note
    run_reproduction("sharpening", lambda quick, out_dir: [c], quick=False, out_dir=tmp_path, version="test")
    assert json.loads((tmp_path / "results.json").read_text())["claims"][0]["ours"] == pytest.approx(c.ours)
    ok = _coverage_claim({0.4: cov[0.4]})
    assert ok.holds and ok.ours == pytest.approx(abs(math.log2(5 / 5.8)))


def test_xpo_claim_does_not_hold_when_xpo_never_sharpens(tmp_path):
    """Both arms censored used to tie at 10x the budget and 'hold' at margin 0 (the full run's vacuous pass);
    XPO that never reaches 90% now scores +inf (written as null) and never holds."""
    from iclr25.sharpening.reproduce import _xpo_claim

    def xr(off, xpo):
        return {"beta": 0.25, "offline": {str(m): {"samples": m, "sharpened": f} for m, f in off},
                "xpo": {0.0: {"best_j": 0.0, "curve": [(i, m, f) for i, (m, f) in enumerate(xpo)]}}}

    never = _xpo_claim(xr([(32, 0.1), (64, 0.2)], [(32, 0.0), (64, 0.1)]))
    assert not never.holds and never.baseline == 640.0 and "XPO never reached 90%" in never.note
    run_reproduction("sharpening", lambda quick, out_dir: [never], quick=False, out_dir=tmp_path, version="test")
    d = json.loads((tmp_path / "results.json").read_text())["claims"][0]
    assert d["ours"] is None and d["holds"] is False
    assert _xpo_claim(xr([(32, 0.1), (64, 0.2)], [(32, 0.5), (64, 0.95)])).holds  # offline censored, XPO reached
    fewer = _xpo_claim(xr([(32, 0.5), (64, 0.95)], [(32, 0.95)]))
    assert fewer.holds and (fewer.ours, fewer.baseline) == (32.0, 64.0)
    assert not _xpo_claim(xr([(32, 0.95)], [(32, 0.5), (64, 0.95)])).holds


@pytest.mark.slow
def test_parallel_bases_and_stages_give_the_sequential_numbers(tmp_path, cache):
    # slow: spawned worker processes import torch and transformers. The full preset's layout at a tiny
    # scale: a base per seed, a warm-started sweep base, bases and stages in 2 processes vs one process.
    import torch

    st = replace(TINY, seeds=(0, 1), base_per_seed=True, coverage=True, coverage_tasks=((0.4, 10), (0.2, 20)),
                 coverage_draws=8, sweep_warm_start=True,
                 base=replace(TINY_BASE, stop_kl=1e-3, max_steps=20, eval_every=10, n_val=16, warmup_steps=5))
    par = reproduce(False, tmp_path / "par", settings=replace(st, parallel_stages=True), threads=2)
    m = json.loads((tmp_path / "par" / "metrics.json").read_text())
    assert sorted((r["p_correct"], r["seed"]) for r in m["base_parallel"]["records"]) == [(0.2, 0), (0.4, 0), (0.4, 1)]
    assert m["base_parallel"]["children_cpu_s"] > 0 and m["resumed_stages"] == []
    assert m["experiment_cpu_s"] > 0 and m["experiment_wall_s"] >= 0     # workers' base time is not subtracted
    warm = [b for b in m["base"] if b["p_correct"] == 0.2]
    assert warm and all(b["cached"] for b in m["base"])          # the run itself trained nothing
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seq = reproduce(False, tmp_path / "seq", settings=st, threads=1)
    finally:
        torch.set_num_threads(n)
    assert [(c.name, c.ours, c.baseline, c.holds) for c in par] == [(c.name, c.ours, c.baseline, c.holds) for c in seq]
