"""Image-quality metrics on the ``[0, 1]`` scale (spec "Evaluation metrics").

``ssim`` follows Wang et al. (2004) as ``pytorch_msssim.ssim`` computes it (Gaussian window 11,
σ 1.5, K1 0.01, K2 0.03, valid convolution, mean over positions and channels), implemented here in
plain torch. Models work on ``[-1, 1]``; convert with :func:`to_unit` first (or use
:func:`image_quality`, which does): PSNR on ``[-1, 1]`` with ``data_range = 1`` would be
``20·log10(2) = 6.02`` dB too low.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["to_unit", "from_unit", "ssim", "psnr", "linf", "l2", "image_quality"]


def to_unit(x: Tensor) -> Tensor:
    """``[-1, 1] → [0, 1]``: ``(x + 1) / 2``."""
    return (x + 1.0) / 2.0


def from_unit(x: Tensor) -> Tensor:
    """``[0, 1] → [-1, 1]``: ``2x − 1``."""
    return 2.0 * x - 1.0


def _check(x: Tensor, y: Tensor, data_range: float, name: str) -> None:
    if x.shape != y.shape or x.dim() != 4:
        raise ValueError(f"{name}: x and y must be [B,C,H,W] of the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if not (math.isfinite(data_range) and data_range > 0):
        raise ValueError(f"{name}: data_range must be finite and > 0, got {data_range}")
    if data_range == 1.0:
        lo = min(float(x.min()), float(y.min()))
        if lo < -1e-4:
            raise ValueError(f"{name}: images have values down to {lo:.3g} but are expected on [0, 1]; "
                             "convert [-1,1] images with to_unit(x) = (x + 1) / 2")


def _gauss_window(size: int, sigma: float, device, dtype) -> Tensor:
    t = torch.arange(size, device=device, dtype=dtype) - (size - 1) / 2.0
    g = torch.exp(-(t ** 2) / (2 * sigma ** 2))
    return g / g.sum()


def ssim(x: Tensor, y: Tensor, data_range: float = 1.0, win_size: int = 11, sigma: float = 1.5,
         k1: float = 0.01, k2: float = 0.03) -> Tensor:
    """Structural similarity per image.

    Args:
        x, y: ``[B, C, H, W]`` float on ``[0, data_range]`` with ``H, W ≥ win_size``.

    Returns:
        ``[B]`` float: the mean of the SSIM map over valid positions and channels.

    Raises:
        ValueError: shapes differ / not 4-D, images smaller than the window, or ``[-1,1]`` inputs.
    """
    _check(x, y, data_range, "ssim")
    if min(x.shape[-2:]) < win_size:
        raise ValueError(f"ssim: images {x.shape[-2]}x{x.shape[-1]} are smaller than the {win_size}x{win_size} window")
    C = x.shape[1]
    g = _gauss_window(win_size, sigma, x.device, x.dtype)
    k = 5 * C  # the five maps x, y, x², y², xy filtered in one grouped convolution per direction
    z = torch.cat([x, y, x * x, y * y, x * y], dim=1)
    z = F.conv2d(z, g.view(1, 1, 1, -1).expand(k, 1, 1, -1), groups=k)
    z = F.conv2d(z, g.view(1, 1, -1, 1).expand(k, 1, -1, 1), groups=k)
    mu_x, mu_y, exx, eyy, exy = z.split(C, dim=1)
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    sxx = exx - mu_x ** 2
    syy = eyy - mu_y ** 2
    sxy = exy - mu_x * mu_y
    cs = (2 * sxy + c2) / (sxx + syy + c2)
    smap = ((2 * mu_x * mu_y + c1) / (mu_x ** 2 + mu_y ** 2 + c1)) * cs
    return smap.flatten(2).mean(-1).mean(-1)


def psnr(x: Tensor, y: Tensor, data_range: float = 1.0) -> Tensor:
    """``10·log10(data_range² / MSE)`` per image; ``[B]`` float (``inf`` for identical images)."""
    _check(x, y, data_range, "psnr")
    mse = (x - y).double().pow(2).flatten(1).mean(1)
    return (10.0 * torch.log10(data_range ** 2 / mse)).float()


def linf(x: Tensor, y: Tensor) -> Tensor:
    """``‖x − y‖∞`` per image; ``[B]``."""
    return (x - y).flatten(1).abs().max(1).values


def l2(x: Tensor, y: Tensor) -> Tensor:
    """``‖x − y‖₂`` per image; ``[B]``."""
    return (x - y).flatten(1).norm(dim=1)


def image_quality(x_ref: Tensor, x: Tensor) -> dict[str, Tensor]:
    """SSIM, PSNR (dB), ℓ∞ and ℓ2 of ``x`` against ``x_ref``, both ``[B,3,H,W]`` in ``[-1, 1]``,
    measured on ``[0, 1]``; each value ``[B]``."""
    a, b = to_unit(x_ref).clamp(0, 1), to_unit(x).clamp(0, 1)
    return {"ssim": ssim(b, a), "psnr": psnr(b, a), "linf": linf(b, a), "l2": l2(b, a)}
