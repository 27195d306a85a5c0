"""Unit tests: input validation, absent colours, solver statuses, persistence, time windows, data loaders."""

import json
import math

import numpy as np
import pytest

from iclr25.sw_fair_clustering import (
    FairnessSpec,
    OnlineCoreset,
    SlidingWindowCoreset,
    WeightedSet,
    color_weight_error,
    evaluate_query,
    fair_assignment_lp,
    fair_kclustering,
    from_iterator,
    load_csv,
    load_npz,
    merge_summaries,
    ring_coreset,
    uniform_sample,
)


def _stream(n=1000, d=3, seed=0, n_colors=2):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.integers(0, n_colors, n)


# ------------------------------------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_value_errors():
    X, c = _stream(300)
    with pytest.raises(ValueError, match="window"):
        SlidingWindowCoreset(0, 5)
    with pytest.raises(ValueError, match="larger than the window"):
        SlidingWindowCoreset(100, 5, coreset_size=20, block_size=200)
    with pytest.raises(ValueError, match="z must be 1"):
        SlidingWindowCoreset(100, 5, z=3, coreset_size=20)
    with pytest.raises(ValueError, match=r"eps must be in \(0, 1\)"):
        SlidingWindowCoreset(100, 5, eps=1.5, coreset_size=20)
    with pytest.raises(ValueError, match="k must be"):
        SlidingWindowCoreset(100, 0, coreset_size=20)
    sw = SlidingWindowCoreset(100, 3, coreset_size=20, n_colors=2)
    with pytest.raises(ValueError, match="before any insert"):
        sw.query()
    bad = X[:10].copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="point 4 has a NaN or inf"):
        sw.insert_many(bad, c[:10])
    bad[4, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        sw.insert_many(bad, c[:10])
    sw.insert_many(X[:10], c[:10])
    with pytest.raises(ValueError, match="dimension 2 differs from the earlier points' dimension 3"):
        sw.insert(np.zeros(2), 0)
    with pytest.raises(ValueError, match=r"colour index 2 at point 10 is outside \[0, 2\)"):
        sw.insert(np.zeros(3), 2)
    S = WeightedSet.from_arrays(X[:4], c[:4], n_colors=2)
    with pytest.raises(ValueError, match="k = 5 is larger than the 4 point"):
        fair_kclustering(S, 5)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        fair_kclustering(S, 0)
    with pytest.raises(ValueError, match="z must be 1"):
        fair_assignment_lp(S, X[:2], None, z=0)


def test_fairness_spec_validation():
    with pytest.raises(ValueError, match=r"lower\[1\] = 0.6 > upper = 0.5"):
        FairnessSpec(np.array([0.1, 0.6]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"upper\[0\] = 1.5 is outside \[0, 1\]"):
        FairnessSpec(np.array([0.1, 0.1]), np.array([1.5, 0.5]))
    with pytest.raises(ValueError, match="finite"):
        FairnessSpec(np.array([np.nan, 0.1]), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"eta must be in \[0, 1\]"):
        FairnessSpec.proportional([0, 1], 1.2)
    with pytest.raises(ValueError, match=r"eps \(relaxation\) must be in \(0, 1\)"):
        FairnessSpec.exact([0.5, 0.5]).relaxed(0.0)
    r = FairnessSpec.exact([0.5, 0.5]).relaxed(0.1)
    np.testing.assert_allclose(r.lower, 0.45)
    np.testing.assert_allclose(r.upper, 0.55)


# ------------------------------------------------------------------------------------------- statuses
def test_lp_status_is_reported_never_used_as_optimal():
    X, _ = _stream(40)
    S = WeightedSet.from_arrays(X, [0] * 30 + [1] * 10, n_colors=2)
    r = fair_assignment_lp(S, X[:3], FairnessSpec.exact([0.5, 0.5]), 1)
    assert r.status == "infeasible" and math.isnan(r.cost) and r.plan is None
    assert "colour 0 has share 0.75 > upper bound 0.5" in r.message
    fit = fair_kclustering(S, 3, 1, FairnessSpec.exact([0.5, 0.5]))
    assert fit.status == "infeasible" and math.isnan(fit.cost)
    assert fair_kclustering(S, 3, 1, FairnessSpec.exact([0.7, 0.3])).status == "infeasible"
    relaxed = FairnessSpec.exact([0.7, 0.3]).relaxed(0.2)  # shares 0.75 / 0.25 are inside [0.56, 0.84] / [0.24, 0.36]
    assert fair_kclustering(S, 3, 1, relaxed).status == "optimal"
    with pytest.raises(ValueError, match="time_limit"):
        fair_assignment_lp(S, X[:3], relaxed, 1, time_limit=-1.0)


# ------------------------------------------------------------------------------------------- absent colours
def test_window_where_a_colour_disappears_for_longer_than_w():
    rng = np.random.default_rng(8)
    n, W = 3000, 400
    X = rng.normal(size=(n, 2))
    c = rng.integers(0, 3, n)
    c[1000:2000] = rng.integers(0, 2, 1000)  # colour 2 absent for 1000 > W arrivals
    sw = SlidingWindowCoreset(W, 3, 1, 0.1, n_colors=3, coreset_size=40, seed=0)
    sw.insert_many(X[:1800], c[:1800])
    S = sw.query()
    win = WeightedSet.from_arrays(X[1400:1800], c[1400:1800], n_colors=3)
    assert win.color_weights()[2] == 0 and S.color_weights()[2] == 0
    spec = FairnessSpec.proportional(win.colors, 0.2, n_colors=3)
    assert spec.lower[2] == 0 and spec.upper[2] == 0
    fit = fair_kclustering(S, 3, 1, spec)
    assert fit.status == "optimal" and math.isfinite(fit.cost)
    assert math.isfinite(color_weight_error(S.color_weights(), win.color_weights()))
    q = evaluate_query(1800, win, {"sw": S, "uniform": uniform_sample(win, len(S), seed=0)}, k=3, z=1, eta=0.2,
                       seed=0)
    text = json.dumps({k: v.to_dict() for k, v in q.arms.items()}, allow_nan=False)  # no NaN anywhere
    assert "infeasible" not in text
    fixed = FairnessSpec(np.array([0.2, 0.2, 0.1]), np.array([0.6, 0.6, 0.5]), ("a", "b", "c"))
    r = fair_kclustering(S, 3, 1, fixed)
    assert r.status == "infeasible"
    assert "colour 2 ('c') is absent (weight 0) but its lower bound is 0.1 > 0" in r.assignment.message
    # the colour comes back later and its weight is tracked again
    sw.insert_many(X[1800:], c[1800:])
    assert sw.query().color_weights()[2] > 0


# ------------------------------------------------------------------------------------------- persistence
def test_save_load_resumes_identically(tmp_path):
    X, c = _stream(2500, seed=1)
    a = SlidingWindowCoreset(500, 3, 1, 0.1, n_colors=2, coreset_size=30, seed=5)
    b = SlidingWindowCoreset(500, 3, 1, 0.1, n_colors=2, coreset_size=30, seed=5)
    a.insert_many(X, c)
    b.insert_many(X[:1234], c[:1234])
    p = b.save(tmp_path / "s.npz")
    b2 = SlidingWindowCoreset.load(p)
    assert b2.stats() == b.stats()
    b2.insert_many(X[1234:], c[1234:])
    qa, qb = a.query(), b2.query()
    assert np.array_equal(qa.points, qb.points) and np.array_equal(qa.weights, qb.weights)
    with np.load(p, allow_pickle=False) as z:  # no pickles in the file
        assert "state" in z.files
    with pytest.raises(FileNotFoundError):
        SlidingWindowCoreset.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a saved SlidingWindowCoreset"):
        SlidingWindowCoreset.load(tmp_path / "junk.npz")


def test_insert_many_equals_single_inserts():
    X, c = _stream(700, seed=2)
    a = SlidingWindowCoreset(200, 3, 1, 0.1, n_colors=2, coreset_size=20, seed=1)
    b = SlidingWindowCoreset(200, 3, 1, 0.1, n_colors=2, coreset_size=20, seed=1)
    a.insert_many(X, c)
    for x, ci in zip(X, c):
        b.insert(x, int(ci))
    qa, qb = a.query(), b.query()
    assert np.array_equal(qa.timestamps, qb.timestamps) and np.allclose(qa.weights, qb.weights)


# ------------------------------------------------------------------------------------------- time windows
def test_time_based_partitions_merge_at_query_time():
    rng = np.random.default_rng(3)
    n = 4000
    ts = np.sort(rng.uniform(0, 1000, n))
    X = rng.normal(size=(n, 2))
    c = rng.integers(0, 2, n)
    part = rng.integers(0, 3, n)  # three workers, each with its own summary
    horizon = 200.0
    sws = [SlidingWindowCoreset(400, 3, 1, 0.1, n_colors=2, coreset_size=40, horizon=horizon, seed=i)
           for i in range(3)]
    for i, sw in enumerate(sws):
        m = part == i
        sw.insert_many(X[m], c[m], timestamps=ts[m])
    now = 1000.0
    U = merge_summaries(sws, now=now)
    inw = ts > now - horizon
    assert U.timestamps.min() > now - horizon
    np.testing.assert_allclose(U.color_weights(), np.bincount(c[inw], minlength=2), rtol=0.1)
    R = merge_summaries(sws, now=now, reduce_to=60, k=3)
    assert len(R) <= 60
    with pytest.raises(ValueError, match="earlier than the latest inserted timestamp"):
        sws[0].query(now=10.0)
    with pytest.raises(ValueError, match="needs timestamps"):
        sws[0].insert_many(X[:2], c[:2])
    with pytest.raises(ValueError, match="nondecreasing"):
        sws[0].insert_many(X[:2], c[:2], timestamps=[5.0, 4.0])


# ------------------------------------------------------------------------------------------- coresets
def test_ring_coreset_size_and_weights():
    X, c = _stream(2000, seed=4)
    S = WeightedSet.from_arrays(X, c, n_colors=2)
    R = ring_coreset(S, 5, 1, 0.1, size=300, seed=0)
    assert len(R) == 300
    np.testing.assert_allclose(R.color_weights(), S.color_weights())  # exact within every ring
    with pytest.raises(ValueError, match="exactly one of"):
        ring_coreset(S, 5, 1, 0.1)


def test_online_coreset_incremental_calibrated_totals():
    X, c = _stream(3000, seed=5)
    oc = OnlineCoreset(4, 1, 0.1, n_colors=2, group_size=2.0, seed=0)
    for i in range(0, 3000, 500):
        oc.insert_many(X[i:i + 500], c[i:i + 500])
    S = oc.summary()
    assert len(S) < 3000
    np.testing.assert_allclose(S.color_weights(), np.bincount(c, minlength=2), rtol=1e-9)


def test_sliding_window_colour_weights_within_eps():
    X, c = _stream(6000, seed=6)
    sw = SlidingWindowCoreset(1000, 5, 1, 0.1, n_colors=2, coreset_size=80, seed=0)
    for t in range(1000, 6001, 250):
        sw.insert_many(X[sw.t:t], c[sw.t:t])
        S = sw.query()
        true = np.bincount(c[t - 1000:t], minlength=2)
        assert color_weight_error(S.color_weights(), true) <= 0.1


# ------------------------------------------------------------------------------------------- data loaders
def test_csv_loader_header_mapping_and_errors(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("age,income,group\n30,1.5,red\n40,2.5,blue\n50,3.5,red\n")
    sd = load_csv(p, color_column="group")
    assert sd.color_names == ["red", "blue"] and sd.colors.tolist() == [0, 1, 0]
    assert sd.feature_names == ["age", "income"] and sd.X.shape == (3, 2)
    sd = load_csv(p, color_column="group", colors=["blue", "red"], standardize_features=True)
    assert sd.colors.tolist() == [1, 0, 1] and abs(sd.X.mean()) < 1e-12
    with pytest.raises(ValueError, match="colour 'red' is not in the declared set"):
        load_csv(p, color_column="group", colors=["blue", "green"])
    q = tmp_path / "nohdr.csv"
    q.write_text("1,2,a\n3,4,b\n")
    assert load_csv(q).X.tolist() == [[1, 2], [3, 4]]
    bad = tmp_path / "bad.csv"
    bad.write_text("age,income,group\n30,1.5,red\n40,2.5\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: expected 3 fields, got 2"):
        load_csv(bad)
    bad.write_text("age,income,group\n30,1.5,red\n40,abc,blue\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: feature column 'income' value 'abc' is not a number"):
        load_csv(bad)
    bad.write_text("age,income,group\n30,nan,red\n40,1,blue\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: NaN or inf"):
        load_csv(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_csv(tmp_path / "nope.csv")
    semi = tmp_path / "semi.csv"
    semi.write_text('"a";"b";"g"\n1;2;"x"\n3;4;"y"\n')
    assert load_csv(semi, delimiter=";", color_column="g").color_names == ["x", "y"]
    with pytest.raises(ValueError, match="semicolon"):
        load_csv(semi)


def test_npz_and_iterator_sources(tmp_path):
    X, c = _stream(50)
    p = tmp_path / "s.npz"
    np.savez(p, X=X, colors=np.array(["a", "b"])[c], timestamps=np.arange(50.0))
    sd = load_npz(p)
    assert sd.color_names == ["a", "b"] and np.array_equal(sd.colors, c) and sd.timestamps[-1] == 49
    np.savez(p, X=X)
    with pytest.raises(ValueError, match=r"missing array\(s\) \['colors'\]"):
        load_npz(p)
    with pytest.raises(FileNotFoundError):
        load_npz(tmp_path / "nope.npz")
    batches = list(from_iterator(((x, "ab"[ci]) for x, ci in zip(X, c)), colors=["a", "b"], batch=20))
    assert [len(b[0]) for b in batches] == [20, 20, 10]
    assert np.array_equal(np.concatenate([b[1] for b in batches]), c)
    with pytest.raises(ValueError, match="colour 'z' is not in the declared set"):
        list(from_iterator([(X[0], "z")], colors=["a", "b"]))
    with pytest.raises(ValueError, match="dimension 2 differs"):
        list(from_iterator([(X[0], 0), (X[1, :2], 1)]))


@pytest.mark.realdata
def test_mirrored_loaders(adult_sex, bank_married):
    assert adult_sex.X.shape == (48842, 6) and adult_sex.color_names == ["Male", "Female"]
    assert np.bincount(adult_sex.colors).tolist() == [32650, 16192]
    assert abs(adult_sex.X.mean()) < 1e-9  # standardised with the whole file
    assert bank_married.X.shape == (4521, 3) and np.bincount(bank_married.colors).tolist() == [2797, 1724]
    from iclr25.sw_fair_clustering.data import DATA, load_dataset

    try:
        DATA.path("diabete_gender.csv")
    except FileNotFoundError:
        pytest.skip("diabetes mirror missing")
    d = load_dataset("diabetes", "gender")
    assert len(d) == 99492 and "Unknown/Invalid" not in d.color_names


def test_census_from_a_local_file_through_the_core_resolver(tmp_path, monkeypatch):
    from iclr25.sw_fair_clustering.data import load_dataset

    d = tmp_path / "sw-fair-clustering"
    d.mkdir()
    rng = np.random.default_rng(0)
    rows = ["caseid,dAge,iSex,dIncome1,iClass"] + [f"{10000 + i},{rng.integers(0, 8)},{rng.integers(0, 2)},"
                                                   f"{rng.integers(0, 5)},{rng.integers(0, 9)}" for i in range(300)]
    (d / "USCensus1990.data.txt").write_text("\n".join(rows) + "\n")
    monkeypatch.setenv("ICLR25_DATA", str(tmp_path))
    sd = load_dataset("census", "sex")
    assert sd.X.shape == (300, 3) and sd.n_colors == 2  # caseid and the colour column are not features
    assert load_dataset("census", "age", max_rows=100).X.shape == (100, 3)
