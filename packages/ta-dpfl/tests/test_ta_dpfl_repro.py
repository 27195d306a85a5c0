"""reproduce(): claim names and verdicts computed from numbers; a tiny end-to-end run is `slow`."""

import pytest

from iclr25.ta_dpfl.reproduce import claims_from_results


def _res(method, seed, acc, setting="digits", spent=(1.0, 2.0), budget=(1.0, 2.0), planned=(1.0, 2.0),
         curve=(0.5, 0.6, 0.7, 0.8)):
    return {"setting": setting, "method": method, "seed": seed, "final_accuracy": acc, "epsilon_spent": list(spent),
            "epsilon_budget": list(budget), "epsilon_planned": list(planned), "transition_round": 2,
            "accuracy_per_round": [*curve[:-1], acc], "lr": 1.0}


def _set(d_ta=0.01):
    out = []
    for s in (0, 1):
        out += [_res("dpfedavg", s, 0.80, spent=(1.0, 1.0), planned=(1.0, 1.0)), _res("idp", s, 0.82),
                _res("ta", s, 0.82 + d_ta + 0.001 * s), _res("ta-reverse", s, 0.81)]
    return out


def test_claims_names_and_verdicts_from_numbers():
    cl = {c.name: c for c in claims_from_results(_set(), {"digits": {"dpfedavg": 1, "idp": 1, "ta": 2}})}
    assert set(cl) == {"accuracy/digits/idp_gt_dpfedavg", "accuracy/digits/ta_ge_idp",
                       "accuracy/digits/strict_save_most_ge_reversed", "mechanism/digits/late_gain_ta_gt_idp",
                       "privacy/no_overspend"}
    assert all(c.holds for c in cl.values())
    assert "gap exceeds the spread: yes" in cl["accuracy/digits/ta_ge_idp"].note
    cl = {c.name: c for c in claims_from_results(_set(d_ta=-0.015))}
    assert not cl["accuracy/digits/ta_ge_idp"].holds and not cl["accuracy/digits/strict_save_most_ge_reversed"].holds
    assert not cl["mechanism/digits/late_gain_ta_gt_idp"].holds


def test_overspend_and_underuse_fail_the_privacy_claim():
    base = _set()
    base[1]["epsilon_spent"] = [1.0 + 1e-6, 2.0]
    assert not {c.name: c for c in claims_from_results(base)}["privacy/no_overspend"].holds
    base[1]["epsilon_spent"] = [0.95, 2.0]  # 5% unspent although the schedule should spend it all
    assert not {c.name: c for c in claims_from_results(base)}["privacy/no_overspend"].holds


@pytest.mark.slow
def test_reproduce_smoke(tmp_path):
    from iclr25.ta_dpfl.reproduce import reproduce

    cl = reproduce(True, tmp_path, settings=("digits",), lr_grid=(1.0, 2.0), workers=1, perf=False)
    assert {c.name: c for c in cl}["privacy/no_overspend"].holds
    assert (tmp_path / "summary.json").exists()
