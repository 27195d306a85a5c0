"""Known-answer tests: the spec's values, each against an independent computation."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit, logit

from iclr25.pref_sensitivity import (
    bt_predict,
    bt_sensitivity,
    fit_bt_counts,
    max_sensitivity,
    pl_log_prob,
    pl_tuple_predict,
    pl_tuple_sensitivity,
    sensitive_region_area,
)

KAT = json.loads((Path(__file__).parent / "data" / "kat_values.json").read_text())


def test_transitivity_identity_random_scores():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(1000, 3))
    a, b = expit(s[:, 0] - s[:, 1]), expit(s[:, 1] - s[:, 2])
    np.testing.assert_allclose(bt_predict(a, b), expit(s[:, 0] - s[:, 2]), rtol=0, atol=1e-12)
    # the algebraic form ab / (ab + (1-a)(1-b)) of Result 1
    np.testing.assert_allclose(bt_predict(a, b), a * b / (a * b + (1 - a) * (1 - b)), rtol=0, atol=1e-10)


@pytest.mark.parametrize("row", KAT["point_values"], ids=lambda r: f"{r['a']},{r['b']}")
def test_point_values(row):
    p = bt_predict(row["a"], row["b"])
    da, db = bt_sensitivity(row["a"], row["b"])
    assert p == pytest.approx(row["p_ij"], abs=row["tol"])
    assert da == pytest.approx(row["d_a"], rel=row["tol"], abs=row["tol"])
    assert db == pytest.approx(row["d_b"], rel=row["tol"], abs=row["tol"])


def test_partials_match_central_differences():
    # independent of the closed form: differentiate g numerically (float64, h = 1e-6)
    g = np.array([0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99])
    A, B = np.meshgrid(g, g, indexing="ij")
    h = 1e-7

    def f(a, b):
        return a * b / (a * b + (1 - a) * (1 - b))

    da, db = bt_sensitivity(A, B)
    np.testing.assert_allclose(da, (f(A + h, B) - f(A - h, B)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(db, (f(A, B + h) - f(A, B - h)) / (2 * h), rtol=1e-6)


@pytest.mark.parametrize("a, expected", [(0.5, 1.0), (0.2, 1.5625), (0.1, 2.777778), (0.01, 25.252525)])
def test_max_over_b(a, expected):
    val, arg = max_sensitivity(a)
    assert val == pytest.approx(expected, rel=1e-6)
    assert arg == pytest.approx(1 - a)
    # brute force over a fine b grid: the maximum is at b = 1 - a and equals the value
    b = np.linspace(1e-4, 1 - 1e-4, 200_001)
    da, _ = bt_sensitivity(a, b)
    assert da.max() == pytest.approx(val, rel=1e-6)
    assert b[np.argmax(da)] == pytest.approx(1 - a, abs=1e-4)


def test_monotone_and_blow_up_conditions():
    u = np.linspace(0.001, 0.999, 300)
    A, B = np.meshgrid(u, u)
    da, db = bt_sensitivity(A, B)
    assert (da > 0).all() and (db > 0).all()
    # pivot dominant over both (a -> 0, b -> 1): diverges like 1/(4 eps)
    for eps in (1e-2, 1e-3, 1e-4):
        assert bt_sensitivity(eps, 1 - eps)[0] == pytest.approx(1 / (4 * eps * (1 - eps)), rel=1e-9)
    # only one dominant: a -> 0 with b fixed gives b / (1 - b)
    assert bt_sensitivity(1e-9, 0.3)[0] == pytest.approx(0.3 / 0.7, rel=1e-6)
    # both dominant in the same direction: -> 0
    assert bt_sensitivity(1 - 1e-6, 1 - 1e-6)[0] < 1e-5


def test_amplification_region_equivalence():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.001, 0.999, (2, 20000))
    da, _ = bt_sensitivity(a, b)
    la, lb = logit(a), logit(b)
    cond = (np.sign(la) != np.sign(lb)) & (np.abs(lb) < 2 * np.abs(la))
    assert np.array_equal(da > 1, cond)


@pytest.mark.parametrize("lam", ["1", "2", "5", "10"])
def test_region_area_known_values(lam):
    expected = KAT["region_area"][lam]
    assert sensitive_region_area(float(lam)) == pytest.approx(expected, abs=1e-4 if lam != "1" else 1e-9)


def test_region_area_quad_vs_grid():
    assert sensitive_region_area(1.0) == pytest.approx(math.log(2) / 2, abs=1e-10)
    assert sensitive_region_area(1.0, "grid", grid_n=4000) == pytest.approx(math.log(2) / 2, abs=1e-5)
    assert sensitive_region_area(5.0, "grid", grid_n=2000) == pytest.approx(sensitive_region_area(5.0), abs=5e-5)


def test_region_area_either_partial():
    # by symmetry each partial's region has area A; the union is between A and 2A
    for lam in (2.0, 10.0):
        a = sensitive_region_area(lam)
        e = sensitive_region_area(lam, "grid", grid_n=1000, which="either")
        assert a < e < 2 * a
    with pytest.raises(ValueError, match="grid"):
        sensitive_region_area(2.0, which="either")


def _all_rankings_prob(s):
    n = s.size
    perms = np.array(list(itertools.permutations(range(n))))
    return perms, np.exp(pl_log_prob(s, perms))


def test_pl_pairwise_marginal_is_bt_by_enumeration():
    rng = np.random.default_rng(2)
    s = rng.normal(scale=1.5, size=4)
    perms, pr = _all_rankings_prob(s)
    assert pr.sum() == pytest.approx(1.0, abs=1e-12)
    pos = np.argsort(perms, axis=1)  # pos[r, item] = rank position
    for i, j in itertools.permutations(range(4), 2):
        p_above = pr[pos[:, i] < pos[:, j]].sum()
        assert p_above == pytest.approx(expit(s[i] - s[j]), abs=1e-12)


def test_pl_two_items_is_bt():
    s = np.array([0.3, -1.2])
    assert np.exp(pl_log_prob(s, [0, 1])) == pytest.approx(expit(1.5), abs=1e-14)
    # top-1 stage of a K-tuple: w_i / sum w
    s3 = np.array([0.5, 0.0, -0.5])
    assert np.exp(pl_log_prob(s3, [[2, 0, 1]], n_stages=1))[0] == pytest.approx(
        np.exp(-0.5) / np.exp(s3).sum(), abs=1e-14)


def test_pl_tuple_closed_form_by_construction():
    # K-tuple with a shared context: p_ij from the two top-1 probabilities equals sigmoid(s_i - s_j)
    rng = np.random.default_rng(3)
    for k in (2, 3, 5):
        s = rng.normal(size=k + 1)  # items i=0, j=1, context = 2..k
        lw = np.log(np.exp(s[2:]).sum())
        qa, qb = expit(s[0] - lw), expit(s[1] - lw)
        assert pl_tuple_predict(qa, qb) == pytest.approx(expit(s[0] - s[1]), abs=1e-12)
        # finite differences of p_ij = g(q_a, 1 - q_b)
        h = 1e-7
        d = (pl_tuple_predict(qa + h, qb) - pl_tuple_predict(qa - h, qb)) / (2 * h)
        e = (pl_tuple_predict(qa, qb + h) - pl_tuple_predict(qa, qb - h)) / (2 * h)
        x, y = pl_tuple_sensitivity(qa, qb)
        assert x == pytest.approx(d, rel=1e-6) and y == pytest.approx(e, rel=1e-6)


def test_bt_mle_tree_design_reproduces_proportions():
    W = np.zeros((3, 3))
    W[0, 1], W[1, 0], W[1, 2], W[2, 1] = 981, 19, 7, 993
    s = fit_bt_counts(W)
    assert expit(s[0] - s[1]) == pytest.approx(0.981, abs=1e-8)
    assert expit(s[1] - s[2]) == pytest.approx(0.007, abs=1e-8)
    assert expit(s[0] - s[2]) == pytest.approx(float(bt_predict(0.981, 0.007)), abs=1e-8)
    assert s.sum() == pytest.approx(0.0, abs=1e-12)


def test_tabular_dpo_counts_known_answer():
    pytest.importorskip("torch")
    from iclr25.pref_sensitivity import dpo_tabular

    W = np.zeros((3, 3))
    W[0, 1], W[1, 0], W[1, 2], W[2, 1] = 980, 20, 20, 980
    res = dpo_tabular(W, beta=0.1)
    assert res["converged"]
    assert res["implied"][0, 2] == pytest.approx(float(bt_predict(0.98, 0.02)), abs=1e-4)
    assert res["implied"][0, 2] == pytest.approx(0.5, abs=1e-4)


def test_sensitivity_matrix_bt_triangle_equals_result2():
    torch = pytest.importorskip("torch")
    from iclr25.pref_sensitivity import sensitivity_matrix

    s = torch.tensor([1.1, -0.4, 0.9], dtype=torch.float64)
    M = sensitivity_matrix(s, lambda x: torch.sigmoid(x[0] - x[2]),
                           lambda x: torch.stack([torch.sigmoid(x[0] - x[1]), torch.sigmoid(x[1] - x[2])]))
    da, db = bt_sensitivity(expit(1.5), expit(-1.3))
    assert M.shape == (1, 2)
    assert float(M[0, 0]) == pytest.approx(float(da), abs=1e-12)
    assert float(M[0, 1]) == pytest.approx(float(db), abs=1e-12)


def test_closed_form_matches_autograd_grid():
    pytest.importorskip("torch")
    from iclr25.pref_sensitivity import check_closed_form

    assert check_closed_form() < 1e-10


def test_result3_table():
    t = KAT["result3_table"]
    np.testing.assert_allclose(bt_predict(t["p12"], t["p23"]), t["p13"], atol=6e-5)


def test_sensitivity_matrix_rejects_unidentified_scores():
    torch = pytest.importorskip("torch")
    from iclr25.pref_sensitivity import sensitivity_matrix

    s = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="identify only 1"):
        sensitivity_matrix(s, lambda x: torch.sigmoid(x[0] - x[2]), lambda x: torch.sigmoid(x[0] - x[1]).unsqueeze(0))


def test_bt_sensitivity_autograd_flag_matches_closed_form():
    pytest.importorskip("torch")
    g = np.array([[0.001, 0.3], [0.7, 0.999]])
    ca, cb = bt_sensitivity(g, g.T)
    aa, ab = bt_sensitivity(g, g.T, autograd=True)
    assert aa.shape == (2, 2)
    np.testing.assert_allclose(aa, ca, rtol=1e-10)
    np.testing.assert_allclose(ab, cb, rtol=1e-10)


def test_mle_sd_equals_delta_method_of_the_closed_form_sensitivity():
    """The seed-to-seed sd of the BT MLE's held-out p13 equals the delta-method sd built from the
    Result-2 partials and the binomial noise of the two trained proportions (N = 10000, 400 seeds;
    an sd estimate from 400 draws has ~3.5% relative error)."""
    from iclr25.pref_sensitivity.experiments import bt_mle_experiment

    n, p12, p23 = 10000, 0.99, 0.05
    rows = bt_mle_experiment(p12, (p23,), (n,), 400, seed=7)
    sd = float(np.std([r["p13_mle"] for r in rows], ddof=1))
    d12, d23 = bt_sensitivity(p12, p23)
    pred = math.sqrt(float(d12) ** 2 * p12 * (1 - p12) / n + float(d23) ** 2 * p23 * (1 - p23) / n)
    assert sd == pytest.approx(pred, rel=0.12)
    # and the fitted score gaps are the trained edges' logits (Result 1)
    for r in rows:
        assert r["score_gap_12"] == pytest.approx(logit(r["p12_hat"]), abs=1e-6)
        assert r["score_gap_23"] == pytest.approx(logit(r["p23_hat"]), abs=1e-6)
