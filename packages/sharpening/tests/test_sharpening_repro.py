"""The reproduction end to end at a tiny scale (a seconds-long base, not the real one): jobs on the core's
runner, claims from the records, files, resume, and the claim builders on hand-made records."""

import json
import math
import os
from dataclasses import replace

import pytest

from iclr25.core.registry import run_reproduction
from iclr25.sharpening.base import TrapBaseConfig
from iclr25.sharpening.reproduce import ReproSettings, jobs, reproduce

TINY_BASE = TrapBaseConfig(n_layer=1, n_embd=32, n_head=2, n_strings=2048, epochs=1, batch_size=64, lr=1e-2)
TINY = ReproSettings(seeds=(0, 1), base_source="train", base=TINY_BASE, n_train=40, n_test=24, bon_ns=(1, 2, 4),
                     eval_samples=2, sft_n=4, sft_epochs=1, rlhf_betas=(1.0, 0.25), rlhf_epochs=1,
                     rlhf_pairs_per_prompt=2)

QUICK_CLAIMS = {"base/trap_learned", "bon/beats_greedy", "bon/matches_coverage_formula",
                "mechanism/bon_likelihood_rises_with_n", "sft/accuracy_lift_over_greedy",
                "sft/likelihood_lift_over_greedy", "sft/greedy_flips", "mechanism/sharpened_fraction",
                "rlhf/matches_tilted_optimum", "rlhf/smaller_beta_sharper", "mechanism/rlhf_pushes_down_distractors"}


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ICLR25_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_quick_preset_uses_the_shipped_base_and_several_pairs_per_prompt():
    q = ReproSettings.preset(True)
    assert q.base_source == "shipped" and not q.base_per_seed and q.rlhf_pairs_per_prompt >= 4
    names = [j.name for j in jobs(q)]
    assert names == [f"base_pc0.4_s{q.base.seed}", "seed0", "seed1"]
    full = ReproSettings.preset(False)
    fj = {j.name: j for j in jobs(full)}
    # the warm-started sweep / XPO bases depend on their parent; each seed on its own base
    assert fj["base_pc0.2_s0"].deps == ("base_pc0.4_s0",) and fj["base_pc0.1_s0"].deps == ("base_pc0.4_s0",)
    assert fj["seed1"].deps == ("base_pc0.4_s1",) and fj["xpo"].deps == ("base_pc0.1_s0",)
    assert set(fj["coverage"].deps) == {"base_pc0.4_s0", "base_pc0.2_s0", "base_pc0.1_s0"}
    assert ReproSettings.from_dict(full.to_dict()) == full and ReproSettings.from_dict(q.to_dict()) == q
    with pytest.raises(ValueError, match="base_source"):
        ReproSettings(base_source="cached")
    with pytest.raises(ValueError, match="rlhf_pairs_per_prompt"):
        ReproSettings(rlhf_pairs_per_prompt=0)


def test_reproduce_tiny_writes_every_quick_claim(tmp_path, cache):
    rep = run_reproduction("sharpening", lambda quick, out_dir: reproduce(quick, out_dir, settings=TINY, workers=1),
                           quick=True, out_dir=tmp_path / "out", version="test")
    names = {c.name for c in rep.claims}
    assert names == QUICK_CLAIMS
    for c in rep.claims:      # the structured record every claim fills
        assert c.kind in ("headline", "mechanism", "sanity") and c.paper_ref and c.n_seeds >= 1 and c.note
        assert c.plot and (tmp_path / "out" / c.plot).is_file(), c.name
        if c.baseline is not None:
            assert c.n_seeds == 2 and c.spread is not None and c.spread >= 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert set(m["records"]) == {"base_pc0.4_s0", "seed0", "seed1"} and m["cpu_seconds"] > 0
    assert m["records"]["base_pc0.4_s0"]["cached"] is False and m["one_time_pretraining_cpu_s"] > 0
    assert m["records"]["seed0"]["rlhf"]["n_pairs"] == 2 * TINY.n_train
    trap = next(c for c in rep.claims if c.name == "base/trap_learned")
    if not trap.holds:   # a seconds-long base does not learn addition: every other note says it cannot be read
        assert all("cannot be read" in c.note for c in rep.claims if c.name not in ("base/trap_learned",))
    # second run: the base comes from the cache and its pre-training time is not counted again
    reproduce(True, tmp_path / "out2", settings=replace(TINY, seeds=(0,)), workers=1)
    m2 = json.loads((tmp_path / "out2" / "metrics.json").read_text())
    assert m2["records"]["base_pc0.4_s0"]["cached"] is True and m2["one_time_pretraining_cpu_s"] == 0


def test_full_only_experiments_run_at_tiny_scale_and_resume(tmp_path, cache):
    st = replace(TINY, seeds=(0,), coverage=True, coverage_tasks=((0.4, 10), (0.1, 40)), coverage_draws=8,
                 xpo=True, xpo_alphas=(0.0, 0.1), xpo_iterations=2, xpo_prompts_per_iteration=4,
                 xpo_steps_per_iteration=2, offline_pairs=(8, 16), offline_steps=4, base_per_seed=True,
                 # the full preset's to-convergence recipe, with a threshold this tiny base cannot reach in 20 steps
                 base=replace(TINY_BASE, stop_kl=1e-3, max_steps=20, eval_every=10, n_val=16, warmup_steps=5))
    claims = reproduce(False, tmp_path / "full", settings=st, workers=1)
    names = {c.name for c in claims}
    trap = next(c for c in claims if c.name == "base/trap_learned")
    assert not trap.holds and trap.ours == 0.0
    assert "NOT converged" in trap.note and "did not converge" in trap.note and "after 20 steps" in trap.note
    cov = next(c for c in claims if c.name == "coverage/required_n_tracks_ccov")
    assert "NOT converged" in cov.note
    assert {"coverage/required_n_tracks_ccov", "xpo/fewer_samples_than_offline"} <= names
    m = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert set(m["records"]["coverage"]) == {"0.4", "0.1"}
    assert set(m["records"]["xpo"]["xpo"]) == {"0", "0.1"}
    bases = [v for k, v in m["records"].items() if k.startswith("base_")]
    assert all(b["recipe"] == "kl-stop-v3" and b["converged"] is False and b["steps"] == 20 for b in bases)
    assert any(p.name.startswith("trapbase-") for p in (cache / "sharpening").iterdir())
    # --resume: every finished job is reused, the claims are the same numbers
    again = reproduce(False, tmp_path / "full", settings=st, resume=True, workers=1)
    assert [(c.name, c.ours, c.baseline, c.holds, c.note) for c in again] == \
        [(c.name, c.ours, c.baseline, c.holds, c.note) for c in claims]
    m2 = json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert m2["runner"]["ran"] == [] and len(m2["runner"]["reused"]) == len(m2["records"])
    with pytest.raises(ValueError, match="settings"):
        reproduce(False, tmp_path / "full", settings=replace(st, sft_n=2), resume=True, workers=1)


@pytest.mark.realdata
def test_realtext_check_reads_the_vbon_mirror(cache):
    root = os.environ.get("ICLR25_DATA", "")
    if not any(os.path.isfile(os.path.join(r, "vbon", "rt-polarity.pos")) for r in root.split(os.pathsep) if r):
        pytest.skip("mirrored file vbon/rt-polarity.pos not found under ICLR25_DATA (set ICLR25_DATA=/path/to/data)")
    from iclr25.sharpening.realtext import movie_snippets

    texts = movie_snippets()
    assert len(texts) == 10662 and all(t for t in texts)


def _cov_row(pc, ccov, req, pred, curve):
    return {"p_correct": pc, "n_distractors": 10, "ccov": ccov, "mode_is_correct": 1.0, "required_n": req,
            "predicted_n": pred, "ratio": (req / pred) if req else None, "curve": curve, "base_steps": 5,
            "base_val_kl": 0.01, "base_converged": True, "base_pretrain_cpu_s": 1.0, "base_stop_kl": 0.05}


def test_coverage_claim_with_a_censored_p_c_is_scored_and_writes(tmp_path):
    """A p_c whose BoN never reaches 90% within the draws: scored N = 10 x draws (finite; inf cannot go in JSON)."""
    from iclr25.sharpening.claims import coverage_claim

    cov = {"0.4": _cov_row(0.4, 2.5, 5, 5.8, [[1, 0.4], [64, 1.0]]),
           "0.1": _cov_row(0.1, 38.0, None, 87.6, [[1, 0.02], [64, 0.05]])}
    c = coverage_claim(cov)
    assert c.ours == pytest.approx(math.log2(640 / 87.6)) and not c.holds and "never reached 90% within 64" in c.note
    run_reproduction("sharpening", lambda quick, out_dir: [c], quick=False, out_dir=tmp_path, version="test")
    assert json.loads((tmp_path / "results.json").read_text())["claims"][0]["ours"] == pytest.approx(c.ours)
    ok = coverage_claim({"0.4": cov["0.4"]})
    assert ok.holds and ok.ours == pytest.approx(abs(math.log2(5 / 5.8)))


def test_xpo_claim_does_not_hold_when_xpo_never_sharpens(tmp_path):
    """Both arms censored used to tie at 10x the budget and 'hold' at margin 0 (the full run's vacuous pass);
    XPO that never reaches 90% scores +inf (written as null) and never holds."""
    from iclr25.sharpening.claims import xpo_claim

    def xr(off, xpo):
        return {"beta": 0.25, "offline": {str(m): {"samples": m, "sharpened": f} for m, f in off},
                "xpo": {"0": {"alpha": 0.0, "best_j": 0.0, "curve": [[i, m, f] for i, (m, f) in enumerate(xpo)]}},
                "base_steps": 5, "base_val_kl": 0.01, "base_converged": True, "base_pretrain_cpu_s": 1.0,
                "base_stop_kl": 0.05}

    never = xpo_claim(xr([(32, 0.1), (64, 0.2)], [(32, 0.0), (64, 0.1)]))
    assert not never.holds and never.baseline == 640.0 and "XPO never reached 90%" in never.note
    run_reproduction("sharpening", lambda quick, out_dir: [never], quick=False, out_dir=tmp_path, version="test")
    d = json.loads((tmp_path / "results.json").read_text())["claims"][0]
    assert d["ours"] is None and d["holds"] is False
    assert xpo_claim(xr([(32, 0.1), (64, 0.2)], [(32, 0.5), (64, 0.95)])).holds  # offline censored, XPO reached
    fewer = xpo_claim(xr([(32, 0.5), (64, 0.95)], [(32, 0.95)]))
    assert fewer.holds and (fewer.ours, fewer.baseline) == (32.0, 64.0)
    assert not xpo_claim(xr([(32, 0.95)], [(32, 0.5), (64, 0.95)])).holds


def _split(c, d, u):
    return {"correct_mass": c, "distractor_mass": d, "unsupported_mass": u, "outside_mass": 1 - c - d - u}


def _rlhf_run(seed, base_split, after):
    return {"rlhf": {"identical_pair_share": 0.1, "n_pairs": 80, "pairs_per_prompt": 2, "base_split": base_split,
                     "beta": {b: {"mode_mass": after["correct_mass"], "tilted": 0.9, **after} for b in (1.0, 0.25)}}}


def test_rlhf_note_says_where_the_mass_went_from_the_numbers():
    """The note used to state as fixed text that the freed mass lands on never-sampled answers; a run where
    that mass fell (0.218 -> 0.130) contradicted it. The note now follows the numbers either way."""
    from iclr25.sharpening.claims import _rlhf_note_split

    base = _split(0.4, 0.38, 0.218)
    fell = [_rlhf_run(s, base, _split(0.85, 0.02, 0.130)) for s in (0, 1)]
    note = _rlhf_note_split(fell, (1.0, 0.25))
    assert "changed by -0.088" in note and "went mostly to the correct answer" in note
    assert "never samples" not in note
    rose = [_rlhf_run(s, base, _split(0.5, 0.02, 0.478)) for s in (0, 1)]
    note = _rlhf_note_split(rose, (1.0, 0.25))
    assert "changed by +0.260" in note and "went to answers pi_base never samples" in note


@pytest.mark.slow
def test_one_and_two_workers_give_the_same_claims(tmp_path, cache):
    # slow: spawned worker processes import torch and transformers
    st = replace(TINY, seeds=(0, 1), base_per_seed=True, coverage=True, coverage_tasks=((0.4, 10), (0.2, 20)),
                 coverage_draws=8, sweep_warm_start=True,
                 base=replace(TINY_BASE, stop_kl=1e-3, max_steps=20, eval_every=10, n_val=16, warmup_steps=5))
    par = reproduce(False, tmp_path / "par", settings=st, workers=2)
    m = json.loads((tmp_path / "par" / "metrics.json").read_text())
    assert m["runner"]["workers"] == 2 and m["runner"]["cpu_seconds_children"] > 0
    seq = reproduce(False, tmp_path / "seq", settings=st, workers=1)
    assert [(c.name, c.ours, c.baseline, c.holds) for c in par] == [(c.name, c.ours, c.baseline, c.holds) for c in seq]
