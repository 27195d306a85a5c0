"""Issue 19: fits report convergence; scans are exact at extreme score gaps; one check of lambda."""

import json
import warnings

import numpy as np
import pytest

from iclr25.pref_sensitivity import fit_bt, fit_bt_counts, fit_pl, sensitive_triples, sensitive_tuples
from iclr25.pref_sensitivity.cli import main
from iclr25.pref_sensitivity.closed_form import (
    bt_sensitivity,
    bt_sensitivity_from_scores,
    sensitive_region_area,
)
from iclr25.pref_sensitivity.mle import ConvergenceWarning, FittedScores
from iclr25.pref_sensitivity.regions import log_bt_partials

mp = pytest.importorskip("mpmath")


def _mp_partials(si, sk, sj, dps=60):
    """Result 2 at 60 significant digits: d p_ij/d p_ik = sigma'(u+v)/sigma'(u), u = s_i-s_k, v = s_k-s_j."""
    with mp.workdps(dps):
        def dsig(x):
            e = mp.exp(-abs(x))
            return e / (1 + e) ** 2

        u, v = mp.mpf(si) - mp.mpf(sk), mp.mpf(sk) - mp.mpf(sj)
        return dsig(u + v) / dsig(u), dsig(u + v) / dsig(v)


@pytest.mark.parametrize("gap", [40.0, 1000.0])
def test_partials_at_extreme_gaps_match_high_precision(gap):
    for si, sk, sj in [(gap, 0.0, gap), (0.0, gap, 0.0), (gap, 0.0, 0.5 * gap), (0.0, 0.0, gap), (gap, gap / 2, 0)]:
        la, lb = log_bt_partials(si - sk, sk - sj)
        ra, rb = _mp_partials(si, sk, sj)
        assert la == pytest.approx(float(mp.log(ra)), rel=1e-12, abs=1e-9)
        assert lb == pytest.approx(float(mp.log(rb)), rel=1e-12, abs=1e-9)
    if gap == 40.0:  # in range: the plain partials from scores are exact too (probability space was 4x off)
        da, db = bt_sensitivity_from_scores(gap, 0.0, gap)
        assert da == pytest.approx(float(_mp_partials(gap, 0.0, gap)[0]), rel=1e-12)
        # probabilities this close to 0/1 cannot be represented: the probability API says so
        from iclr25.pref_sensitivity import ProbabilityClippedWarning

        with pytest.warns(ProbabilityClippedWarning):
            bt_sensitivity(1 / (1 + np.exp(-gap)), 1 / (1 + np.exp(gap)))


def test_scan_at_gap_1000_finds_the_sensitive_triple():
    rep = sensitive_triples(scores=[1000.0, 0.0, 1000.0], lam=2.0)
    assert rep.n_evaluated == 3 and rep.n_sensitive == 1  # pivot "1" far below both ends: log10 partial 433.7
    top = rep.top[0]
    assert top["k"] == "1" and top["d_pij_d_pik"] is None  # beyond float range: reported through its log10
    ref = float(mp.log10(_mp_partials(1000, 0, 1000)[0]))
    assert top["log10_d_pij_d_pik"] == pytest.approx(ref, rel=1e-12)
    assert rep.max_sensitivity is None and rep.max_log10_sensitivity == pytest.approx(ref, rel=1e-12)
    json.dumps(rep.to_dict(), allow_nan=False)  # valid JSON: no inf, no NaN
    md = rep.to_markdown()
    assert "1e433.7" in md
    tup = sensitive_tuples([1000.0, 0.0, 1000.0, 3.0], 2, lam=2.0)  # k = 2 tuples = triples
    assert tup.n_sensitive == sensitive_triples(scores=[1000.0, 0.0, 1000.0, 3.0], lam=2.0).n_sensitive


def test_nan_in_a_scan_names_the_triple():
    with pytest.raises(ValueError, match=r"the partials of \(i=a, k=c, j=b\) are not finite"):
        sensitive_triples(scores=[1e308, -1e308, 1e308], items=["a", "b", "c"])


def test_tiny_iteration_cap_warns_and_reports():
    rng = np.random.default_rng(0)
    W = rng.integers(1, 20, size=(6, 6)).astype(float)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        s = fit_bt_counts(W, maxiter=1)
    assert isinstance(s, FittedScores) and not s.info.converged and s.info.iterations == 1
    ok = fit_bt_counts(W)
    assert ok.info.converged and ok.info.grad_norm < 1e-9 and ok.info.iterations <= 20
    rk = np.array([rng.permutation(6) for _ in range(200)])
    with pytest.warns(ConvergenceWarning):
        p = fit_pl(6, rk, maxiter=2)
    assert not p.info.converged and p.info.method == "L-BFGS-B"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert fit_pl(6, rk).info.converged


def test_long_chain_converges_to_the_exact_mle():
    # a 1,500-item chain where i beats i+1 three times and loses once: the MLE is exact per edge,
    # s_i - s_{i+1} = log 3 (each edge is a cut of the tree), which L-BFGS missed by 5e-4 silently
    n = 1500
    i = np.arange(n - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        s = fit_bt(n, np.r_[np.repeat(i, 3), i + 1], np.r_[np.repeat(i + 1, 3), i])
    assert s.info.converged
    np.testing.assert_allclose(-np.diff(s), np.log(3.0), rtol=0, atol=1e-9)
    assert abs(s.sum()) < 1e-6


def test_analyze_records_the_fit(tmp_path, capsys):
    f = tmp_path / "c.csv"
    f.write_text("winner,loser,count\na,b,9\nb,a,1\nb,c,8\nc,b,2\nc,a,3\na,c,7\n")
    out = tmp_path / "o"
    assert main(["analyze", "--input", str(f), "--out", str(out), "--no-plot"]) == 0
    stdout = capsys.readouterr().out
    assert "BT fit: converged" in stdout
    fit = json.loads((out / "sensitivity_report.json").read_text())["fit"]
    assert fit["converged"] is True and fit["method"] == "newton"
    assert main(["analyze", "--input", str(f), "--out", str(out), "--no-plot", "--maxiter", "1"]) == 0
    assert "DID NOT CONVERGE" in capsys.readouterr().out
    assert json.loads((out / "sensitivity_report.json").read_text())["fit"]["converged"] is False


@pytest.mark.parametrize("argv", [["analyze", "--input", "x.csv", "--lam", "0"], ["area", "--lam", "0"],
                                  ["area", "--lam", "nan"], ["realdata", "--lam", "-1"],
                                  ["heatmap", "--lam", "0"], ["analyze", "--input", "x.csv", "--l2", "-1"]])
def test_lambda_and_l2_are_checked_the_same_everywhere(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "must be" in err and "Traceback" not in err


def test_library_rejects_lambda_le_zero_like_the_cli():
    for fn in (lambda: sensitive_region_area(0.0), lambda: sensitive_triples(scores=[0, 1, 2], lam=0.0),
               lambda: sensitive_tuples([0, 1, 2, 3], 3, lam=-1.0)):
        with pytest.raises(ValueError, match="lambda must be"):
            fn()


# ---------------------------------------------------------------- follow-up (session 52): silent empty results

@pytest.mark.parametrize("cmd", ["area", "realdata"])
def test_an_empty_lambda_list_is_refused(cmd, capsys):
    """`area --lam` (no values) printed an empty table with exit 0."""
    assert main([cmd, "--lam"]) == 2
    err = capsys.readouterr().err  # flag errors are shown in the CLI's usual (tyro) error box
    assert "--lam needs at least one value" in err and "Traceback" not in err


def test_disconnected_probability_pairs_are_an_error_not_an_empty_report(tmp_path, capsys):
    """Pairs a-b and c-d share no item: '0 triples evaluated', 0/0 = '0%' sensitive, exit 0."""
    f = tmp_path / "p.csv"
    f.write_text("item_i,item_j,p\na,b,0.7\nc,d,0.6\n")
    assert main(["analyze", "--input", str(f), "--out", str(tmp_path / "o"), "--no-plot"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no triple" in err[0] and "2 compared pairs" in err[0], err
    P = np.full((4, 4), np.nan)
    P[0, 1], P[1, 0], P[2, 3], P[3, 2] = 0.7, 0.3, 0.6, 0.4
    with pytest.raises(ValueError, match="no triple"):
        sensitive_triples(matrix=P)
    P[1, 2], P[2, 1] = 0.5, 0.5  # b-c joins them: triples through b and c are evaluated
    assert sensitive_triples(matrix=P).n_evaluated > 0


def test_dpo_refuses_a_repeated_p23(capsys):
    """`dpo --p23 0.01 0.01` trained the same point twice (two rows, a doubled weight in the mean)."""
    assert main(["dpo", "--backend", "tabular", "--p23", "0.01", "0.01", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert "p23=0.01 is given twice (p23[0] and p23[1])" in err and "Traceback" not in err, err
