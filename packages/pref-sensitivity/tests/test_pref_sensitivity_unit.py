"""Unit tests: validation and errors, region scans, MLE, file loading, torch-free import."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.special import expit

from iclr25.pref_sensitivity import (
    MLEDoesNotExistError,
    MLEExistenceWarning,
    ProbabilityClippedWarning,
    bt_predict,
    bt_sensitivity,
    check_preference_matrix,
    fit_bt,
    fit_bt_counts,
    fit_pl,
    load_preferences,
    pl_log_prob,
    scores_to_matrix,
    sensitive_triples,
    sensitive_tuples,
)


@pytest.mark.parametrize("bad", [1.2, -0.1, float("nan")])
def test_probabilities_outside_unit_interval_raise(bad):
    with pytest.raises(ValueError, match="p_ik"):
        bt_predict(bad, 0.5)


def test_exact_zero_one_clipped_with_warning_no_nan():
    with pytest.warns(ProbabilityClippedWarning, match="clipped"):
        p = bt_predict(np.array([0.0, 1.0, 0.3]), np.array([1.0, 0.0, 0.0]))
    with pytest.warns(ProbabilityClippedWarning):
        da, db = bt_sensitivity([0.0, 1.0], [1.0, 1.0])
    assert np.isfinite(p).all() and np.isfinite(da).all() and np.isfinite(db).all()
    assert 0 <= p.min() and p.max() <= 1


def test_no_warning_for_interior_values():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bt_predict(0.3, 0.6)


def test_broadcasting_shapes():
    p = bt_predict(np.full((4, 1), 0.2), np.linspace(0.1, 0.9, 5))
    assert p.shape == (4, 5) and p.dtype == np.float64


def test_triples_from_scores_equal_triples_from_matrix():
    s = np.array([3.0, 0.0, -4.0, 1.0, 0.5])
    r1 = sensitive_triples(scores=s, lam=2.0)
    r2 = sensitive_triples(matrix=scores_to_matrix(s), lam=2.0)
    assert r1.n_evaluated == r2.n_evaluated == 5 * 4 * 3 // 2
    assert r1.n_sensitive == r2.n_sensitive and r1.max_sensitivity == pytest.approx(r2.max_sensitivity)
    assert r2.max_bt_violation == pytest.approx(0.0, abs=1e-9)  # a BT matrix is consistent


def test_triples_brute_force_count():
    rng = np.random.default_rng(0)
    s = rng.normal(scale=3, size=7)
    lam = 3.0
    count = 0
    for i in range(7):
        for j in range(i + 1, 7):
            for k in range(7):
                if k in (i, j):
                    continue
                da, db = bt_sensitivity(expit(s[i] - s[k]), expit(s[k] - s[j]))
                count += max(da, db) > lam
    rep = sensitive_triples(scores=s, lam=lam, items=list("abcdefg"))
    assert rep.n_sensitive == count
    assert rep.top[0]["d_pij_d_pik"] == pytest.approx(rep.max_sensitivity) or \
        rep.top[0]["d_pij_d_pkj"] == pytest.approx(rep.max_sensitivity)


def test_dominant_pivot_is_reported():
    # 'top' beats everyone overwhelmingly: it is the pivot of the most sensitive triples
    s = np.array([8.0, 0.0, 0.2, -0.1])
    rep = sensitive_triples(scores=s, lam=2.0, items=["top", "a", "b", "c"])
    assert rep.top[0]["k"] == "top"
    assert max(rep.pivot_counts, key=rep.pivot_counts.get) == "top"
    md = rep.to_markdown()
    assert "sensitive" in md and "top" in md


def test_k2_tuples_equal_triples():
    s = np.array([2.0, -1.0, 0.5, 3.0, -2.5])
    t = sensitive_tuples(s, 2, lam=2.0)
    r = sensitive_triples(scores=s, lam=2.0)
    assert (t.n_evaluated, t.n_sensitive) == (r.n_evaluated, r.n_sensitive)
    assert t.max_sensitivity == pytest.approx(r.max_sensitivity)


def test_tuples_k3_counts_and_errors():
    s = np.linspace(-2, 2, 6)
    rep = sensitive_tuples(s, 3, lam=1.5)
    assert rep.n_evaluated == 15 * 6  # C(6,2) pairs x C(4,2) contexts
    with pytest.raises(ValueError, match="k must be"):
        sensitive_tuples(s, 6)
    with pytest.raises(ValueError, match="max_evaluations"):
        sensitive_tuples(np.zeros(40), 5, max_evaluations=1000)


def test_preference_matrix_errors():
    P = np.array([[np.nan, 0.9, np.nan], [0.2, np.nan, 0.6], [np.nan, 0.4, np.nan]])
    with pytest.raises(ValueError, match="inconsistent preference table"):
        check_preference_matrix(P, items=["x", "y", "z"])
    P2 = np.array([[np.nan, 0.9, 0.5, np.nan], [np.nan, np.nan, 0.6, np.nan],
                   [np.nan, np.nan, np.nan, np.nan], [np.nan, np.nan, np.nan, np.nan]])
    with pytest.raises(ValueError, match="'w' has no comparison"):
        check_preference_matrix(P2, items=["x", "y", "z", "w"])
    with pytest.raises(ValueError, match="outside"):
        check_preference_matrix(np.array([[np.nan, 1.5, 0.5], [np.nan] * 3, [np.nan] * 3]))
    with pytest.raises(ValueError, match="square"):
        check_preference_matrix(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="exactly one"):
        sensitive_triples(lam=2.0)
    with pytest.raises(ValueError, match="lam"):
        sensitive_triples(scores=[1, 2, 3], lam=0)


def test_preference_matrix_fills_complement_and_skips_missing():
    P = np.full((4, 4), np.nan)
    P[0, 1], P[1, 2], P[2, 3] = 0.99, 0.01, 0.7  # a chain: only triples with both legs observed
    A = check_preference_matrix(P)
    assert A[1, 0] == pytest.approx(0.01)
    rep = sensitive_triples(matrix=P, lam=2.0)
    assert rep.n_evaluated == 2  # (0,1,2) via pivot 1 and (1,2,3) via pivot 2
    top = rep.top[0]
    assert top["p_ij_implied"] == pytest.approx(0.5)


def test_fit_bt_errors_and_warnings():
    with pytest.raises(ValueError, match="'2' takes part in no comparison"):
        fit_bt(3, [0, 1], [1, 0])
    # 10 wins / 0 losses: the MLE does not exist
    with pytest.raises(MLEDoesNotExistError, match="never lose"):
        fit_bt(3, [0] * 10 + [1, 2], [1] * 10 + [2, 1])
    with pytest.warns(MLEExistenceWarning):
        s = fit_bt(3, [0] * 10 + [1, 2], [1] * 10 + [2, 1], l2=1e-3)
    assert np.isfinite(s).all() and s[0] > s[1]
    with pytest.raises(ValueError, match="itself"):
        fit_bt(3, [0], [0])
    with pytest.raises(ValueError, match="outside"):
        fit_bt(3, [0, 5], [1, 2])


def test_fit_bt_recovers_scores():
    rng = np.random.default_rng(4)
    true = np.array([1.0, 0.2, -0.3, -0.9])
    i, j = rng.integers(0, 4, (2, 30000))
    keep = i != j
    i, j = i[keep], j[keep]
    win = rng.random(i.size) < expit(true[i] - true[j])
    s = fit_bt(4, np.where(win, i, j), np.where(win, j, i))
    np.testing.assert_allclose(s, true - true.mean(), atol=0.05)


def test_fit_pl_k2_equals_bt_and_recovers_scores():
    W = np.array([[0, 30, 5], [10, 0, 20], [2, 8, 0]], float)
    rk, cnt = [], []
    for a in range(3):
        for b in range(3):
            if W[a, b]:
                rk.append([a, b])
                cnt.append(W[a, b])
    np.testing.assert_allclose(fit_pl(3, np.array(rk), counts=np.array(cnt)), fit_bt_counts(W), atol=1e-7)
    rng = np.random.default_rng(5)
    true = np.array([0.8, 0.0, -0.5, 0.3, -0.6])
    g = true + rng.gumbel(size=(20000, 5))
    s = fit_pl(5, np.argsort(-g, 1))
    np.testing.assert_allclose(s, true - true.mean(), atol=0.05)


def test_pl_log_prob_errors():
    with pytest.raises(ValueError, match="twice"):
        pl_log_prob([0.0, 1.0, 2.0], [0, 0, 1])
    with pytest.raises(ValueError, match="outside"):
        pl_log_prob([0.0, 1.0], [0, 3])
    with pytest.raises(ValueError, match="n_stages"):
        pl_log_prob([0.0, 1.0], [0, 1], n_stages=2)


def test_load_preferences_formats(tmp_path):
    f = tmp_path / "scores.csv"
    f.write_text("item,score\ndog,1.5\ncat,0\nbird,-2\n")
    d = load_preferences(f)
    assert d.kind == "scores" and d.items == ["dog", "cat", "bird"] and d.scores[2] == -2
    f = tmp_path / "cmp.jsonl"
    f.write_text('{"winner": "dog", "loser": "cat", "count": 3}\n\n{"winner": "cat", "loser": "dog"}\n')
    d = load_preferences(f)
    assert d.kind == "comparisons" and d.wins[0, 1] == 3 and d.wins[1, 0] == 1
    f = tmp_path / "p.csv"
    f.write_text("item_i,item_j,p\na,b,0.9\nb,c,0.2\nb,a,0.1\n")
    d = load_preferences(f)
    assert d.kind == "probabilities" and d.matrix[1, 0] == pytest.approx(0.1) and np.isnan(d.matrix[0, 2])


@pytest.mark.parametrize("content, suffix, match", [
    ("item_i,item_j,p\na,b,0.9\nb,a,0.3\n", ".csv", "line 3.*contradicts line 2"),
    ("item_i,item_j,p\na,b,1.7\n", ".csv", "line 2: p = 1.7 is outside"),
    ("item_i,item_j,p\na,a,0.5\n", ".csv", "line 2.*itself"),
    ("winner,loser\ndog,\n", ".csv", "line 2: missing field"),
    ("item,score\ndog,abc\n", ".csv", "line 2: field 'score' = 'abc' is not a number"),
    ('{"winner": "a", "loser": "b"}\n{oops\n', ".jsonl", "line 2: not valid JSON"),
    ("foo,bar\n1,2\n", ".csv", "cannot tell the file kind"),
    ("item,score\na,1\na,2\n", ".csv", "already has a score"),
    ("x", ".txt", "unknown file type"),
    # trial b (session 52): JSON true counted as 1 (a count, a score, a probability)
    ('{"winner": "a", "loser": "b", "count": true}\n', ".jsonl", "line 1: field 'count' = true is not a number"),
    ('{"item": "a", "score": false}\n', ".jsonl", "line 1: field 'score' = false is not a number"),
    ('{"item_i": "a", "item_j": "b", "p": true}\n', ".jsonl", "line 1: field 'p' = true is not a number"),
])
def test_load_preferences_errors(tmp_path, content, suffix, match):
    f = tmp_path / f"in{suffix}"
    f.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_preferences(f)


def test_base_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import iclr25.pref_sensitivity as ps\n"
        "print(ps.bt_predict(0.01, 0.99), ps.sensitive_triples(scores=[1, 0, -1]).n_evaluated)\n"
        "assert sys.modules['torch'] is None\n"
        "from iclr25.pref_sensitivity.reproduce import _torch_ok\n"
        "assert 'not installed' in _torch_ok()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0].startswith(("0.5", "0.4999999"))


def test_public_api_resolves():
    pytest.importorskip("torch")
    import iclr25.pref_sensitivity as ps

    for name in ps.__all__:
        assert getattr(ps, name) is not None, name
    with pytest.raises(AttributeError):
        ps.no_such_function  # noqa: B018


def test_unreadable_files_are_clean_errors(tmp_path):
    import gzip as _gzip

    from iclr25.pref_sensitivity.data import load_preferences

    fake = tmp_path / "notgz.csv.gz"
    fake.write_text("a,b,p\nx,y,0.5\n")
    with pytest.raises(ValueError, match=r"notgz\.csv\.gz: cannot be read.*gzip"):
        load_preferences(fake)
    trunc = tmp_path / "trunc.csv.gz"
    trunc.write_bytes(_gzip.compress(b"a,b,p\nx,y,0.5\n" * 50)[:40])
    with pytest.raises(ValueError, match="trunc.csv.gz"):
        load_preferences(trunc)
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"a,b,p\n\xff\xfe,y,0.5\n")
    with pytest.raises(ValueError, match=r"bin\.csv: cannot be read as UTF-8"):
        load_preferences(binary)
    with pytest.raises(ValueError, match="is a directory"):
        load_preferences(tmp_path)
