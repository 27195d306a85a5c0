"""Unit tests: shapes, vectorisation, bad input, K-group generality, simulator bookkeeping."""

import numpy as np
import pytest

from iclr25.ridge_bias import (
    GroupSpec,
    MixtureSpec,
    disparity_metrics,
    gradient_flow_risk_theory,
    group_risks,
    projected_mixture,
    projection_matrix,
    ridge_risk_theory,
    rp_risk_theory,
    sample_mixture,
    scenario,
    simulate_gradient_flow,
    simulate_ridge,
    simulate_rp,
    solve_fixed_point,
)
from iclr25.ridge_bias.simulate import group_counts

D = 20


def small(p=(0.7, 0.3), n=40):
    w = np.ones(D) / np.sqrt(D)
    return MixtureSpec((GroupSpec(np.ones(D), w, 0.1), GroupSpec(np.linspace(0.5, 2, D), -w, 0.2)), p, n)


# --- bad input -----------------------------------------------------------------------------------


def test_non_psd_covariance_rejected():
    with pytest.raises(ValueError, match="cov.*positive semi-definite"):
        GroupSpec(np.diag([1.0, -0.5]), np.ones(2))
    with pytest.raises(ValueError, match="spectrum must be >= 0"):
        GroupSpec(np.array([1.0, -0.5]), np.ones(2))
    with pytest.raises(ValueError, match="not symmetric"):
        GroupSpec(np.array([[1.0, 0.5], [0.0, 1.0]]), np.ones(2))


def test_mismatched_dimensions_rejected():
    with pytest.raises(ValueError, match="teacher.*d=3"):
        GroupSpec(np.ones(3), np.ones(2))
    g2, g3 = GroupSpec(np.ones(2), np.ones(2)), GroupSpec(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="same dimension"):
        MixtureSpec((g2, g3), (0.5, 0.5), 10)
    with pytest.raises(ValueError, match=r"S: expected shape \[m, 20\]"):
        projected_mixture(small(), np.ones((5, 7)))


def test_proportions_rejected():
    g = GroupSpec(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="proportions: must sum to 1"):
        MixtureSpec((g, g), (0.5, 0.6), 10)
    with pytest.raises(ValueError, match="proportions: 1 value"):
        MixtureSpec((g, g), (1.0,), 10)
    with pytest.raises(ValueError, match="proportions: each must be > 0"):
        MixtureSpec((g, g), (1.2, -0.2), 10)
    with pytest.raises(ValueError, match="MixtureSpec.n"):
        MixtureSpec((g, g), (0.5, 0.5), 0)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, [0.1, 0.0]])
def test_nonpositive_lambda_rejected(bad):
    with pytest.raises(ValueError, match="lam.*> 0"):
        ridge_risk_theory(small(), bad)
    with pytest.raises(ValueError, match="lam"):
        solve_fixed_point(small(), bad)


def test_other_bad_input():
    with pytest.raises(ValueError, match="noise_var"):
        GroupSpec(np.ones(2), np.ones(2), -1.0)
    with pytest.raises(ValueError, match=r"t=.*> 0"):
        gradient_flow_risk_theory(small(), 0.0)
    with pytest.raises(ValueError, match="two-group"):
        disparity_metrics(small().separate(0), 0.1)
    with pytest.raises(ValueError, match="needs the number of random features"):
        disparity_metrics(small(), 0.1, model="rp")
    with pytest.raises(ValueError, match="add="):
        disparity_metrics(small(), 0.1, add="log")
    with pytest.raises(ValueError, match="seeds"):
        simulate_ridge(small(), 0.1, 0)
    with pytest.raises(ValueError, match="m: the number of random features"):
        projection_matrix(0, 5)


# --- theory ----------------------------------------------------------------------------------------


def test_shapes_and_scalar_lambda():
    mix = small()
    r = ridge_risk_theory(mix, np.logspace(-3, 1, 7))
    assert r.risk.shape == r.bias.shape == r.var.shape == (7, 2)
    assert r.ddelta.shape == (7, 2, 2)
    assert solve_fixed_point(mix, 0.1).shape == (2,)
    assert solve_fixed_point(mix, [0.1, 1.0]).shape == (2, 2)
    np.testing.assert_allclose(r.risk, r.bias + r.var)
    np.testing.assert_allclose(r["noisy_risk"], r.risk + np.array([0.1, 0.2]))
    assert set(r.to_dict()) == set(r.keys())
    one = ridge_risk_theory(mix, 0.1)  # scalar lam: the grid axis is dropped
    assert one.risk.shape == (2,) and one.ddelta.shape == (2, 2)
    np.testing.assert_allclose(one.risk, ridge_risk_theory(mix, [0.1]).risk[0])
    assert disparity_metrics(mix, 0.1)["R_joint"].shape == (2,)
    assert rp_risk_theory(mix, 0.1, m=10).risk.shape == (2,)
    assert gradient_flow_risk_theory(mix, 10.0).risk.shape == (2,)


def test_grid_equals_pointwise():
    mix = small()
    lam = np.logspace(-4, 1, 6)
    grid = ridge_risk_theory(mix, lam).risk
    point = np.vstack([ridge_risk_theory(mix, float(l)).risk for l in lam])
    np.testing.assert_allclose(grid, point, rtol=1e-12)


def test_general_path_chunks_the_grid(monkeypatch):
    from iclr25.ridge_bias import theory as T

    rng = np.random.default_rng(0)
    A = rng.standard_normal((D, D))
    w = np.ones(D) / np.sqrt(D)
    mix = MixtureSpec((GroupSpec(np.eye(D), w, 0.1), GroupSpec(A @ A.T / D, -w, 0.2)), (0.6, 0.4), 50)
    lam = np.logspace(-3, 1, 7)
    whole = ridge_risk_theory(mix, lam)
    monkeypatch.setattr(T, "_FULL_CHUNK_ELEMS", 3 * 2 * D * D)  # 3 grid points per chunk
    chunked = ridge_risk_theory(mix, lam)
    np.testing.assert_allclose(chunked.risk, whole.risk, rtol=1e-12)
    np.testing.assert_allclose(chunked.ddelta, whole.ddelta, rtol=1e-12)


def test_fixed_point_solves_its_equation():
    mix = small()
    lam = np.array([1e-8, 1e-3, 10.0])
    delta = solve_fixed_point(mix, lam)
    S = np.stack([g.cov for g in mix.groups])
    p = np.array(mix.proportions)
    Q = 1.0 / ((p / (1 + delta)) @ S + lam[:, None])
    np.testing.assert_allclose(delta, Q @ S.T / mix.n, rtol=1e-10)


def test_near_interpolation_tiny_lambda_converges():
    w = np.ones(D) / np.sqrt(D)
    mix = MixtureSpec((GroupSpec(np.ones(D), w, 0.1),), (1.0,), D)  # d = n
    r = ridge_risk_theory(mix, [1e-8, 1e-6]).risk[:, 0]
    assert np.all(np.isfinite(r)) and r[0] > r[1] > 1.0  # the interpolation peak


def test_three_identical_groups_equal_one():
    g = GroupSpec(np.linspace(0.5, 1.5, D), np.ones(D) / np.sqrt(D), 0.3)
    three = ridge_risk_theory(MixtureSpec((g, g, g), (0.2, 0.3, 0.5), 50), 0.2).risk
    one = ridge_risk_theory(MixtureSpec((g,), (1.0,), 50), 0.2).risk[0]
    np.testing.assert_allclose(three, one, rtol=1e-12)


def test_add_undefined_for_identical_groups():
    g = GroupSpec(np.ones(D), np.ones(D) / np.sqrt(D), 0.1)
    met = disparity_metrics(MixtureSpec((g, g), (0.5, 0.5), 40), [0.01, 1.0])
    assert np.all(np.isnan(met["ADD"])) and np.allclose(met["ODD"], 0)


def test_disparity_options():
    mix = small()
    base = disparity_metrics(mix, [0.01, 1.0])
    np.testing.assert_allclose(base["ADD"], base["ODD"] / base["EDD"])
    diff = disparity_metrics(mix, [0.01, 1.0], add="difference")
    np.testing.assert_allclose(diff["ADD"], base["ODD"] - base["EDD"])
    noisy = disparity_metrics(mix, [0.01, 1.0], risk="noisy")
    np.testing.assert_allclose(noisy["R_joint"], base["R_joint"] + [0.1, 0.2])
    full = disparity_metrics(mix, [0.01, 1.0], edd_samples="full")
    assert np.all(full["R_sep"] < base["R_sep"])  # more samples, lower risk
    gf = disparity_metrics(mix, [0.01, 1.0], model="gradient_flow")
    np.testing.assert_allclose(gf["ODD"], base["ODD"])
    rp = disparity_metrics(mix, [0.01, 1.0], model="rp", m=30)
    assert rp["ODD"].shape == (2,)


def test_rp_draws_average():
    mix = small()
    one = [rp_risk_theory(mix, [0.1, 1.0], m=15, seed=s).risk for s in (4, 5, 6)]
    avg = rp_risk_theory(mix, [0.1, 1.0], m=15, seed=4, draws=3).risk
    np.testing.assert_allclose(avg, np.mean(one, axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match="draws"):
        rp_risk_theory(mix, 0.1, m=15, draws=0)


def test_rp_rho_nonnegative_and_exact_when_full_rank():
    mix = small()
    _, rho = projected_mixture(mix, projection_matrix(10, D, 0))
    assert np.all(rho > 0)  # m < d: part of the teacher is unreachable
    _, rho = projected_mixture(mix, projection_matrix(40, D, 0))
    np.testing.assert_allclose(rho, 0.0, atol=1e-10)
    r = rp_risk_theory(mix, [0.1], m=10, seed=0)
    assert np.all(r.risk >= r.bias - 1e-12)


# --- simulator -------------------------------------------------------------------------------------


def test_sample_and_counts():
    mix = small(p=(0.75, 0.25), n=41)
    counts = group_counts(mix)
    assert counts.sum() == 41 and counts[0] == 31
    X, y, g = sample_mixture(mix, np.random.default_rng(0))
    assert X.shape == (41, D) and y.shape == (41,) and np.bincount(g).tolist() == counts.tolist()
    assert group_risks(mix, np.zeros((3, D))).shape == (3, 2)


def test_simulators_keys_and_reproducibility():
    mix = small()
    a = simulate_ridge(mix, [0.1, 1.0], 3, seed=4)
    b = simulate_ridge(mix, [0.1, 1.0], 3, seed=4)
    np.testing.assert_array_equal(a["risk"], b["risk"])
    assert a["risk"].shape == (3, 2, 2) and a["ODD_mean"].shape == (2,)
    assert not np.isnan(a["sep_mean"]).any()
    rp = simulate_rp(mix, 0.1, 15, 2, separate=False)
    assert rp["risk_mean"].shape == (1, 2) and np.isnan(rp["sep_mean"]).all()
    gf = simulate_gradient_flow(mix, [1.0, 100.0], 2)
    assert gf["risk_mean"].shape == (2, 2)


def test_scenarios_build():
    for name in ("s1", "s2", "s3", "A", "B", "C"):
        mix = scenario(name, d=10)
        assert mix.d == 10 and mix.K == 2
    assert scenario("s2", d=10, p2=0.4).proportions == (0.6, 0.4)
    with pytest.raises(ValueError, match="unknown name"):
        scenario("s9")


def test_spearman_matches_scipy():
    from scipy.stats import spearmanr

    from iclr25.ridge_bias.digits import _spearman

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(9), rng.standard_normal(9)
    assert _spearman(a, b) == pytest.approx(spearmanr(a, b).statistic, abs=1e-12)


def test_digits_gap_statistics_are_paired_standard_errors():
    from iclr25.ridge_bias.digits import digits_experiment

    lam = np.array([1e-2, 1.0])
    res = digits_experiment(lam, (0.5,), n_train=300, splits=8, seed=1)
    assert res["gap_sem"].shape == (1, 2) and np.all(res["gap_sem"] > 0)
    assert res["n_resolved"] + res["n_unresolved"] == 2
    np.testing.assert_array_equal(res["resolved"], np.abs(res["gap_empirical"]) >= 2 * res["gap_sem"])
    np.testing.assert_allclose(res["gap_empirical"], res["empirical"][..., 1] - res["empirical"][..., 0], atol=1e-12)
    with pytest.raises(ValueError, match="at least 2 random splits"):
        digits_experiment(lam, (0.5,), n_train=300, splits=1)


# --- extreme lam (trial s52) ---------------------------------------------------------------------


def test_huge_lam_gives_the_null_predictor_risk_not_nan():
    """lam -> inf: the predictor tends to 0, so the excess risk tends to w_s^T Sigma_s w_s. At lam = 1e300 the
    lam**2 factor of the bias overflowed and the risk was a silent NaN (trial s52)."""
    mix = small()
    null = [float(g.teacher @ (g.cov * g.teacher)) for g in mix.groups]
    with np.errstate(over="raise", invalid="raise"):
        for lam in (1e12, 1e150, 1e300):
            res = ridge_risk_theory(mix, lam)
            assert np.all(np.isfinite(res.risk)), lam
            assert res.risk == pytest.approx(null, rel=1e-6)
    full = MixtureSpec(tuple(GroupSpec(np.diag(g.cov), g.teacher, g.noise_var) for g in mix.groups),
                       mix.proportions, mix.n)
    assert ridge_risk_theory(full, 1e300).risk == pytest.approx(null, rel=1e-6)  # the general-covariance path


def test_lam_too_small_to_solve_is_a_value_error_without_warnings():
    """At lam = 1e-300 the Newton solve cannot converge: one ValueError naming lam, not a flood of
    RuntimeWarnings followed by a RuntimeError (a traceback with exit 1 in the CLI)."""
    import warnings

    mix = small(n=D)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"lam"):
            ridge_risk_theory(mix, [0.1, 1e-300])
