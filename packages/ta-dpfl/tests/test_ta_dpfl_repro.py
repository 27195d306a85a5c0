"""reproduce(): claim names and verdicts computed from numbers; a tiny end-to-end run is `slow`."""

import json

import pytest

from iclr25.ta_dpfl.reproduce import claims_from_results

RATES = {"idp": [[0.1] * 4, [0.2] * 4], "ta": [[0.05, 0.05, 0.13, 0.13], [0.1, 0.1, 0.26, 0.26]]}


def _res(method, seed, acc, setting="digits", spent=(1.0, 2.0), budget=(1.0, 2.0), planned=(1.0, 2.0),
         curve=(0.5, 0.6, 0.7, 0.8), lr=1.0):
    r = {"setting": setting, "method": method, "seed": seed, "final_accuracy": acc, "epsilon_spent": list(spent),
         "epsilon_budget": list(budget), "epsilon_planned": list(planned), "transition_round": 2,
         "accuracy_per_round": [*curve[:-1], acc], "lr": lr}
    if method in RATES:
        r["rates"] = RATES[method]
    return r


def _set(d_ta=0.01, d_order=0.02, sd_order=0.001):
    out = []
    for s in (0, 1):
        out += [_res("dpfedavg", s, 0.80, spent=(1.0, 1.0), planned=(1.0, 1.0)), _res("idp", s, 0.82),
                _res("ta", s, 0.82 + d_ta + 0.001 * s), _res("ta-reverse", s, 0.81),
                _res("ta-spend-first", s, 0.82 + d_ta - d_order + sd_order * (2 * s - 1))]
    return out


def test_claims_names_and_verdicts_from_numbers():
    cl = {c.name: c for c in claims_from_results(_set(), {"digits": {"dpfedavg": 1, "idp": 1, "ta": 2}})}
    assert set(cl) == {"accuracy/digits/idp_gt_dpfedavg", "accuracy/digits/ta_ge_idp",
                       "accuracy/digits/strict_save_most_ge_reversed", "mechanism/digits/save_first_gt_spend_first",
                       "mechanism/digits/ta_total_rate_ge_idp", "privacy/no_overspend"}
    assert all(c.holds for c in cl.values() if c.name != "mechanism/digits/ta_total_rate_ge_idp")
    assert "exceeds the seed spread" in cl["accuracy/digits/ta_ge_idp"].note
    order = cl["mechanism/digits/save_first_gt_spend_first"]
    assert order.ours - order.baseline == pytest.approx(0.0205)
    assert "save-first ahead in 2 of 2" in order.note and "max |eps_spent(save-first) - eps_spent(spend-first)|" \
        " over clients 0.00e+00" in order.note
    cl = {c.name: c for c in claims_from_results(_set(d_ta=-0.015, d_order=-0.01))}
    assert not cl["accuracy/digits/ta_ge_idp"].holds and not cl["accuracy/digits/strict_save_most_ge_reversed"].holds
    assert not cl["mechanism/digits/save_first_gt_spend_first"].holds
    assert "save-first ahead in 0 of 2" in cl["mechanism/digits/save_first_gt_spend_first"].note


def test_order_claim_says_when_its_gap_is_inside_the_spread():
    cl = {c.name: c for c in claims_from_results(_set(d_order=0.0003, sd_order=0.002))}
    c = cl["mechanism/digits/save_first_gt_spend_first"]
    assert c.holds and "INSIDE the seed spread" in c.note and "not evidence either way" in c.note


def test_total_rate_claim_is_the_sum_of_the_rates_run():
    """Σ_t q_t per client from the clients' rates (independent sum here), and the note's ratios."""
    c = {c.name: c for c in claims_from_results(_set())}["mechanism/digits/ta_total_rate_ge_idp"]
    assert c.ours == pytest.approx((0.36 + 0.72) / 2) and c.baseline == pytest.approx((0.4 + 0.8) / 2)
    assert not c.holds  # TA clients sample less in total than IDP's (0.9x here)
    assert "eps=1: q_spe/q_uni=1.30, sum_q TA/IDP=0.90" in c.note and "doubling q costs" in c.note
    # the cost of doubling q at the order that sets eps: between 2x (large orders, small q: ~q^2 regime ends)
    # and 4x (the q^2 regime); computed independently with Opacus' compute_rdp
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    from iclr25.ta_dpfl.accounting import DEFAULT_ORDERS

    orders = list(DEFAULT_ORDERS)
    r1 = compute_rdp(q=0.1, noise_multiplier=3.0, steps=40, orders=orders)
    _, a = get_privacy_spent(orders=orders, rdp=r1, delta=1e-5)
    i = orders.index(a)
    cost = compute_rdp(q=0.2, noise_multiplier=3.0, steps=40, orders=orders)[i] / r1[i]
    assert f"{cost:.2f}" in c.note


def test_overspend_and_underuse_fail_the_privacy_claim():
    base = _set()
    base[1]["epsilon_spent"] = [1.0 + 1e-6, 2.0]
    assert not {c.name: c for c in claims_from_results(base)}["privacy/no_overspend"].holds
    base[1]["epsilon_spent"] = [0.95, 2.0]  # 5% unspent although the schedule should spend it all
    assert not {c.name: c for c in claims_from_results(base)}["privacy/no_overspend"].holds


@pytest.mark.slow
def test_reproduce_smoke(tmp_path):
    from iclr25.ta_dpfl.reproduce import MAX_EXTEND, reproduce

    cl = reproduce(True, tmp_path, settings=("digits",), lr_grid=(1.0, 2.0), workers=1, perf=False)
    assert {c.name: c for c in cl}["privacy/no_overspend"].holds
    summ = json.loads((tmp_path / "summary.json").read_text())
    grid, chosen = summ["lr_grid_final"]["digits"], summ["lr_chosen"]["digits"]
    assert set(chosen.values()) <= set(grid) and {1.0, 2.0} <= set(grid)
    # the grid was extended while some method's best sat on its edge: none does now, or the cap was hit
    assert all(grid[0] < v < grid[-1] for v in chosen.values()) or len(grid) == 2 + 2 * MAX_EXTEND


def test_step_grid_is_extended_for_all_methods_while_a_best_value_sits_on_an_edge(monkeypatch, tmp_path):
    """tune_step_sizes: validation accuracy peaks at lr=8 for one method only; every method gets 8 and 16."""
    from iclr25.ta_dpfl import tuning as rp

    ran = []

    def fake(specs):
        ran.extend((s.method, s.lr) for s in specs)
        return [{"method": s.method, "lr": s.lr, "final_val_accuracy": -abs(s.lr - (8.0 if s.method == "ta" else 2.0)),
                 "setting": "digits"} for s in specs]

    tuned, grid = rp.tune_step_sizes(tmp_path, "digits", (0,), (1.0, 2.0, 4.0), run=fake)
    assert grid == [1.0, 2.0, 4.0, 8.0, 16.0]
    for m in rp.TUNED:
        assert sorted(lr for mm, lr in ran if mm == m) == grid
    best = {m: rp.best_run([r for r in tuned if r["method"] == m])["lr"] for m in rp.TUNED}
    assert best == {"dpfedavg": 2.0, "idp": 2.0, "ta": 8.0, "ta-reverse": 2.0, "ta-spend-first": 2.0}
    assert set(rp.TUNED) == set(rp.METHODS)  # ta-reverse and ta-spend-first are tuned like the others
    # an edge that stays best is extended at most MAX_EXTEND times
    _, grid = rp.tune_step_sizes(tmp_path, "digits", (0,), (1.0, 2.0), run=lambda specs: [
        {"method": s.method, "lr": s.lr, "setting": "digits", "final_val_accuracy": s.lr} for s in specs])
    assert grid == [1.0, 2.0, 4.0, 8.0, 16.0]
