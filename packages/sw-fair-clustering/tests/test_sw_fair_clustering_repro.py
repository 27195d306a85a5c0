"""reproduce(): a tiny smoke run of the whole pipeline (claims, details, no NaN) and the real quick run (slow)."""

import json
import math

import pytest

import iclr25.sw_fair_clustering.reproduce as R
from iclr25.core.results import Claim

NAMES = ["cost/sw_coreset_near_offline", "cost/sw_coreset_lt_uniform", "mechanism/coreset_error_lt_uniform",
         "mechanism/color_weight_error_within_eps", "space/sublinear_in_window", "drift/sw_lt_insertion_only",
         "feasibility/coreset_lt_uniform_infeasible"]


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
            # ... and carry the paired seed sd of the gap, shown as "gap ± spread" in the report
            assert c.spread is not None and math.isfinite(c.spread) and c.spread >= 0, c.name
    det = json.loads((tmp_path / "details.json").read_text())  # strict JSON: no NaN
    assert det["solver_status"]["sw/fit"]
    assert (tmp_path / "queries.jsonl").read_text().count("\n") == 2 * 2 + 2 * 2
    with pytest.raises(ValueError, match="at least 2 seeds"):
        R.reproduce(True, tmp_path, seeds=(0,))
    # the cost and drift claims name the plot that shows them (the report puts it under them)
    pytest.importorskip("matplotlib")
    assert {c.name for c in claims if c.plot == "ratios.png"} == {
        "cost/sw_coreset_near_offline", "cost/sw_coreset_lt_uniform", "drift/sw_lt_insertion_only"}


@pytest.mark.slow
@pytest.mark.realdata
def test_reproduce_quick_full(tmp_path, adult_sex):
    claims = R.reproduce(True, tmp_path)
    assert [c.name for c in claims] == NAMES
    held = {c.name: c.holds for c in claims}
    assert held["space/sublinear_in_window"] and held["mechanism/color_weight_error_within_eps"]
