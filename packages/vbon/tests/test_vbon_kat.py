"""Known-answer tests: the spec's §6 values, each compared with an independent computation."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from iclr25.vbon import (
    bon_distribution,
    bon_distribution_sum_form,
    bon_kl,
    bon_win_rate,
    empirical_log_cdf,
    exact_win_rate,
    kl_divergence,
    l1_optimum,
    n_from_beta,
    optimize_tabular,
    rlhf_optimum,
    sample_bon_discrete,
    strict_cdf,
    total_variation,
    vbon_reward,
)

KAT = json.loads((Path(__file__).parent / "data" / "kat.json").read_text())
I1 = KAT["instance1"]


def test_instance1_cdf_and_bon():
    assert strict_cdf(I1["ref"], I1["rewards"]).tolist() == pytest.approx(I1["F"], abs=1e-12)
    assert bon_distribution(I1["ref"], I1["rewards"], 2).tolist() == pytest.approx(I1["bon_n2"], abs=1e-9)
    assert bon_distribution(I1["ref"], I1["rewards"], 4).tolist() == pytest.approx(I1["bon_n4"], abs=1e-9)
    for n in (1, 2, 3, 4, 7):  # closed form (Eq. 3) == sum form (Eq. 2)
        a = bon_distribution(I1["ref"], I1["rewards"], n)
        b = bon_distribution_sum_form(I1["ref"], I1["rewards"], n)
        assert torch.allclose(a, b, atol=1e-12)


def test_instance1_monte_carlo_histogram():
    g = torch.Generator().manual_seed(0)
    idx = sample_bon_discrete(I1["ref"], I1["rewards"], 2, 400_000, generator=g)
    hist = torch.bincount(idx, minlength=3).double() / idx.numel()
    exact = bon_distribution(I1["ref"], I1["rewards"], 2)
    assert (hist - exact).abs().max() < I1["mc_tol"]


def test_n1_is_reference_and_pmf_sums_to_one():
    g = torch.Generator().manual_seed(1)
    for k in (5, 50, 500):
        e = -torch.log(torch.rand(k, generator=g, dtype=torch.float64))
        p, r = e / e.sum(), torch.randn(k, generator=g, dtype=torch.float64)
        assert torch.allclose(bon_distribution(p, r, 1), p, atol=1e-15)
        for n in (2, 5, 16):
            assert float(bon_distribution(p, r, n).sum()) == pytest.approx(1.0, abs=1e-12)


def test_l1_optimum_and_its_kl():
    opt = l1_optimum(I1["ref"], I1["rewards"], 2)
    assert opt.tolist() == pytest.approx(KAT["l1_optimum_n2"], abs=1e-6)
    kl = float(kl_divergence(opt, bon_distribution(I1["ref"], I1["rewards"], 2)))
    assert kl == pytest.approx(KAT["kl_l1opt_bon_n2"], abs=1e-6)


def test_lower_bound_below_exact_objective():
    """J_L1 <= J_exact = -KL(pi || pi_BoN) for arbitrary policies (the bound keeps only i = 1)."""
    g = torch.Generator().manual_seed(2)
    k, n = 30, 6
    e = -torch.log(torch.rand(k, generator=g, dtype=torch.float64))
    p, r = e / e.sum(), torch.randn(k, generator=g, dtype=torch.float64)
    F = strict_cdf(p, r)
    bon = bon_distribution(p, r, n)
    for _ in range(20):
        q = torch.softmax(torch.randn(k, generator=g, dtype=torch.float64), 0)
        exact = -float(kl_divergence(q, bon))
        bound = math.log(n) + (n - 1) * float((q * F.clamp_min(1e-300).log()).sum()) - float(kl_divergence(q, p))
        assert bound <= exact + 1e-12


def test_smoothed_empirical_cdf():
    e = KAT["ecdf"]
    got = empirical_log_cdf(torch.tensor(e["refs"], dtype=torch.float64), torch.tensor(e["r"])).exp()
    assert got.tolist() == pytest.approx(e["F"], abs=1e-12)
    # independent computation: numpy counting with strict inequality
    refs = np.array(e["refs"])
    ind = [(1 + (refs < x).sum()) / (len(refs) + 1) for x in e["r"]]
    assert got.numpy() == pytest.approx(np.array(ind))


def test_exact_reward_code_scaling_and_l1():
    v = KAT["exact_reward_code"]
    lf = torch.tensor([math.log(v["F"])], dtype=torch.float64)
    lr = torch.tensor([math.log(v["pref"])], dtype=torch.float64)
    assert float(vbon_reward(lf, lr, v["n"], "exact", "code")) == pytest.approx(v["value"], abs=1e-6)
    assert float(vbon_reward(lf, lr, v["n"], "l1")) == pytest.approx(v["l1"], abs=1e-6)
    # paper scaling divides by N-1 = 1
    assert float(vbon_reward(lf, lr, 2, "exact", "paper")) == pytest.approx(math.log(1.3), abs=1e-9)


@pytest.mark.parametrize("transform", [lambda r: 3 * r + 1, torch.exp])
def test_reward_invariance_to_monotone_transforms(transform):
    g = torch.Generator().manual_seed(3)
    refs = torch.sort(torch.randn(20, 50, generator=g, dtype=torch.float64), 1).values
    r = torch.randn(20, generator=g, dtype=torch.float64)
    lr = -torch.rand(20, generator=g, dtype=torch.float64) * 30
    a = vbon_reward(empirical_log_cdf(refs, r), lr, 4)
    b = vbon_reward(empirical_log_cdf(transform(refs), transform(r)), lr, 4)
    assert torch.equal(a, b)


def test_uniform_kl_and_win_rate():
    u = KAT["uniform_k1000"]
    p, r = torch.full((1000,), 1e-3, dtype=torch.float64), torch.arange(1000.0)
    for n, kl, lim, win in zip(u["n"], u["kl"], u["limit"], u["win"]):
        bon = bon_distribution(p, r, n)
        assert float(kl_divergence(bon, p)) == pytest.approx(kl, abs=2e-6)
        assert bon_kl(n) == pytest.approx(lim, abs=2e-6)
        assert exact_win_rate(bon, p, r) == pytest.approx(win, abs=2e-6)
        assert bon_win_rate(n) == pytest.approx(win, abs=2e-6)
    u10 = KAT["uniform_k10"]
    p10 = torch.full((10,), 0.1, dtype=torch.float64)
    for n, kl in zip(u10["n"], u10["kl"]):
        assert float(kl_divergence(bon_distribution(p10, torch.arange(10.0), n), p10)) == pytest.approx(kl, abs=2e-6)


def test_n_from_beta():
    v = KAT["n_from_beta"]
    assert [n_from_beta(b) for b in v["beta"]] == v["n"]


def test_tabular_optimisation_reaches_closed_forms():
    g = torch.Generator().manual_seed(4)
    k, n, beta = 50, 4, 0.5
    e = -torch.log(torch.rand(k, generator=g, dtype=torch.float64))
    p, r = e / e.sum(), torch.randn(k, generator=g, dtype=torch.float64)
    F = strict_cdf(p, r)
    exact_rew = vbon_reward(torch.where(F > 0, F.log(), torch.full_like(F, -math.inf)), p.log(), n, "exact", "none")
    pi = optimize_tabular(p, exact_rew, 1.0)
    assert total_variation(pi, bon_distribution(p, r, n)) < 1e-3
    pi = optimize_tabular(p, torch.where(F > 0, F.log(), torch.full_like(F, -math.inf)), 1.0 / (n - 1))
    assert total_variation(pi, l1_optimum(p, r, n)) < 1e-3
    pi = optimize_tabular(p, r, beta)
    assert total_variation(pi, rlhf_optimum(p, r, beta)) < 1e-3
