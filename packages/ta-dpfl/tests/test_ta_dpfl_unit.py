"""Unit tests: solver invariants, safety errors, data errors, the DP-SGD mechanism, FedAvg."""

import warnings

import numpy as np
import pytest
import torch

from iclr25.ta_dpfl import (
    BudgetInfeasibleError,
    ClientBudget,
    epsilon_spent,
    group_budgets,
    make_schedule,
    plan_federation,
    spend_rate,
)
from iclr25.ta_dpfl.data import TabularDataError, load_tabular_csv, one_hot, split_iid, stratified_split
from iclr25.ta_dpfl.dp_sgd import MLP, get_weights, local_dp_sgd, set_weights
from iclr25.ta_dpfl.federation import fedavg_weights
from iclr25.ta_dpfl.noise import SeededRandom


def test_epsilon_monotone_in_q_steps_sigma():
    rng = np.random.default_rng(1)
    for _ in range(6):
        s, q, k = rng.uniform(0.8, 2.5), rng.uniform(0.005, 0.3), int(rng.integers(5, 200))
        e = epsilon_spent([(s, q, k)], 1e-5)
        assert epsilon_spent([(s, q * 1.1, k)], 1e-5) > e
        assert epsilon_spent([(s, q, k + 10)], 1e-5) > e
        assert epsilon_spent([(s * 1.1, q, k)], 1e-5) < e


@pytest.mark.parametrize("method", ["dpfedavg", "idp", "ta", "ta-reverse", "ta-uniform"])
def test_plan_never_exceeds_budget(method):
    eps = group_budgets([1, 2, 4], 6)
    budgets = [ClientBudget(e, 1e-5, 2000) for e in eps]
    scheds = plan_federation(budgets, method, 1.5, 12, 2, None, group_budgets([0.25, 0.5, 1.0], 6))
    for b, s in zip(budgets, scheds):
        spent = epsilon_spent(s.history(), 1e-5)
        assert spent <= b.epsilon
        target = min(eps) if method == "dpfedavg" else b.epsilon
        assert spent >= 0.99 * target


def test_infeasible_budget_names_sigma_and_rounds():
    with pytest.raises(BudgetInfeasibleError, match=r"Smallest feasible sigma: [\d.]+; largest feasible rounds: \d+"):
        plan_federation([ClientBudget(0.3, 1e-5, 2000)], "idp", 1.0, 30, 4, min_expected_batch=20)
    with pytest.raises(BudgetInfeasibleError, match="smallest epsilon"):
        make_schedule(0.05, 1e-5, 1.0, 30, 4)


@pytest.mark.filterwarnings("ignore:eps=50 is loose")
def test_unspendable_saving_caps_q_at_one_and_underspends_like_a_uniform_client():
    """Saved budget that even q=1 cannot spend: the client takes part at q=1 and under-spends (safe),
    warned — as a uniform client whose q_uni reaches 1 (no longer an exclusion)."""
    with pytest.warns(UserWarning, match=r"capped at 1 and the client under-spends \(eps [\d.]+ of 50;"):
        s = make_schedule(50.0, 1e-5, 0.8, 4, 1, transition=3, rho=0.01)
    assert s.rates[-1] == 1.0 and s.rates[0] == pytest.approx(0.01 * s.q_uniform)
    spent = epsilon_spent(s.history(), 1e-5)
    assert spent < 50.0 and spent == pytest.approx(float(s.epsilon_per_round()[-1]))
    with pytest.raises(BudgetInfeasibleError, match="cannot be spent"):  # the public solver still says so
        spend_rate(50.0, 1e-5, 0.8, 0.01 * s.q_uniform, 3, 1)


def test_delta_too_large_warns():
    with pytest.warns(UserWarning, match="1/m_n"):
        ClientBudget(1.0, 0.01, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ClientBudget(1.0, 1e-5, 200)


def test_bad_arguments():
    with pytest.raises(ValueError, match="rho"):
        make_schedule(1.0, 1e-5, 1.0, 10, 1, rho=0.0)
    with pytest.raises(ValueError, match="transition"):
        make_schedule(1.0, 1e-5, 1.0, 10, 1, transition=10, rho=0.5)
    with pytest.raises(ValueError, match="unknown method"):
        plan_federation([ClientBudget(1.0)], "nope", 1.0, 10, 1)


def test_csv_errors(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("age, job, income\n30, x, >50K\nthirty, y, <=50K\n")
    with pytest.raises(TabularDataError, match=r"line 3, column 'age': value 'thirty' is not numeric"):
        load_tabular_csv(p, "income", ["age"], ["job"])
    with pytest.raises(TabularDataError, match="label column 'label' not found"):
        load_tabular_csv(p, "label", ["age"], ["job"])
    p.write_text("age, job, income\n30, x\n")
    with pytest.raises(TabularDataError, match="line 2: 2 fields"):
        load_tabular_csv(p, "income", ["age"], ["job"])


def test_split_and_one_hot():
    y = np.array([0] * 80 + [1] * 20)
    tr, te = stratified_split(y, 0.2, np.random.default_rng(0))
    assert len(te) == 20 and y[te].sum() == 4 and len(np.intersect1d(tr, te)) == 0
    parts = split_iid(100, 3, np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(100))
    oh = one_hot(np.array(["a", "b", "?"]), np.array(["b", "z", "?"]))
    np.testing.assert_array_equal(oh, [[0, 0, 1], [0, 0, 0], [1, 0, 0]])  # unseen -> zeros; '?' own category


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_noise_std_matches_sigma_c_over_qm(mode):
    """Zero data gradients (x = 0, no bias): the update is pure noise with std lr·σC/(q m)."""
    d, m, q, sigma, c, lr = 5000, 100, 0.5, 1.5, 1.0, 1.0
    model = torch.nn.Linear(d, 2, bias=False)
    torch.nn.init.zeros_(model.weight)
    local_dp_sgd(model, torch.zeros(m, d), torch.zeros(m, dtype=torch.long), sample_rate=q, noise_multiplier=sigma,
                 max_grad_norm=c, local_steps=1, lr=lr, noise_source=SeededRandom(0),
                 grad_sample_mode=mode)
    std = float(model.weight.detach().std())
    assert std == pytest.approx(lr * sigma * c / (q * m), rel=0.02)


def test_clipping_bounds_update_and_modes_agree():
    """Noise 0, q = 1: update = lr · mean of per-sample grads clipped to C; ghost == hooks."""
    g = torch.Generator().manual_seed(0)
    x, y = 50 * torch.randn(40, 6, generator=g), torch.randint(0, 2, (40,), generator=g)
    outs = {}
    for mode in ("ghost", "hooks"):
        torch.manual_seed(0)
        model = MLP(6, 2, 4)
        w0 = torch.cat([p.detach().flatten() for p in model.parameters()])
        local_dp_sgd(model, x, y, sample_rate=1.0, noise_multiplier=0.0, max_grad_norm=0.1, local_steps=1, lr=1.0,
                     grad_sample_mode=mode)
        w1 = torch.cat([p.detach().flatten() for p in model.parameters()])
        outs[mode] = w1 - w0
        assert float((w1 - w0).norm()) <= 0.1 + 1e-6  # mean of vectors of norm <= C
    # independent computation: per-sample grads by a python loop, clipped, averaged
    torch.manual_seed(0)
    ref = MLP(6, 2, 4)
    total = [torch.zeros_like(p) for p in ref.parameters()]
    for i in range(40):
        ref.zero_grad()
        torch.nn.functional.cross_entropy(ref(x[i : i + 1]), y[i : i + 1], reduction="sum").backward()
        gi = [p.grad.clone() for p in ref.parameters()]
        n = torch.sqrt(sum((v**2).sum() for v in gi))
        for t, v in zip(total, gi):
            t += v * min(1.0, 0.1 / float(n))
    expected = -torch.cat([t.flatten() for t in total]) / 40
    torch.testing.assert_close(outs["hooks"], expected, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(outs["ghost"], expected, atol=1e-6, rtol=1e-4)


def test_empty_batches_still_add_noise():
    model = MLP(3, 2, 0)
    w0 = get_weights(model)
    out = local_dp_sgd(model, torch.randn(5, 3), torch.zeros(5, dtype=torch.long), sample_rate=1e-6,
                       noise_multiplier=1.0, max_grad_norm=1.0, local_steps=2, lr=1e-6)
    assert out["empty_batches"] == 2
    assert any(np.abs(a - b).max() > 0 for a, b in zip(get_weights(model), w0))


def test_fedavg_weights_and_identical_models():
    w = fedavg_weights([100, 300])
    np.testing.assert_allclose(w, [0.25, 0.75])
    assert w.sum() == pytest.approx(1.0)
    model = MLP(4, 2, 3)
    ws = get_weights(model)
    avg = [sum(wi * a for wi, a in zip(w, (arr, arr))) for arr in ws]
    set_weights(model, avg)
    for a, b in zip(get_weights(model), ws):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(ValueError, match="positive"):
        fedavg_weights([0, 3])
    with pytest.raises(ValueError, match="shape"):
        set_weights(model, [np.zeros((1, 1))] * len(ws))


def test_assign_saving_factors_refuses_non_finite_budgets():
    from iclr25.ta_dpfl.schedule import assign_saving_factors

    assert assign_saving_factors([4, 1, 2], [0.5, 1.0, 0.25]) == [1.0, 0.25, 0.5]
    for bad in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(ValueError, match="finite and > 0"):
            assign_saving_factors([4, bad, 2], [0.5, 1.0, 0.25])


def test_csv_path_with_a_built_in_dataset_is_refused(tmp_path):
    from iclr25.ta_dpfl.data import load_federated

    with pytest.raises(ValueError, match="only for datasets 'adult' and 'csv'"):
        load_federated("digits", 3, 0, str(tmp_path / "adult.csv"), 0.1)
    from iclr25.ta_dpfl.config import FederationSpec

    with pytest.raises(ValueError, match="only for datasets 'adult' and 'csv'"):  # refused before any training starts
        FederationSpec(method="ta", epsilons=[1.0, 2.0], rhos=[0.5, 1.0], dataset="digits",
                       csv_path=str(tmp_path / "adult.csv"))
