"""Why CREAM-avg is not an accuracy claim in this toy: near h = 0 the soft-label loss's gradient is (2C − 1)
times DPO's, a set-level constant that Adam normalises away, so a short stage of CREAM-avg takes SRLM's steps;
only a stage long enough for the margins to grow separates them (h* = logit(C))."""

from __future__ import annotations

import math

import torch

from iclr25.cream.losses import cream_dpo_loss


def _stage(c: float, steps: int, lr: float, seed: int = 0, free: bool = False) -> tuple[torch.Tensor, float]:
    """AdamW on a linear policy (log-probs ``X θ``); ``free``: one parameter per pair, so every margin can reach
    its optimum."""
    g = torch.Generator().manual_seed(seed)
    n, d = 32, 8
    if free:
        d = n
        xc, xr = torch.eye(n), torch.zeros(n, n)
    else:
        xc, xr = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    theta0 = torch.randn(d, generator=g) * 0.1
    theta = torch.nn.Parameter(theta0.clone())
    opt = torch.optim.AdamW([theta], lr=lr, weight_decay=0.0)
    ref_c, ref_r = (xc @ theta0).detach(), (xr @ theta0).detach()
    h = torch.zeros(n)
    for _ in range(steps):
        loss, h = cream_dpo_loss(xc @ theta, xr @ theta, ref_c, ref_r, c=c, beta=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return theta.detach() - theta0, float(h.mean())


def test_cream_avg_equals_srlm_in_a_short_adam_stage():
    c = 0.8
    d_avg, h_avg = _stage(c, steps=6, lr=5e-5)
    d_srlm, h_srlm = _stage(1.0, steps=6, lr=5e-5)
    # the same steps up to Adam's eps and the tiny drift of h away from 0: a set-level C cannot matter here
    assert torch.allclose(d_avg, d_srlm, rtol=2e-2, atol=1e-9)
    assert abs(h_avg - h_srlm) <= 0.02 * abs(h_srlm) + 1e-9
    # the gradient ratio at h = 0 is exactly 2C − 1
    hc = torch.zeros(4, requires_grad=True)
    zero = torch.zeros(4)
    g_avg = torch.autograd.grad(cream_dpo_loss(hc * 10, zero, zero, zero, c=c, beta=0.1)[0], hc)[0]
    g_dpo = torch.autograd.grad(cream_dpo_loss(hc * 10, zero, zero, zero, c=1.0, beta=0.1)[0], hc)[0]
    assert torch.allclose(g_avg, (2 * c - 1) * g_dpo)


def test_a_long_stage_separates_them_at_logit_c():
    c = 0.8
    _, h_avg = _stage(c, steps=600, lr=1e-1, free=True)
    _, h_srlm = _stage(1.0, steps=600, lr=1e-1, free=True)
    assert abs(h_avg - math.log(c / (1 - c))) < 0.5     # CREAM's margin settles near logit(C) = 1.386
    assert h_srlm > h_avg + 1.0                         # DPO's keeps growing
