"""reproduce(): a tiny smoke run of the whole pipeline (claims, details, no NaN) and the real quick run (slow)."""

import json
import math

import pytest

import iclr25.sw_fair_clustering.reproduce as R
from iclr25.core.results import Claim

NAMES = ["cost/sw_coreset_near_offline", "cost/sw_coreset_lt_uniform", "cost/sw_coreset_lt_stratified_uniform",
         "mechanism/coreset_error_lt_uniform", "mechanism/coreset_color_weight_error_within_eps",
         "space/sublinear_in_window", "drift/sw_lt_insertion_only", "feasibility/coreset_lt_uniform_infeasible",
         "feasibility/coreset_le_stratified_uniform_infeasible"]


@pytest.mark.realdata
def test_reproduce_smoke(tmp_path, monkeypatch, adult_sex):
    tiny = dict(configs=[("adult", "sex", 400)], ks=(3,), sizes=(40,), seeds=(0, 1), n_queries=2, n_center_sets=2,
                space=("adult", "sex", 200), drift=dict(n=1600, window=400), uniform_feasibility_draws=3)
    monkeypatch.setattr(R, "settings", lambda quick: tiny)
    claims = R.reproduce(True, tmp_path)
    assert [c.name for c in claims] == NAMES
    assert all(isinstance(c, Claim) and math.isfinite(c.ours) for c in claims)
    for c in claims:  # margin claims state mean ± sd per arm and whether the gap exceeds the spread
        if c.baseline is not None:
            assert "±" in c.note and "larger sd" in c.note
    for c in claims:  # the claim record is filled: kind, where in the paper, seed spread, the plot
        assert c.kind in ("headline", "mechanism") and c.paper_ref and c.n_seeds == 2
        assert c.spread is not None and c.spread >= 0
    assert {c.plot for c in claims} == {"cost_ratios.png", ""}
    assert (tmp_path / "cost_ratios.png").stat().st_size > 1000
    det = json.loads((tmp_path / "details.json").read_text())  # strict JSON: no NaN
    assert det["solver_status"]["sw/fit"] and det["solver_status"]["stratified/fit"]
    rows = [json.loads(line) for line in (tmp_path / "queries.jsonl").read_text().splitlines()]
    # the recalibrated colour weights are exact by construction (a test, not a claim)
    assert max(r["arms"]["sw"]["color_error"] for r in rows if "sw" in r["arms"]) < 1e-9
    assert (tmp_path / "queries.jsonl").read_text().count("\n") == 2 * 2 + 2 * 2
    with pytest.raises(ValueError, match="at least 2 seeds"):
        R.reproduce(True, tmp_path, seeds=(0,))


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick_full(tmp_path, adult_sex):
    claims = R.reproduce(True, tmp_path)
    assert [c.name for c in claims] == NAMES
    held = {c.name: c.holds for c in claims}
    assert held["space/sublinear_in_window"]


def test_stratified_uniform_sample_keeps_colour_totals_and_is_random():
    import numpy as np

    from iclr25.sw_fair_clustering import WeightedSet
    from iclr25.sw_fair_clustering.coreset import stratified_uniform_sample, uniform_sample

    rng = np.random.default_rng(0)
    colors = np.r_[np.zeros(70, int), np.ones(25, int), np.full(5, 2)]
    S = WeightedSet.from_arrays(rng.normal(size=(100, 2)), colors, n_colors=3)
    for seed in range(20):
        U = stratified_uniform_sample(S, 17, seed=seed)
        assert len(U) == 17 and np.allclose(U.color_weights(), [70, 25, 5])
        assert len(np.unique(U.timestamps)) == 17
    # an unstratified sample of the same size misses the colour totals (the point of the baseline)
    errs = [np.abs(uniform_sample(S, 17, seed=s).color_weights() - [70, 25, 5]).max() for s in range(20)]
    assert max(errs) > 1
    picks = {tuple(stratified_uniform_sample(S, 17, seed=s).timestamps) for s in range(20)}
    assert len(picks) > 15
    import pytest as _pt
    with _pt.raises(ValueError, match="colours present"):
        stratified_uniform_sample(S, 2, seed=0)
