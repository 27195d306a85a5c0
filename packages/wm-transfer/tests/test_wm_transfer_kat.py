"""Known-answer tests (spec list 1-7), each against an independent computation."""

import math

import numpy as np
import pytest
import torch

from iclr25.wm_transfer.attack import project_linf, surrogate_gradient
from iclr25.wm_transfer.detect import (
    bit_accuracy,
    decode_bits,
    double_tail_fpr,
    double_tail_threshold,
    inverse_decode_targets,
    is_detected,
)
from iclr25.wm_transfer.models import HiddenConfig, HiddenDecoder
from iclr25.wm_transfer.noise import _dct_matrix
from iclr25.wm_transfer.quality import image_quality, psnr, ssim, to_unit
from iclr25.wm_transfer.toy import linear_toy


@pytest.mark.parametrize("n,hi,lo,fpr", [(20, 19, 1, 4.005e-05), (30, 26, 4, 5.948e-05), (48, 38, 10, 6.170e-05),
                                         (64, 48, 16, 7.733e-05)])
def test_double_tail_threshold(n, hi, lo, fpr):
    assert double_tail_threshold(n, 1e-4) == (hi, lo)
    assert double_tail_fpr(n, hi, lo) == pytest.approx(fpr, rel=2e-4)
    # one step less strict exceeds 1e-4 (these are the smallest symmetric thresholds)
    assert double_tail_fpr(n, hi - 1, lo + 1) > 1e-4


def test_double_tail_fpr_by_enumeration():
    # independent: enumerate all 2^20 fair-coin bit vectors, count matches with a fixed message
    v = np.arange(2 ** 20, dtype=np.uint32)
    w = 0b10110011100011110000
    x = v ^ np.uint32(w)
    m = 20 - np.unpackbits(x.view(np.uint8)).reshape(-1, 32).sum(1)
    assert ((m >= 19) | (m <= 1)).mean() == pytest.approx(double_tail_fpr(20, 19, 1), abs=1e-12)
    assert double_tail_fpr(20, 19, 1) == pytest.approx(42 / 2 ** 20, abs=1e-15)


def test_exact_decode_and_inverse_target():
    w = torch.tensor([[1.0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 1]])
    assert float(bit_accuracy(w.clone(), w)) == 1.0
    t = inverse_decode_targets(w)
    assert float(bit_accuracy(t, w)) == 0.0
    assert bool(is_detected(t, w)[0])  # lower tail: all bits flipped is still detected


def test_projection_rescale_vs_clip():
    d = torch.tensor([[0.6, -0.2]])
    assert torch.allclose(project_linf(d, 0.5, "rescale"), torch.tensor([[0.5, -0.2 * 0.5 / 0.6]]), atol=1e-6)
    assert torch.allclose(project_linf(d, 0.5, "rescale"), torch.tensor([[0.5, -0.16667]]), atol=1e-5)
    assert torch.allclose(project_linf(d, 0.5, "clip"), torch.tensor([[0.5, -0.2]]))
    inside = torch.tensor([[0.3, -0.5]])
    assert torch.equal(project_linf(inside, 0.5, "rescale"), inside)
    assert torch.equal(project_linf(inside, 0.5, "clip"), inside)


def test_ssim_identity_and_psnr_conversion():
    g = torch.Generator().manual_seed(0)
    x01 = torch.rand(2, 3, 32, 32, generator=g) * 0.98 + 0.01
    assert torch.allclose(ssim(x01, x01), torch.ones(2), atol=1e-6)
    sign = torch.randint(0, 2, x01.shape, generator=g) * 2 - 1
    y01 = x01 + 0.01 * sign
    assert torch.allclose(psnr(y01, x01), torch.full((2,), 40.0), atol=1e-3)
    # the same images on the [-1,1] scale: with conversion 40 dB, without it 6.02 dB lower
    xm, ym = 2 * x01 - 1, 2 * y01 - 1
    assert torch.allclose(image_quality(xm, ym)["psnr"], torch.full((2,), 40.0), atol=1e-3)
    off = 40.0 - 10 * math.log10(1 / (0.02 ** 2))
    assert off == pytest.approx(20 * math.log10(2), abs=1e-9)
    with pytest.raises(ValueError, match="to_unit"):
        psnr(ym, xm)  # [-1,1] inputs are refused, not silently mis-scaled
    assert float(psnr(to_unit(ym), to_unit(xm))[0]) == pytest.approx(40.0, abs=1e-3)


def _naive_ssim(x, y, win=11, sigma=1.5):
    g = np.exp(-((np.arange(win) - (win - 1) / 2) ** 2) / (2 * sigma ** 2))
    g /= g.sum()
    w2 = np.outer(g, g)
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    vals = []
    for c in range(x.shape[0]):
        for i in range(x.shape[1] - win + 1):
            for j in range(x.shape[2] - win + 1):
                a, b = x[c, i:i + win, j:j + win], y[c, i:i + win, j:j + win]
                ma, mb = (w2 * a).sum(), (w2 * b).sum()
                va, vb = (w2 * a * a).sum() - ma ** 2, (w2 * b * b).sum() - mb ** 2
                cov = (w2 * a * b).sum() - ma * mb
                vals.append((2 * ma * mb + c1) * (2 * cov + c2) / ((ma ** 2 + mb ** 2 + c1) * (va + vb + c2)))
    return float(np.mean(vals))


def test_ssim_matches_windowed_definition():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 3, 14, 15, generator=g, dtype=torch.float64)
    y = (x + 0.1 * torch.randn(x.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    assert float(ssim(y, x)[0]) == pytest.approx(_naive_ssim(y[0].numpy(), x[0].numpy()), abs=1e-9)


def test_bits_and_inverse_decode_targets():
    d = torch.tensor([[0.2, 0.7, 1.3, -0.1]])
    assert decode_bits(d).tolist() == [[0.0, 1.0, 1.0, 0.0]]
    assert inverse_decode_targets(d).tolist() == [[1.0, 0.0, 0.0, 1.0]]


@pytest.mark.parametrize("rho,acc", [(1.0, 0.0), (0.0, 1.0), (0.61, 1.0), (0.62, 0.0)])
def test_linear_toy(rho, acc):
    r = linear_toy(rho)
    assert r["target_bit_acc_before"] == 1.0
    assert r["target_bit_acc"] == acc
    assert r["target_coef"] == pytest.approx(0.5 * (1 - rho - rho * rho), abs=1e-9)
    if rho > 0:
        assert r["surrogate_coef_before"] == pytest.approx(0.5 * rho, abs=1e-9)
        assert r["surrogate_coef_after"] == pytest.approx(-0.5, abs=1e-9)


def test_identical_surrogates_average_to_single_gradient():
    torch.manual_seed(0)
    dec = HiddenDecoder(HiddenConfig(n_bits=16)).eval()
    x = torch.rand(3, 3, 32, 32) * 2 - 1
    t = torch.randint(0, 2, (3, 16)).float()
    g1 = surrogate_gradient(x, [dec], [t])
    g4 = surrogate_gradient(x, [dec] * 4, [t] * 4)
    assert torch.allclose(g1, g4, atol=1e-7, rtol=1e-5)
    # and the gradient equals d/dx of MSE * B (the official loss)
    xg = x.clone().requires_grad_(True)
    loss = torch.nn.functional.mse_loss(dec(xg), t) * x.shape[0]
    (ref,) = torch.autograd.grad(loss, xg)
    assert torch.allclose(g1, ref, atol=1e-7, rtol=1e-5)


def test_dct_matrix_orthonormal_and_jpeg_q100_near_identity():
    D = _dct_matrix("cpu", torch.float64)
    assert torch.allclose(D @ D.T, torch.eye(8, dtype=torch.float64), atol=1e-12)
    from iclr25.wm_transfer.noise import jpeg_approx

    x = torch.rand(2, 3, 16, 16) * 2 - 1
    y = jpeg_approx(x, 100.0)
    assert float((y - x).abs().max()) < 0.02  # quantisation step 1 on 0..255 plus colour conversion rounding
