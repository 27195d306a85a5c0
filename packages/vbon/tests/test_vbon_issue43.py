"""Issue 43, item 10: the vBoN API refuses a ``log F`` that is not a log-probability and unsorted
reference rewards (before: ``vbon_reward`` took ``log F > 0``/NaN and ``empirical_log_cdf`` returned a
wrong ``0.0`` for unsorted references)."""

from __future__ import annotations

import math

import pytest
import torch

from iclr25.vbon.cdf import empirical_log_cdf
from iclr25.vbon.objective import vbon_reward


@pytest.mark.parametrize("bound", ["exact", "l1"])
@pytest.mark.parametrize("log_cdf, message", [
    ([0.5, -1.0], "log_cdf must be <= 0"),
    ([math.nan, -1.0], "log_cdf contains NaN"),
])
def test_vbon_reward_rejects_bad_log_cdf(bound, log_cdf, message):
    with pytest.raises(ValueError, match=message):
        vbon_reward(torch.tensor(log_cdf), torch.tensor([-3.0, -2.0]), n=4, bound=bound)


def test_vbon_reward_rejects_nan_log_ref():
    with pytest.raises(ValueError, match="log_ref contains NaN"):
        vbon_reward(torch.tensor([-0.5, -1.0]), torch.tensor([math.nan, -2.0]), n=4)


def test_vbon_reward_keeps_valid_edges():
    # F = 1 (log 0.0) and F = 0 (log -inf, smoothing "none") are valid; compare with the closed form
    # sum_i C(N,i) F^{N-i} p^{i-1} / (N-1) computed independently.
    n, p = 4, 0.1
    out = vbon_reward(torch.tensor([0.0, -math.inf]), torch.tensor([math.log(p), math.log(p)], dtype=torch.float64), n=n)
    want_f1 = math.log(sum(math.comb(n, i) * p ** (i - 1) for i in range(1, n + 1))) / (n - 1)
    want_f0 = math.log(p ** (n - 1)) / (n - 1)
    assert out[0].item() == pytest.approx(want_f1, rel=1e-12)
    assert out[1].item() == pytest.approx(want_f0, rel=1e-12)


def test_empirical_log_cdf_rejects_unsorted_references():
    # [3, 1, 2] unsorted: searchsorted(side="left") for r = 2.5 said 0 smaller references -> log(1/4);
    # the true count is 2 -> log(3/4).
    with pytest.raises(ValueError, match="sorted ascending"):
        empirical_log_cdf(torch.tensor([3.0, 1.0, 2.0]), torch.tensor([2.5]))
    with pytest.raises(ValueError, match="sorted ascending"):
        empirical_log_cdf(torch.tensor([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]]), torch.tensor([2.5, 2.5]))


def test_empirical_log_cdf_sorted_and_padded_still_work():
    ref = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, math.inf]])
    out = empirical_log_cdf(ref, torch.tensor([2.5, 2.5]), counts=torch.tensor([3, 2]))
    assert out.tolist() == pytest.approx([math.log(3 / 4), math.log(3 / 3)])
