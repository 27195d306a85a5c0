"""Known-answer tests (spec §"Known-answer tests"), each against an independent computation."""

import math

import pytest
import torch
from torch import nn

from iclr25.lotos import (
    Ensemble,
    SpectralClip,
    conv_singular_values_fft,
    explicit_matrix,
    layer_top_singular,
    linear_operator,
    lotos_penalty,
    lotos_similarity,
    power_qr,
    transfer_rate,
)
from iclr25.lotos.models import BasicBlockNoBN

G = lambda s=0: torch.Generator().manual_seed(s)  # noqa: E731


def _ones_conv():
    c = nn.Conv2d(1, 1, 3, padding=1, bias=False).double()
    nn.init.ones_(c.weight)
    return c


# 1. zero-padded all-ones 3x3 conv ------------------------------------------------------------
def test_kat1_all_ones_conv_8x8_powerqr_vs_closed_form_and_svd():
    conv = _ones_conv()
    V, s = layer_top_singular(conv, (1, 8, 8), k=3, n_iters=200, v0=torch.randn(3, 1, 8, 8, generator=G(),
                                                                                  dtype=torch.float64))
    top = (1 + 2 * math.cos(math.pi / 9)) ** 2
    nxt = (1 + 2 * math.cos(math.pi / 9)) * (1 + 2 * math.cos(2 * math.pi / 9))
    assert top == pytest.approx(8.290859, abs=1e-6)
    assert float(s[0]) == pytest.approx(top, abs=1e-5)
    assert float(s[1]) == pytest.approx(nxt, abs=1e-4) and float(s[2]) == pytest.approx(nxt, abs=1e-4)
    sv = torch.linalg.svdvals(explicit_matrix(linear_operator(conv), (1, 8, 8), dtype=torch.float64))
    assert sv.shape == (64,)
    assert float(sv[0]) == pytest.approx(top, abs=1e-9)
    assert float(sv[1]) == pytest.approx(7.290859, abs=1e-6)


def test_kat1_all_ones_conv_32x32():
    # start from a positive vector (Perron-Frobenius: the top singular vector is positive)
    v0 = 1 + 0.1 * torch.rand(1, 1, 32, 32, generator=G(), dtype=torch.float64)
    _, s = layer_top_singular(_ones_conv(), (1, 32, 32), k=1, n_iters=300, v0=v0)
    assert float(s[0]) == pytest.approx((1 + 2 * math.cos(math.pi / 33)) ** 2, abs=2e-3)
    assert (1 + 2 * math.cos(math.pi / 33)) ** 2 == pytest.approx(8.945745, abs=1e-6)


# 2. circular padding: FFT spectrum == explicit matrix ----------------------------------------
def test_kat2_fft_equals_explicit_matrix_and_powerqr_top():
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular", bias=True).double()
    M = explicit_matrix(linear_operator(conv), (2, 8, 8), dtype=torch.float64)
    sv = torch.linalg.svdvals(M)
    fft = conv_singular_values_fft(conv.weight, 8)
    assert fft.shape == (128,) and sv.shape == (128,)
    assert torch.allclose(fft, sv, atol=1e-5)
    _, s = layer_top_singular(conv, (2, 8, 8), k=1, n_iters=300, generator=G())
    assert float(s[0]) == pytest.approx(float(fft[0]), rel=1e-4)


# 3. dense layer -------------------------------------------------------------------------------
def test_kat3_dense_powerqr_matches_svd_orthonormal():
    W = torch.randn(7, 5, generator=G(1), dtype=torch.float64)
    V, s = power_qr(lambda x: x @ W.T, torch.randn(3, 5, generator=G(2), dtype=torch.float64), 200)
    assert torch.allclose(s, torch.linalg.svdvals(W)[:3], atol=1e-4)
    assert torch.allclose(V @ V.T, torch.eye(3, dtype=torch.float64), atol=1e-10)
    # sigma = sqrt(|R_ii| - 1): one more step from converged V gives R = diag(1 + sigma^2)
    Y = V + (V @ W.T) @ W
    R = torch.linalg.qr(Y.T).R
    assert torch.allclose((R.diagonal().abs() - 1).sqrt(), s, atol=1e-6)


# 4. toy penalty -------------------------------------------------------------------------------
def _diag_op(*d):
    D = torch.diag(torch.tensor(d))
    return lambda x: x @ D.T


e1, e2 = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])


@pytest.mark.parametrize("mal,expect", [(0.8, 0.4), (1.0, 0.0), (1.5, 0.0)])
def test_kat4_toy_penalty_values(mal, expect):
    assert float(lotos_similarity(_diag_op(3.0, 1.0), _diag_op(1.0, 2.0), e1, e2, mal=mal)) == pytest.approx(expect)


def test_kat4_identical_layers():
    assert float(lotos_similarity(_diag_op(3.0, 1.0), _diag_op(3.0, 1.0), e1, e1, mal=0.8)) == pytest.approx(4.4)


def _diag_linear(d, seed):
    lin = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.diag(torch.tensor(d)))
    w = SpectralClip(lin, clip=None, seed=seed)
    w.init_vectors((2,))
    return w


@pytest.mark.parametrize("b_diag,a_gain", [((1.0, 2.0), 1.0), ((1.0, 0.5), 3.0)])
def test_kat4_penalty_and_gradient_when_gain_above_mal(b_diag, a_gain):
    A = nn.Sequential(_diag_linear((3.0, 1.0), 0))
    B = nn.Sequential(_diag_linear(b_diag, 1))
    p = lotos_penalty([A, B], mal=0.8, lam=1.0, layers="all")
    p.backward()
    gB = B[0].module.weight.grad
    # ||B v_A|| = ||B e1|| = 1 > 0.8 in both cases; the B-part of the gradient acts on column e1.
    assert gB is not None and gB[:, 0].abs().sum() > 0
    # A's gain along v_B: ||A e2|| = 1 > mal when v_B = e2 (B = diag(1,2)); v_B = e1 when B = diag(1, .5)
    gA = A[0].module.weight.grad
    # gain of A along v_B: ||A e2|| = 1 when B = diag(1, 2); ||A e1|| = 3 when B = diag(1, .5) (v_B = e1)
    assert float(p.detach()) == pytest.approx(max(0, a_gain - 0.8) + max(0, 1.0 - 0.8), abs=1e-5)
    assert gA.abs().sum() > 0
    assert A[0].V.grad is None and B[0].V.grad is None  # no gradient into the singular vectors


def test_kat4_no_gradient_below_mal():
    A = nn.Sequential(_diag_linear((3.0, 0.5), 0))
    B = nn.Sequential(_diag_linear((0.5, 2.0), 1))  # v_A = e1, v_B = e2; ||A e2|| = .5, ||B e1|| = .5
    p = lotos_penalty([A, B], mal=0.8, lam=1.0, layers="all")
    assert float(p.detach()) == 0.0
    p.backward()
    assert float(A[0].module.weight.grad.abs().sum()) == 0.0
    assert float(B[0].module.weight.grad.abs().sum()) == 0.0


# 5. clipping ----------------------------------------------------------------------------------
def _dense_with_spectrum(svals, shape=(20, 10), seed=0):
    g = G(seed)
    U = torch.linalg.qr(torch.randn(shape[0], shape[0], generator=g, dtype=torch.float64)).Q[:, : len(svals)]
    Vt = torch.linalg.qr(torch.randn(shape[1], shape[1], generator=g, dtype=torch.float64)).Q[:, : len(svals)].T
    return U @ torch.diag(torch.tensor(svals, dtype=torch.float64)) @ Vt


SPEC = [5.0, 3.0, 2.0, 1.0, 0.9, 0.8, 0.5, 0.4, 0.2, 0.1]


@pytest.mark.parametrize("C", [1.0, 2.5, 4.0])
def test_kat5_exact_clip_gives_max_C_sigma2(C):
    lin = nn.Linear(10, 20, bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(_dense_with_spectrum(SPEC))
    w = SpectralClip(lin, clip=C)
    w.exact_clip_()
    s = torch.linalg.svdvals(lin.weight.detach())
    assert float(s[0]) == pytest.approx(max(C, 3.0), abs=1e-9)


def test_kat5_one_fastclip_event_dense():
    lin = nn.Linear(10, 20, bias=True).double()
    with torch.no_grad():
        lin.weight.copy_(_dense_with_spectrum(SPEC))
    w = SpectralClip(lin, clip=1.0, step_size=0.35, opt_steps=1, refresh_iters=10)
    w.init_vectors((10,), n_iters=300)  # exact top vector
    assert float(w.sigma[0]) == pytest.approx(5.0, abs=1e-8)
    assert w.clip_now()
    s = torch.linalg.svdvals(lin.weight.detach())
    expect = torch.tensor(sorted([3.0, 0.3 * 5 + 0.7 * 1.0, *SPEC[2:]], reverse=True), dtype=torch.float64)
    assert torch.allclose(s[:10], expect, atol=1e-6)


def test_kat5_fastclip_conv_moves_sigma_part_way():
    torch.manual_seed(3)
    conv = nn.Conv2d(2, 3, 3, padding=1)
    w = SpectralClip(conv, clip=None, init_iters=150)
    w.init_vectors((2, 8, 8))
    s0 = float(w.sigma[0])
    w.clip = s0 / 2
    assert w.clip_now()
    _, s1 = layer_top_singular(conv, (2, 8, 8), k=1, n_iters=150, generator=G())
    assert s0 / 2 < float(s1[0]) < s0  # one event moves sigma_1 towards C, not all the way


# 6. ensemble of identical members ---------------------------------------------------------------
def test_kat6_identical_members_equal_log_softmax():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Flatten(), nn.Linear(12, 5))
    x = torch.randn(4, 3, 2, 2)
    out = Ensemble([m, m, m])(x)
    assert torch.allclose(out, torch.log_softmax(m(x), -1), atol=1e-6)


# 7. transferability on a hand-built case ---------------------------------------------------------
def test_kat7_hand_built_transfer_rate():
    B = lambda idx: torch.tensor([i in idx for i in range(5)])  # noqa: E731
    rate, n = transfer_rate(B({0, 1, 2, 3}), B({0, 1, 2}), B({0, 1, 3, 4}), B({0}))
    assert n == 2 and rate == 0.5


# 8. downsampling residual block with /2 merge is 1-Lipschitz when both paths are ---------------------
def test_kat8_downsampling_block_lipschitz_le_1():
    torch.manual_seed(0)
    blk = BasicBlockNoBN(3, 6, stride=2).double()
    shapes = {blk.conv1: (3, 8, 8), blk.conv2: (6, 4, 4), blk.shortcut: (3, 8, 8)}
    for layer, shp in shapes.items():
        _, s = layer_top_singular(layer, shp, k=1, n_iters=150, generator=G())
        with torch.no_grad():
            layer.weight.div_(s[0])
    x = torch.randn(256, 3, 8, 8, dtype=torch.float64)
    y = x + 0.1 * torch.randn_like(x)
    ratio = (blk(x) - blk(y)).flatten(1).norm(dim=1) / (x - y).flatten(1).norm(dim=1)
    assert float(ratio.max()) <= 1.0 + 1e-6
    assert float(ratio.max()) > 0.05  # not trivially zero
