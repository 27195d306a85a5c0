"""Known-answer tests (the spec's list), each against an independent computation."""

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from iclr25.frs import (
    FewVotesWarning,
    NoCertificatePossibleWarning,
    certified_radius,
    check_num_votes,
    clopper_pearson_lower,
    damerau_levenshtein,
    fuzz_rates,
    radius_ratio,
    targeted_randomize,
)
from iclr25.frs.bounds import clopper_pearson_upper, min_votes_one_dissent, min_votes_unanimous

# ---- Damerau–Levenshtein ------------------------------------------------------------------

@pytest.mark.parametrize("a,b,full,osa", [
    ("kitten", "sitting", 3, 3), ("ab", "ba", 1, 1), ("ca", "abc", 2, 3), ("", "abc", 3, 3), ("abc", "", 3, 3),
    ("abc", "abc", 0, 0),
])
def test_dl_strings(a, b, full, osa):
    assert damerau_levenshtein(a, b) == full
    assert damerau_levenshtein(a, b, restricted=True) == osa


def test_dl_tokens():
    assert damerau_levenshtein("the cf movie".split(), "the movie".split()) == 1
    assert damerau_levenshtein("a b c".split(), "b a c".split()) == 1
    assert damerau_levenshtein(["x", "y"], ["y", "x", "z"]) == 2


def _dl_brute(a, b):
    """Independent: BFS over edit operations (tiny alphabets) — the true unrestricted DL distance."""
    from collections import deque
    alphabet = sorted(set(a) | set(b))
    seen, q = {a: 0}, deque([a])
    while q:
        s = q.popleft()
        if s == b:
            return seen[s]
        if len(s) > len(a) + len(b):
            continue
        nxt = set()
        for i in range(len(s) + 1):
            for c in alphabet:
                nxt.add(s[:i] + c + s[i:])
        for i in range(len(s)):
            nxt.add(s[:i] + s[i + 1:])
            for c in alphabet:
                nxt.add(s[:i] + c + s[i + 1:])
            if i + 1 < len(s):
                nxt.add(s[:i] + s[i + 1] + s[i] + s[i + 2:])
        for t in nxt:
            if t not in seen:
                seen[t] = seen[s] + 1
                q.append(t)
    raise AssertionError


def test_dl_matches_bfs_on_random_short_strings():
    rng = np.random.default_rng(0)
    for _ in range(25):
        a = "".join(rng.choice(list("abc"), size=rng.integers(0, 4)))
        b = "".join(rng.choice(list("abc"), size=rng.integers(0, 4)))
        assert damerau_levenshtein(a, b) == _dl_brute(a, b), (a, b)
        assert damerau_levenshtein(a, b, restricted=True) >= damerau_levenshtein(a, b)


# ---- Clopper–Pearson --------------------------------------------------------------------

@pytest.mark.parametrize("k,n,alpha,value", [
    (20, 20, 0.05, 0.8608916593), (20, 20, 0.001, 0.7079457844), (100, 100, 0.05, 0.9704869504),
    (10, 10, 0.001, 0.5011872336), (18, 20, 0.05, 0.7173814751),
])
def test_clopper_pearson_known_values(k, n, alpha, value):
    assert clopper_pearson_lower(k, n, alpha) == pytest.approx(value, abs=1e-9)
    if k == n:
        assert clopper_pearson_lower(k, n, alpha) == pytest.approx(alpha ** (1 / n), abs=1e-12)


def _cp_lower_bisect(k, n, alpha):
    """Independent: the p with P(X >= k | p) = alpha, by bisection on the binomial tail."""
    if k == 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if stats.binom.sf(k - 1, n, mid) < alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@pytest.mark.parametrize("n", [1, 7, 8, 20])
@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_clopper_pearson_against_scipy_binomtest_and_bisection(n, alpha):
    for k in range(n + 1):
        ours = clopper_pearson_lower(k, n, alpha)
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact").low
        assert ours == pytest.approx(ref, abs=1e-9)
        if k in (0, 1, n // 2, n - 1, n):
            assert ours == pytest.approx(_cp_lower_bisect(k, n, alpha), abs=1e-9)
        up = clopper_pearson_upper(k, n, alpha)
        assert up == pytest.approx(stats.binomtest(k, n).proportion_ci(1 - 2 * alpha, "exact").high, abs=1e-9)


def test_clopper_pearson_coverage_by_enumeration():
    """Exact coverage: P_p(bound <= p) >= 1 - alpha for a grid of p (enumerating k)."""
    n, alpha = 12, 0.05
    bounds = np.array([clopper_pearson_lower(k, n, alpha) for k in range(n + 1)])
    for p in np.linspace(0.01, 0.99, 50):
        cover = sum(stats.binom.pmf(k, n, p) for k in range(n + 1) if bounds[k] <= p)
        assert cover >= 1 - alpha - 1e-12


def test_clopper_pearson_errors():
    with pytest.raises(ValueError, match="alpha"):
        clopper_pearson_lower(3, 5, 1.0)
    with pytest.raises(ValueError, match="k must be"):
        clopper_pearson_lower(6, 5, 0.05)


# ---- radius ---------------------------------------------------------------------------------

def test_radius_known_values():
    assert certified_radius(0.9, 0.1, 0.9, 20) == pytest.approx(0.2424179592, abs=1e-10)
    assert certified_radius(0.9, 0.1, 0.9, 20) * 20 == pytest.approx(4.848, abs=1e-3)
    assert certified_radius(0.9, 0.1, 0.5, 20) == pytest.approx(0.0368482797, abs=1e-10)
    assert radius_ratio(0.5, 0.9) == pytest.approx(6.5788134790, abs=1e-9)
    assert radius_ratio(0.3, 0.9) == pytest.approx(11.4271726634, abs=1e-9)
    # closed form independently: ln(1 - gap/2) / (L ln w)
    assert certified_radius(0.8, 0.15, 0.7, 13) == pytest.approx(math.log(1 - 0.65 / 2) / (13 * math.log(0.7)))
    # Corollary 1: ratio at equal p
    r_h, r_m = certified_radius(0.7, 0.3, 0.9, 17), certified_radius(0.7, 0.3, 0.3, 17)
    assert r_h / r_m == pytest.approx(radius_ratio(0.3, 0.9))


def test_radius_zero_when_pa_le_pb():
    assert certified_radius(0.4, 0.4, 0.9, 10) == 0.0
    assert certified_radius(0.3, 0.6, 0.9, 10) == 0.0


def test_radius_definition_holds():
    """At the radius, a trigger of R*L tokens survives whole with probability Δ = (p_A - p_B)/2."""
    pa, pb, w, L = 0.85, 0.15, 0.9, 20
    r = certified_radius(pa, pb, w, L)
    assert 1 - w ** (r * L) == pytest.approx((pa - pb) / 2)


@pytest.mark.parametrize("kw,match", [
    (dict(p_a=1.2, p_b=0.0, w=0.9, length=5), "p_a"), (dict(p_a=0.5, p_b=-0.1, w=0.9, length=5), "p_b"),
    (dict(p_a=0.7, p_b=0.5, w=0.9, length=5), "p_a \\+ p_b"), (dict(p_a=0.7, p_b=0.1, w=1.0, length=5), "w "),
    (dict(p_a=0.7, p_b=0.1, w=0.0, length=5), "w "), (dict(p_a=0.7, p_b=0.1, w=0.9, length=0), "length"),
    (dict(p_a=float("nan"), p_b=0.1, w=0.9, length=3), "p_a"),
])
def test_radius_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        certified_radius(**kw)


# ---- budget ---------------------------------------------------------------------------------

def test_budget_known_values_and_monte_carlo():
    r = fuzz_rates(20, 4, w_high=0.9, w_mid=0.3)
    assert r.w_out == pytest.approx(0.15) and r.w_in == 0.9 and not r.short_text
    assert r.w_in * 4 + r.w_out * 16 == pytest.approx(6.0)
    toks = [f"w{i}" for i in range(20)]
    rng = np.random.default_rng(0)
    from iclr25.frs.randomize import randomize_variants, token_probabilities
    probs, _ = token_probabilities(20, (3, 7), 0.9, 0.3)
    _, masked = randomize_variants(toks, probs, 40_000, "[MASK]", rng)
    assert masked[:, 3:7].all(axis=1).mean() == pytest.approx(0.9 ** 4, abs=0.01)   # 0.6561
    assert masked.sum(axis=1).mean() == pytest.approx(6.0, abs=0.05)
    one = targeted_randomize(toks, (3, 7), rng=1)
    assert len(one) == 20


def test_short_text_rule():
    r = fuzz_rates(6, 3, w_high=0.9, w_mid=0.3)  # 2.7 > 1.8
    assert r.short_text and r.w_out == 0.0 and r.w_in == pytest.approx(0.3 * 6 / 3)
    assert r.expected_randomised == pytest.approx(0.3 * 6)


@pytest.mark.parametrize("wh,wm", [(0.3, 0.3), (0.2, 0.3), (1.0, 0.3), (0.9, 0.0), (float("nan"), 0.3)])
def test_omega_errors(wh, wm):
    with pytest.raises(ValueError, match="0 < w_mid < w_high < 1"):
        fuzz_rates(10, 2, w_high=wh, w_mid=wm)


# ---- few-votes warnings ------------------------------------------------------------------------

def test_warning_cutoffs():
    assert (min_votes_one_dissent(0.05), min_votes_one_dissent(0.01), min_votes_one_dissent(0.001)) == (8, 11, 14)
    assert (min_votes_unanimous(0.05), min_votes_unanimous(0.001)) == (5, 10)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert check_num_votes(8, 0.05) is None
    assert not w
    with pytest.warns(FewVotesWarning, match=r"N = 7 votes at alpha = 0.05.*N >= 8") as rec:
        check_num_votes(7, 0.05)
    assert not any(issubclass(r.category, NoCertificatePossibleWarning) for r in rec)
    with pytest.warns(FewVotesWarning, match="N >= 14"):
        check_num_votes(10, 0.001)
    with pytest.warns(NoCertificatePossibleWarning, match="EVERY text abstains"):
        check_num_votes(4, 0.05)
    # the cut-offs agree with the bound itself
    assert clopper_pearson_lower(6, 7, 0.05) <= 0.5 < clopper_pearson_lower(7, 8, 0.05)
    assert 0.05 ** (1 / 4) <= 0.5 < 0.05 ** (1 / 5)
