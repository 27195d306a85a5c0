"""reproduce(): claim names and computed verdicts; the Flower smoke run is `slow` (Ray start-up)."""

import pytest

from iclr25.ta_dpfl.reproduce import claims_from_results

NAMES = ["accuracy/idp_gt_dpfedavg", "accuracy/ta_ge_idp", "accuracy/strict_save_most_ge_reversed",
         "privacy/no_overspend"]


def _res(method, seed, acc, spent=(1.0, 2.0), budget=(1.0, 2.0), planned=(1.0, 2.0)):
    return {"method": method, "seed": seed, "final_accuracy": acc, "epsilon_spent": list(spent),
            "epsilon_budget": list(budget), "epsilon_planned": list(planned), "rounds": 3, "lr": 2.0}


def test_claims_names_and_verdicts_from_numbers():
    res = [_res("dpfedavg", 0, 0.80, spent=(1.0, 1.0), planned=(1.0, 1.0)), _res("idp", 0, 0.82),
           _res("ta", 0, 0.83), _res("ta-reverse", 0, 0.81)]
    cl = claims_from_results(res, quick=True)
    assert [c.name for c in cl] == NAMES
    assert all(c.holds for c in cl)
    res[2]["final_accuracy"] = 0.805  # TA below IDP and below reversed
    cl = {c.name: c for c in claims_from_results(res, quick=True)}
    assert not cl["accuracy/ta_ge_idp"].holds and not cl["accuracy/strict_save_most_ge_reversed"].holds


def test_overspend_and_underuse_fail_the_privacy_claim():
    base = [_res("dpfedavg", 0, 0.8), _res("idp", 0, 0.8), _res("ta", 0, 0.8), _res("ta-reverse", 0, 0.8)]
    base[1]["epsilon_spent"] = [1.0 + 1e-6, 2.0]
    assert not {c.name: c for c in claims_from_results(base, True)}["privacy/no_overspend"].holds
    base[1]["epsilon_spent"] = [0.95, 2.0]  # 5% unspent although the schedule should spend it all
    assert not {c.name: c for c in claims_from_results(base, True)}["privacy/no_overspend"].holds


def test_full_mode_counts_paired_seeds():
    res = []
    for s, d in enumerate([0.01, 0.02, -0.01, 0.01, 0.03]):
        res += [_res("dpfedavg", s, 0.8), _res("idp", s, 0.82), _res("ta", s, 0.82 + d), _res("ta-reverse", s, 0.8)]
    c = {c.name: c for c in claims_from_results(res, quick=False)}["accuracy/ta_ge_idp"]
    assert c.ours == 4 and c.holds


@pytest.mark.slow
def test_reproduce_smoke_with_flower(tmp_path):
    from iclr25.ta_dpfl.reproduce import reproduce

    cl = reproduce(True, tmp_path, rounds=2, dataset="digits", num_clients=3, perf=False, min_expected_batch=1.0)
    assert [c.name for c in cl] == NAMES
    assert {c.name: c for c in cl}["privacy/no_overspend"].holds
    assert (tmp_path / "summary.json").exists()
