"""Known-answer tests (spec list 1-9): closed forms, exact enumeration, independent numpy computations."""

import math

import numpy as np
import pytest

from iclr25.sw_fair_clustering import (
    FairnessSpec,
    MeyersonSketch,
    OnlineCoreset,
    SlidingWindowCoreset,
    WeightedSet,
    exact_fair_feasible,
    fair_assignment_lp,
    fair_kclustering,
    fairlet_tree_solver,
    online_sample,
)
from iclr25.sw_fair_clustering.lp import dist_z

LINE = np.array([[0.0], [1.0], [10.0], [11.0]])
CENTRES = np.array([[0.5], [10.5]])
BALANCED = FairnessSpec.exact([0.5, 0.5])


# 1 ------------------------------------------------------------------------------------------ fair LP toy
def test_fair_lp_toy_on_the_line():
    rrbb = WeightedSet.from_arrays(LINE, [0, 0, 1, 1], n_colors=2)
    rbrb = WeightedSet.from_arrays(LINE, [0, 1, 0, 1], n_colors=2)
    r = fair_assignment_lp(rrbb, CENTRES, BALANCED, z=1)
    assert r.status == "optimal" and r.cost == pytest.approx(20.0, abs=1e-9)
    # each cluster must hold one R and one B: e.g. {0, 10} -> 0.5 + 9.5, {1, 11} -> 0.5 + 9.5 ... = 20
    assert np.allclose(r.plan.sum(1), 1.0)
    assert fair_assignment_lp(rrbb, CENTRES, None, z=1).cost == pytest.approx(2.0, abs=1e-12)
    assert fair_assignment_lp(rrbb, CENTRES, FairnessSpec.unconstrained(2), z=1).cost == pytest.approx(2.0, abs=1e-9)
    assert fair_assignment_lp(rbrb, CENTRES, BALANCED, z=1).cost == pytest.approx(2.0, abs=1e-9)


def test_fair_lp_matches_enumeration_of_integral_assignments():
    """On 6 points / 2 centres the LP optimum with exact 1:1 balance equals the best of all 2^6 integral
    fair assignments (the fairness polytope here has integral vertices at the optimum)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 2))
    col = np.array([0, 0, 0, 1, 1, 1])
    C = rng.normal(size=(2, 2))
    S = WeightedSet.from_arrays(X, col, n_colors=2)
    D = dist_z(X, C, 1)
    best = math.inf
    for mask in range(2 ** 6):
        lab = np.array([(mask >> i) & 1 for i in range(6)])
        ok = all((col[lab == i] == 0).sum() == (col[lab == i] == 1).sum() for i in (0, 1))
        if ok:
            best = min(best, D[np.arange(6), lab].sum())
    r = fair_assignment_lp(S, C, BALANCED, z=1)
    assert r.cost <= best + 1e-9
    assert r.cost == pytest.approx(best, rel=1e-9)


# 2 --------------------------------------------------------------------------------- exact feasibility flips
def test_exact_fair_feasible_flips_with_one_expiry():
    stream = [0, 1, 0, 1, 1, 0, 0]  # R, B, R, B, B, R, R
    got = [exact_fair_feasible(stream[t - 4:t], BALANCED) for t in range(4, 8)]
    assert got == [True, False, True, True]
    # independent check: HiGHS's status on the same windows
    for t, want in zip(range(4, 8), got):
        S = WeightedSet.from_arrays(np.zeros((4, 1)), stream[t - 4:t], n_colors=2)
        assert (fair_assignment_lp(S, np.zeros((1, 1)), BALANCED, 1).status == "optimal") == want


# 3 ------------------------------------------------------------------------------------------ identity coreset
def test_identity_coreset_equals_window_and_offline_costs():
    rng = np.random.default_rng(0)
    n, W = 700, 200
    X = rng.normal(size=(n, 3))
    col = (rng.random(n) < 0.4).astype(int)
    sw = SlidingWindowCoreset(W, 3, 1, 0.1, n_colors=2, coreset_size=None, block_size=50, seed=0)
    spec_c = [rng.normal(size=(3, 3)) for _ in range(3)]
    for t in (250, 333, 700):
        sw.insert_many(X[sw.t:t], col[sw.t:t])
        S = sw.query()
        o = np.argsort(S.timestamps)
        assert np.array_equal(S.timestamps[o], np.arange(t - W + 1, t + 1, dtype=float))
        assert np.array_equal(S.points[o], X[t - W:t]) and np.all(S.weights == 1.0)
        assert np.array_equal(S.colors[o], col[t - W:t])
        win = WeightedSet.from_arrays(X[t - W:t], col[t - W:t], n_colors=2)
        spec = FairnessSpec.proportional(win.colors, 0.2, n_colors=2)
        for C in spec_c:
            a, b = fair_assignment_lp(S, C, spec, 1), fair_assignment_lp(win, C, spec, 1)
            assert a.status == b.status == "optimal"
            assert a.cost == pytest.approx(b.cost, rel=1e-9)


# 4 ------------------------------------------------------------------------------------------ unbiasedness
def test_online_sampling_is_unbiased_per_colour_over_2000_seeds():
    rng = np.random.default_rng(1)
    n = 200
    X = np.concatenate([rng.normal(0, 1, (n // 2, 2)), rng.normal(6, 1, (n - n // 2, 2))])
    col = (rng.random(n) < 0.3).astype(int)
    true = np.bincount(col, minlength=2)
    tot = np.zeros(2)
    for seed in range(2000):
        oc = OnlineCoreset(3, 1, 0.1, n_colors=2, group_size=1.0, calibrate=False, seed=seed)
        oc.insert_many(X, col)
        tot += oc.summary().color_weights()
        assert len(oc) < n  # it does sample
    np.testing.assert_allclose(tot / 2000, true, rtol=0.01)


def test_bucket_sampler_ht_weights_are_unbiased():
    rng = np.random.default_rng(2)
    n = 200
    X = rng.normal(size=(n, 2))
    col = (rng.random(n) < 0.5).astype(int)
    S = WeightedSet.from_arrays(X, col, n_colors=2)
    tot = np.zeros(2)
    for seed in range(2000):
        g = online_sample(S, 3, 1, 0.1, size=40, seed=seed)
        tot += np.bincount(col[g.kept], weights=g.ht, minlength=2)
    np.testing.assert_allclose(tot / 2000, np.bincount(col, minlength=2), rtol=0.01)


# 5 ------------------------------------------------------------------------------------------ window hygiene
@pytest.mark.parametrize("horizon", [None, 50.0])
def test_window_hygiene_after_every_insert(horizon):
    rng = np.random.default_rng(4)
    W, B, cap = 64, 8, 6
    sw = SlidingWindowCoreset(W, 2, 1, 0.1, n_colors=2, coreset_size=cap, block_size=B, horizon=horizon, seed=0)
    bound = 2 * (math.ceil(math.log2(W / B)) + 1)
    ts = 0.0
    for t in range(1, 601):
        ts += rng.exponential(0.8) if horizon else 1.0
        sw.insert(rng.normal(size=2), int(rng.random() < 0.5), timestamp=ts if horizon else None)
        S = sw.query()
        if horizon is None:
            assert S.timestamps.min() >= t - W + 1 and S.timestamps.max() <= t
            assert len(S) <= min(t, W)
        else:
            assert S.timestamps.min() > ts - horizon and S.timestamps.max() <= ts
        st = sw.stats()
        if horizon is None:
            assert st["buckets"] <= bound
        assert st["stored_points"] <= st["buckets"] * cap + B
        assert all(len(b) <= cap for b in sw.buckets)


# 6 ------------------------------------------------------------------------------------------ Meyerson limits
def test_meyerson_limits():
    X = np.random.default_rng(5).normal(size=(200, 3))
    sk = MeyersonSketch(3, 1, f=1e-300, doubling=False, seed=0)
    _, _, opened = sk.insert_many(X)
    assert opened.all() and sk.n_facilities == 200
    sk = MeyersonSketch(3, 2, f=1e300, doubling=False, seed=0)
    _, _, opened = sk.insert_many(X)
    assert opened[0] and opened.sum() == 1
    counts = []
    for seed in range(50):
        sk = MeyersonSketch(3, 1, seed=seed)
        sk.insert_many(np.ones((100, 3)))
        counts.append(sk.n_facilities)
    assert np.mean(counts) == 1.0


# 7 ------------------------------------------------------------------------------------------ scaling invariance
@pytest.mark.parametrize("z", [1, 2])
def test_scaling_multiplies_costs_by_a_to_the_z(z):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(300, 4))
    col = (rng.random(300) < 0.35).astype(int)
    S = WeightedSet.from_arrays(X, col, n_colors=2)
    spec = FairnessSpec.proportional(col, 0.2)
    C = X[:4]
    for a in (3.0, 0.25):
        r1 = fair_assignment_lp(S, C, spec, z)
        r2 = fair_assignment_lp(S.scaled(a), C * a, spec, z)
        assert r2.cost == pytest.approx(a ** z * r1.cost, rel=1e-7)
        assert np.array_equal(r1.plan.argmax(1), r2.plan.argmax(1))
    f1 = fair_kclustering(S, 4, z, spec, seed=1)
    f2 = fair_kclustering(S.scaled(2.0), 4, z, spec, seed=1)
    np.testing.assert_allclose(f2.centers, 2.0 * f1.centers, rtol=1e-9, atol=1e-9)
    assert f2.cost == pytest.approx(2.0 ** z * f1.cost, rel=1e-7)
    # the sliding-window coreset makes the same decisions on scaled data (powers of two scale exactly)
    a_, b_ = (SlidingWindowCoreset(100, 3, z, 0.1, n_colors=2, coreset_size=20, seed=3) for _ in range(2))
    a_.insert_many(X, col)
    b_.insert_many(X * 2.0, col)
    qa, qb = a_.query(), b_.query()
    assert np.array_equal(qa.timestamps, qb.timestamps)
    np.testing.assert_allclose(qb.points, 2.0 * qa.points)
    np.testing.assert_allclose(qb.weights, qa.weights)


# 8 ------------------------------------------------------------------------------------------ eta = 1
def test_eta_one_equals_unconstrained_nearest_centre_cost():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 3))
    col = rng.integers(0, 3, 400)  # labels independent of location
    S = WeightedSet.from_arrays(X, col, n_colors=3, weights=rng.uniform(0.5, 2.0, 400))
    spec = FairnessSpec.proportional(col, 1.0, n_colors=3)
    assert np.all(spec.lower == 0) and np.all(spec.upper == 1)
    C = X[rng.choice(400, 5, replace=False)]
    r = fair_assignment_lp(S, C, spec, 2)
    want = float(S.weights @ ((X[:, None, :] - C[None]) ** 2).sum(-1).min(1))  # independent numpy
    assert r.status == "optimal" and r.cost == pytest.approx(want, rel=1e-7)


# 9 ------------------------------------------------------------------------------------------ fairlet parity
@pytest.mark.realdata
def test_fairlet_solver_meets_requested_balance_on_bank(bank_married):
    S = WeightedSet.from_arrays(bank_married.X, bank_married.colors, n_colors=2)
    n1 = int(bank_married.colors.sum())
    n0 = len(S) - n1
    assert min(n0, n1) / max(n0, n1) >= 3 / 5  # data balance 0.616 >= the requested 3/5
    res = fairlet_tree_solver(S, 5, 3, 5, seed=0)
    for i in range(len(res.centers)):
        a = int((res.colors[res.labels == i] == 0).sum())
        b = int((res.colors[res.labels == i] == 1).sum())
        assert a + b > 0
        assert 5 * min(a, b) >= 3 * max(a, b)  # balance >= 3/5 exactly, in integers
    with pytest.raises(ValueError, match="exceeds the data's balance"):
        fairlet_tree_solver(S, 5, 1, 1)
