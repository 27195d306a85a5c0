"""Known-answer tests (spec "Known-answer tests"): closed forms, independent recomputations, the
official JSON's derived numbers."""

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from iclr25.tie import (
    TIE,
    ZeroVectorWarning,
    estimate_scales,
    group_metrics,
    infer_spurious_labels,
    make_synthetic,
    oracle_translation,
    project_out,
    spurious_vectors,
    translate,
    zero_shot_predict,
)
from iclr25.tie.tie import normalize_rows


def _json_path() -> Path:
    root = os.environ.get("ICLR25_DATA", str(Path(__file__).resolve().parents[4] / "shared" / "data"))
    p = Path(root) / "tie" / "official_prompts_and_outputs.json"
    if not p.is_file():
        pytest.skip(f"mirror file {p} not found (set ICLR25_DATA)")
    return p


def test_noise_free_synthetic_closed_form():
    d = make_synthetic(0, sigma=0.0, tau=0.0, c=1.0, s=1.5, gamma=1.0)
    lam = estimate_scales(d.pool_emb, d.pool_a, d.text_emb_spurious)
    np.testing.assert_allclose(lam, [0.8320502943, 0.8320502943], atol=1e-10)
    np.testing.assert_allclose(lam, 1.5 / np.sqrt(1 + 1.5**2), atol=1e-12)
    pred = TIE(d.text_emb_spurious).fit(d.pool_emb, d.pool_a).predict(d.test_emb, d.text_emb_class, d.test_a)
    m = group_metrics(pred, d.test_y, d.test_a)
    assert all(v == 1.0 for v in m["per_group"].values())
    zs = group_metrics(zero_shot_predict(d.test_emb, d.text_emb_class), d.test_y, d.test_a)
    assert zs["per_group"][(0, 1)] == 0.0 and zs["per_group"][(1, 0)] == 0.0       # γ·s > c
    assert zs["per_group"][(0, 0)] == 1.0 and zs["per_group"][(1, 1)] == 1.0


def test_translation_keeps_within_group_covariance_projection_removes_variance():
    d = make_synthetic(3)
    t = TIE(d.text_emb_spurious).fit(d.pool_emb, d.pool_a)
    h = normalize_rows(d.test_emb)
    ht = translate(d.test_emb, d.test_a, d.text_emb_spurious, t.lam_)
    hp = project_out(d.test_emb, d.text_emb_spurious)
    s = spurious_vectors(d.text_emb_spurious)
    v = (s[1] - s[0]) / np.linalg.norm(s[1] - s[0])
    for yy in (0, 1):
        for aa in (0, 1):
            m = (d.test_y == yy) & (d.test_a == aa)
            np.testing.assert_allclose(np.cov(ht[m].T), np.cov(h[m].T), atol=1e-12, rtol=0)
            assert np.var(h[m] @ v) > 1e-3
            assert np.var(hp[m] @ v) < 1e-28


def test_pool_equal_to_spurious_vectors_gives_lambda_one_and_zero_vectors_predict_class_0():
    S = np.array([[3.0, 0, 0, 0], [0, 2.0, 0, 0]])
    pool = np.repeat(S, 5, axis=0) * np.arange(1, 11)[:, None]                 # any positive scale
    a = np.repeat([0, 1], 5)
    lam = estimate_scales(pool, a, S)
    np.testing.assert_allclose(lam, [1.0, 1.0], atol=1e-15)
    h = translate(pool, a, S, lam)
    np.testing.assert_allclose(h, 0.0, atol=1e-15)
    T = np.array([[0, 0, 1.0, 0], [0, 0, 0, 1.0]])
    with pytest.warns(ZeroVectorWarning, match="class 0"):
        assert (zero_shot_predict(h, T) == 0).all()
    with pytest.warns(ZeroVectorWarning):
        assert (TIE(S).fit(pool, a).predict(pool, T, a) == 0).all()
    with pytest.warns(ZeroVectorWarning):          # float32 too
        assert (TIE(S.astype(np.float32)).fit(pool.astype(np.float32), a).predict(
            pool.astype(np.float32), T.astype(np.float32), a) == 0).all()


@pytest.mark.realdata
@pytest.mark.parametrize("name,wga,avg,counts", [
    ("waterbirds", 0.7881619938, 0.8412150501, (2054, 1789, 525, 506)),
    ("celeba", 0.8460517585, 0.8616872057, (8270, 6375, 2396, 160)),
])
def test_official_json_derived_numbers(name, wga, avg, counts):
    ref = json.loads(_json_path().read_text())[name]
    keys = ["y0_a0", "y0_a1", "y1_a0", "y1_a1"]
    sizes = [ref["test_group_sizes"][k] for k in keys]
    prod = [ref["group_accuracy"][k] * n for k, n in zip(keys, sizes)]
    np.testing.assert_allclose(prod, np.round(prod), atol=1e-6)                # integer correct counts
    assert tuple(int(round(p)) for p in prod) == counts
    # predictions with exactly those counts -> group_metrics must give the official derived numbers
    y, a, pred = [], [], []
    for k, n, c in zip(keys, sizes, counts):
        yy, aa = int(k[1]), int(k[4])
        y += [yy] * n
        a += [aa] * n
        pred += [yy] * c + [1 - yy] * (n - c)
    m = group_metrics(np.array(pred), np.array(y), np.array(a))
    assert m["worst_group"] == pytest.approx(wga, abs=1e-10)
    assert m["average"] == pytest.approx(avg, abs=1e-10)
    assert m["worst_group"] == pytest.approx(ref["derived"]["worst_group_accuracy"], abs=1e-12)
    assert m["average"] == pytest.approx(ref["derived"]["average_accuracy"], abs=1e-12)
    assert m["correct"] == {(int(k[1]), int(k[4])): c for k, c in zip(keys, counts)}


def test_estimate_scales_matches_a_loop():
    rng = np.random.default_rng(1)
    x, S = rng.standard_normal((50, 6)), rng.standard_normal((3, 6))
    a = rng.integers(0, 3, 50)
    ref = [np.mean([xi @ S[k] / np.linalg.norm(xi) / np.linalg.norm(S[k]) for xi in x[a == k]]) for k in range(3)]
    np.testing.assert_allclose(estimate_scales(x, a, S), ref, atol=1e-14)


def test_fast_predict_equals_explicit_translation():
    for seed, kw in ((0, {}), (1, {"kappa": 0.6}), (2, {"sigma": 1.0})):
        d = make_synthetic(seed, **kw)
        for mode in ("true", "inferred"):
            t = TIE(d.text_emb_spurious, mode).fit(d.pool_emb, d.pool_a)
            explicit = zero_shot_predict(t.transform(d.test_emb, d.test_a), d.text_emb_class)
            np.testing.assert_array_equal(t.predict(d.test_emb, d.text_emb_class, d.test_a), explicit)


def test_scale_invariance():
    d = make_synthetic(4, sigma=0.5)
    rng = np.random.default_rng(0)
    k = rng.uniform(0.1, 10, (d.test_emb.shape[0], 1))
    kp = rng.uniform(0.1, 10, (d.pool_emb.shape[0], 1))
    np.testing.assert_array_equal(infer_spurious_labels(k * d.test_emb, d.text_emb_spurious),
                                  infer_spurious_labels(d.test_emb, d.text_emb_spurious))
    lam = estimate_scales(d.pool_emb, d.pool_a, d.text_emb_spurious)
    np.testing.assert_allclose(estimate_scales(kp * d.pool_emb, d.pool_a, 7 * d.text_emb_spurious), lam, atol=1e-13)
    np.testing.assert_allclose(translate(k * d.test_emb, d.test_a, 3 * d.text_emb_spurious, lam),
                               translate(d.test_emb, d.test_a, d.text_emb_spurious, lam), atol=1e-13)
    for mode in ("true", "inferred"):
        p1 = TIE(d.text_emb_spurious, mode).fit(d.pool_emb, d.pool_a).predict(d.test_emb, d.text_emb_class, d.test_a)
        p2 = TIE(5 * d.text_emb_spurious, mode).fit(kp * d.pool_emb, d.pool_a).predict(
            k * d.test_emb, 2 * d.text_emb_class, d.test_a)
        np.testing.assert_array_equal(p1, p2)


def test_permuting_attributes_with_their_prompts_changes_nothing_mispairing_does():
    rng = np.random.default_rng(5)
    A, D, n = 5, 32, 3000
    S = rng.standard_normal((A, D))
    T = rng.standard_normal((4, D)) + 0.8 * S[:4]                # class prompts lean on the attribute
    a = rng.integers(0, A, n)
    y = np.where(rng.random(n) < 0.8, a % 4, rng.integers(0, 4, n))
    x = 0.8 * T[y] + 1.2 * S[a] + 0.3 * rng.standard_normal((n, D))
    base = TIE(S).fit(x, a).predict(x, T, a)
    perm = np.array([3, 0, 4, 1, 2])                   # new index j holds old attribute perm[j]
    inv = np.argsort(perm)
    np.testing.assert_array_equal(TIE(S[perm]).fit(x, inv[a]).predict(x, T, inv[a]), base)
    np.testing.assert_array_equal(TIE(S[perm], "inferred").fit(x).predict(x, T),
                                  TIE(S, "inferred").fit(x).predict(x, T))
    # FMoW-style mis-pairing: prompts permuted, labels not -> other predictions, much worse WGA
    bad = TIE(S[perm]).fit(x, a).predict(x, T, a)
    assert (bad != base).any()
    assert group_metrics(base, y, a)["worst_group"] - group_metrics(bad, y, a)["worst_group"] > 0.2


def test_tie_star_equals_tie_when_inferred_labels_are_true():
    d = make_synthetic(0, s=1.5, sigma=0.05)
    assert (infer_spurious_labels(d.test_emb, d.text_emb_spurious) == d.test_a).all()
    assert (infer_spurious_labels(d.pool_emb, d.text_emb_spurious) == d.pool_a).all()
    t = TIE(d.text_emb_spurious, "true").fit(d.pool_emb, d.pool_a)
    ts = TIE(d.text_emb_spurious, "inferred").fit(d.pool_emb)
    np.testing.assert_array_equal(t.lam_, ts.lam_)
    np.testing.assert_array_equal(t.predict(d.test_emb, d.text_emb_class, d.test_a),
                                  ts.predict(d.test_emb, d.text_emb_class))


def test_projection_is_rejection_of_the_difference_direction():
    rng = np.random.default_rng(2)
    x, S = rng.standard_normal((20, 8)), rng.standard_normal((2, 8))
    s = S / np.linalg.norm(S, axis=1, keepdims=True)
    v = (s[1] - s[0]) / np.linalg.norm(s[1] - s[0])
    h = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(project_out(x, S), h - np.outer(h @ v, v), atol=1e-14)


def test_oracle_translation_is_minus_mean_spurious_component():
    d = make_synthetic(1)
    v = oracle_translation(d)
    h = normalize_rows(d.pool_emb)
    for a in (0, 1):
        ref = -np.mean(h[d.pool_a == a] @ d.u_spu) * d.u_spu
        np.testing.assert_allclose(v[a], ref, atol=1e-14)
    # κ = τ = 0: s_a = ±u_spu, so TIE's λ_a s_a is exactly −v*_a
    d0 = make_synthetic(1, tau=0.0)
    lam = estimate_scales(d0.pool_emb, d0.pool_a, d0.text_emb_spurious)
    np.testing.assert_allclose(lam[:, None] * spurious_vectors(d0.text_emb_spurious), -oracle_translation(d0),
                               atol=1e-14)


def test_group_metrics_weighted_average_and_empty_groups():
    y = np.array([0, 0, 0, 1, 1, 1, 1])
    a = np.array([0, 0, 1, 0, 0, 0, 0])
    p = np.array([0, 1, 0, 1, 1, 0, 1])
    m = group_metrics(p, y, a, classes=[0, 1], attributes=[0, 1])
    assert m["per_group"] == {(0, 0): 0.5, (0, 1): 1.0, (1, 0): 0.75}
    assert m["empty_groups"] == [(1, 1)]
    assert m["worst_group"] == 0.5 and m["average"] == pytest.approx(5 / 7)
    assert not any(np.isnan(v) for v in m["per_group"].values())


def test_paired_renders_differ_only_in_frame_pixels():
    from iclr25.tie.offline_pair import render_frames

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (7, 32, 32, 3), dtype=np.uint8)
    g, b = render_frames(x, "green"), render_frames(x, "blue")
    frame = np.zeros((32, 32), bool)
    frame[:3], frame[-3:], frame[:, :3], frame[:, -3:] = True, True, True, True
    diff = (g != b).any(axis=(0, 3))
    assert (diff == frame).all()                                   # every frame pixel differs, nothing else
    np.testing.assert_array_equal(g[:, ~frame], x[:, ~frame])
    assert (g[:, frame] == (0, 200, 0)).all() and (b[:, frame] == (0, 0, 230)).all()
    np.testing.assert_array_equal(x, rng.integers(0, 1, 1) * 0 + x)  # input untouched (copy semantics)


def test_zero_shot_prediction_matches_brute_force():
    rng = np.random.default_rng(3)
    x, T = rng.standard_normal((30, 5)), rng.standard_normal((4, 5))
    ref = [int(np.argmax([xi @ t / np.linalg.norm(xi) / np.linalg.norm(t) for t in T])) for xi in x]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert zero_shot_predict(x, T).tolist() == ref
