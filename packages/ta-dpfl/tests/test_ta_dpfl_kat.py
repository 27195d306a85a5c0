"""Known-answer tests: the spec's rate table, closed forms, and Opacus' own accountant."""

import numpy as np
import pytest
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis.rdp import compute_rdp

from iclr25.ta_dpfl import (
    assign_saving_factors,
    epsilon_per_round,
    epsilon_spent,
    make_schedule,
    rdp_per_step,
    uniform_rate,
)


def sig4(x: float) -> str:
    return f"{x:.4g}"


# spec table: eps -> (q_uni, q_sav (rho=0.5), q_spe (tau=15)); sigma 1.5, C 1, T 30, K 4, delta 1e-5
TABLE = {1.0: (0.02536, 0.01268, 0.03185), 2.0: (0.04904, 0.02452, 0.06265), 4.0: (0.09375, 0.04687, 0.1214)}


@pytest.mark.parametrize("eps", sorted(TABLE))
def test_spec_rate_table_4_significant_digits(eps):
    s = make_schedule(eps, 1e-5, 1.5, rounds=30, local_steps=4, transition=15, rho=0.5)
    q_uni, q_sav, q_spe = TABLE[eps]
    assert sig4(s.q_uniform) == sig4(q_uni)
    assert abs(s.q_saving - q_sav) / q_sav < 1e-3  # 4 s.f. of a value rounded in the spec (0.046875)
    assert sig4(s.q_spending) == sig4(q_spe)
    # exactly at (never above) the budget
    eps_T = s.epsilon_per_round()[-1]
    assert eps_T <= eps and eps_T > eps * (1 - 1e-6)


def test_schedule_solver_sigma1_T50():
    s = make_schedule(2.0, 1e-5, 1.0, rounds=50, local_steps=5, transition=25, rho=0.5)
    assert s.q_uniform == pytest.approx(0.016239, abs=1e-6)
    assert s.q_saving == pytest.approx(0.008119, abs=1e-6)
    assert s.q_spending == pytest.approx(0.019947, abs=1e-6)
    assert abs(epsilon_spent(s.history(), 1e-5) - 2.0) < 1e-3
    s1 = make_schedule(1.0, 1e-5, 1.0, rounds=50, local_steps=5, transition=25, rho=0.5)
    assert s1.q_uniform == pytest.approx(0.005174, abs=1e-6)
    assert s1.q_spending == pytest.approx(0.005878, abs=1e-6)


def test_rdp_full_batch_closed_form():
    orders = [2.0, 3.0, 7.5, 32.0]
    sigma = 2.0
    np.testing.assert_allclose(rdp_per_step(sigma, 1.0, orders), np.array(orders) / (2 * sigma**2), rtol=1e-12)
    np.testing.assert_allclose(compute_rdp(q=1.0, noise_multiplier=2.0, steps=1, orders=[2, 3]), [0.25, 0.375])


def test_opacus_accountant_values():
    assert epsilon_spent([(1.1, 0.01, 1000)], 1e-5) == pytest.approx(1.71177, abs=1e-5)
    assert epsilon_spent([(1.0, 0.005, 500), (1.0, 0.02, 500)], 1e-5) == pytest.approx(3.21126, abs=1e-5)


def test_our_accountant_equals_opacus_rdp_accountant_on_random_histories():
    rng = np.random.default_rng(0)
    for _ in range(5):
        hist = [(float(rng.uniform(0.7, 3)), float(rng.uniform(0.001, 0.3)), int(rng.integers(1, 300)))
                for _ in range(int(rng.integers(1, 5)))]
        acc = RDPAccountant()
        for s, q, k in hist:
            for _ in range(k):
                acc.step(noise_multiplier=s, sample_rate=q)
        delta = float(10 ** rng.uniform(-7, -4))
        assert epsilon_spent(hist, delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-12)


def test_accountant_choice_rdp_not_gdp_prv():
    from opacus.accountants import GaussianAccountant, PRVAccountant

    hist = [(3.0, 0.2, 50)]
    ours = epsilon_spent(hist, 1 / 48000)
    assert ours == pytest.approx(2.16904, abs=1e-4)
    for cls in (GaussianAccountant, PRVAccountant):
        a = cls()
        a.history = list(hist)
        assert abs(a.get_epsilon(1 / 48000) - ours) > 0.1


def test_spent_epsilon_non_decreasing_per_round_and_rdp_increments():
    s = make_schedule(1.0, 1e-5, 1.5, rounds=30, local_steps=4, transition=15, rho=0.25)
    e = s.epsilon_per_round()
    assert np.all(np.diff(e) >= 0)
    inc = np.stack([rdp_per_step(s.sigma, q) * s.local_steps for q in s.rates])
    assert np.all(np.diff(inc, axis=0) >= -1e-15)  # per-round RDP spending non-decreasing at every order
    np.testing.assert_allclose(e, epsilon_per_round(s.rates, 1.5, 4, 1e-5))


def test_rho_one_is_uniform_and_ordering():
    s = make_schedule(2.0, 1e-5, 1.5, rounds=30, local_steps=4, rho=1.0)
    assert np.all(s.rates == s.q_uniform)
    assert s.q_uniform == uniform_rate(2.0, 1e-5, 1.5, 120)
    t = make_schedule(2.0, 1e-5, 1.5, rounds=30, local_steps=4, rho=0.3)
    assert t.q_saving <= t.q_uniform <= t.q_spending


def test_permutation_rule():
    assert assign_saving_factors([4, 1, 2], [0.5, 1.0, 0.25]) == [1.0, 0.25, 0.5]
    assert assign_saving_factors([1, 1, 4], [1.0, 0.25, 0.5]) == [0.25, 0.5, 1.0]  # ties keep input order
    assert assign_saving_factors([4, 1, 2], [0.5, 1.0, 0.25], reverse=True) == [0.25, 1.0, 0.5]


def test_opacus_booking_pitfall_we_book_exact_rate():
    import torch
    from opacus.data_loader import DPDataLoader
    from torch.utils.data import TensorDataset

    from iclr25.ta_dpfl.dp_sgd import MLP, local_dp_sgd

    ds = TensorDataset(torch.zeros(1000, 3), torch.zeros(1000, dtype=torch.long))
    assert len(DPDataLoader(ds, sample_rate=0.016239)) == 61  # Opacus' make_private would book 1/61
    acc = RDPAccountant()
    local_dp_sgd(MLP(3, 2, 0), torch.randn(1000, 3), torch.randint(0, 2, (1000,)), sample_rate=0.016239,
                 noise_multiplier=1.0, max_grad_norm=1.0, local_steps=3, lr=0.1, accountant=acc)
    assert acc.history == [(1.0, 0.016239, 3)]
