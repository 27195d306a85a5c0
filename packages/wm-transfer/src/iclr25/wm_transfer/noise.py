"""Differentiable noise layers (robust "AT" training, spec §Surrogate / target models) and the
deterministic image transforms they are built from (also used by the post-processing baselines).

All layers map ``[B, 3, H, W]`` images in ``[-1, 1]`` to the same shape and range and are
differentiable in the image (JPEG through a cubic rounding approximation, Shin & Song 2017).
Randomness comes from an explicit ``torch.Generator`` (CPU) so training is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "gaussian_noise",
    "gaussian_blur",
    "resize_down_up",
    "crop_resize",
    "brightness",
    "contrast",
    "jpeg_approx",
    "jpeg_quant_tables",
    "Identity",
    "GaussianNoise",
    "GaussianBlur",
    "Resize",
    "CropResize",
    "Brightness",
    "JpegApprox",
    "RandomNoiseLayer",
    "random_noise_layer",
    "NOISE_KINDS",
]


def _check_range(name: str, lo: float, hi: float, lo_ok: float, hi_ok: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi) and lo_ok <= lo <= hi <= hi_ok):
        raise ValueError(f"{name} range ({lo}, {hi}) must be finite with {lo_ok} <= low <= high <= {hi_ok}")


def _uniform(lo: float, hi: float, g: torch.Generator | None) -> float:
    return lo + (hi - lo) * float(torch.rand((), generator=g))


def gaussian_noise(x: Tensor, sigma: float, generator: torch.Generator | None = None,
                   noise: Tensor | None = None) -> Tensor:
    """``x + σ·N(0,1)`` clamped to each image's own ``[min, max]`` (official clamping).

    Args:
        x: ``[B,3,H,W]`` in ``[-1,1]``.
        sigma: standard deviation on the ``[0,1]`` scale (×2 on ``[-1,1]``).
        noise: a fixed standard-normal draw (same shape) to reuse (bisection in :func:`match_quality`).
    """
    if noise is None:
        noise = torch.randn(x.shape, generator=generator).to(x.device, x.dtype)
    lo = x.flatten(1).min(1).values.view(-1, 1, 1, 1)
    hi = x.flatten(1).max(1).values.view(-1, 1, 1, 1)
    return torch.maximum(torch.minimum(x + 2.0 * sigma * noise, hi), lo)


def _gauss_kernel(sigma: float, device, dtype) -> Tensor:
    radius = max(1, int(math.ceil(3.0 * sigma)))
    t = torch.arange(-radius, radius + 1, device=device, dtype=dtype)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def gaussian_blur(x: Tensor, sigma: float) -> Tensor:
    """Separable Gaussian blur with standard deviation ``sigma`` pixels (radius ``ceil(3σ)``, reflect
    padding). ``sigma <= 0`` returns ``x``."""
    if sigma <= 0:
        return x
    k = _gauss_kernel(sigma, x.device, x.dtype)
    r = (k.numel() - 1) // 2
    C = x.shape[1]
    mode = "reflect" if r < min(x.shape[-2:]) else "replicate"
    y = F.conv2d(F.pad(x, (r, r, 0, 0), mode=mode), k.view(1, 1, 1, -1).expand(C, 1, 1, -1), groups=C)
    return F.conv2d(F.pad(y, (0, 0, r, r), mode=mode), k.view(1, 1, -1, 1).expand(C, 1, -1, 1), groups=C)


def resize_down_up(x: Tensor, scale: float) -> Tensor:
    """Bilinear down-scaling by ``scale`` (0 < scale ≤ 1) and back to the original size."""
    H, W = x.shape[-2:]
    h, w = max(1, round(H * scale)), max(1, round(W * scale))
    y = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=False)
    return F.interpolate(y, size=(H, W), mode="bilinear", align_corners=False)


def crop_resize(x: Tensor, ratio: float, generator: torch.Generator | None = None) -> Tensor:
    """Keep a random ``ratio × ratio`` window (same offset for the batch) and resize it back (bilinear)."""
    H, W = x.shape[-2:]
    h, w = max(1, round(H * ratio)), max(1, round(W * ratio))
    top = int(torch.randint(0, H - h + 1, (), generator=generator))
    left = int(torch.randint(0, W - w + 1, (), generator=generator))
    return F.interpolate(x[..., top:top + h, left:left + w], size=(H, W), mode="bilinear", align_corners=False)


def brightness(x: Tensor, factor: float) -> Tensor:
    """Multiply intensities on the ``[0,1]`` scale by ``factor`` and clip (``[-1,1]`` in and out)."""
    return ((x + 1.0) * factor - 1.0).clamp(-1.0, 1.0)


def contrast(x: Tensor, factor: float) -> Tensor:
    """Scale each image's deviation from its mean by ``factor`` and clip."""
    m = x.mean(dim=(1, 2, 3), keepdim=True)
    return ((x - m) * factor + m).clamp(-1.0, 1.0)


# Standard JPEG quantisation tables (ITU-T T.81 Annex K).
_Q_LUMA = [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
           14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
           49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99]
_Q_CHROMA = [17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
             47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32


def jpeg_quant_tables(quality: float) -> tuple[Tensor, Tensor]:
    """Luma and chroma 8×8 quantisation tables scaled by the IJG quality formula (quality in [1, 100])."""
    if not (math.isfinite(quality) and 1 <= quality <= 100):
        raise ValueError(f"JPEG quality must be in [1, 100], got {quality}")
    s = 5000.0 / quality if quality < 50 else 200.0 - 2.0 * quality
    out = []
    for base in (_Q_LUMA, _Q_CHROMA):
        q = torch.floor((torch.tensor(base, dtype=torch.float64) * s + 50.0) / 100.0).clamp(min=1.0)
        out.append(q.view(8, 8).float())
    return out[0], out[1]


def _dct_matrix(device, dtype) -> Tensor:
    n = torch.arange(8, dtype=torch.float64)
    k = n[:, None]
    m = torch.cos(math.pi * (2 * n[None, :] + 1) * k / 16.0) * math.sqrt(2.0 / 8.0)
    m[0] /= math.sqrt(2.0)
    return m.to(device, dtype)


def _diff_round(x: Tensor) -> Tensor:
    r = torch.round(x)
    return r + (x - r) ** 3


def jpeg_approx(x: Tensor, quality: float) -> Tensor:
    """Differentiable JPEG approximation: RGB → YCbCr (0..255), 8×8 block DCT, quantisation with the
    quality-scaled standard tables and cubic rounding, dequantisation, inverse DCT, back to RGB.
    No chroma subsampling and no entropy coding (a deviation from real JPEG, listed in the README).
    Sizes not divisible by 8 are padded by replication and cropped back."""
    B, C, H, W = x.shape
    ql, qc = (t.to(x.device, x.dtype) for t in jpeg_quant_tables(quality))
    rgb = (x.clamp(-1, 1) + 1.0) * 127.5
    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = -0.168736 * r - 0.331264 * g + 0.5 * b + 128.0
    cr = 0.5 * r - 0.418688 * g - 0.081312 * b + 128.0
    ycc = torch.stack([y, cb, cr], 1) - 128.0
    ph, pw = (-H) % 8, (-W) % 8
    if ph or pw:
        ycc = F.pad(ycc, (0, pw, 0, ph), mode="replicate")
    Hp, Wp = ycc.shape[-2:]
    blocks = ycc.view(B, 3, Hp // 8, 8, Wp // 8, 8).permute(0, 1, 2, 4, 3, 5)  # B,3,hb,wb,8,8
    D = _dct_matrix(x.device, x.dtype)
    coef = D @ blocks @ D.T
    q = torch.stack([ql, qc, qc]).view(1, 3, 1, 1, 8, 8)
    coef = _diff_round(coef / q) * q
    rec = (D.T @ coef @ D).permute(0, 1, 2, 4, 3, 5).reshape(B, 3, Hp, Wp)[..., :H, :W] + 128.0
    y, cb, cr = rec[:, 0], rec[:, 1] - 128.0, rec[:, 2] - 128.0
    r = y + 1.402 * cr
    g = y - 0.344136 * cb - 0.714136 * cr
    b = y + 1.772 * cb
    return (torch.stack([r, g, b], 1) / 127.5 - 1.0).clamp(-1.0, 1.0)


class Identity(nn.Module):
    """No distortion."""

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return x


class GaussianNoise(nn.Module):
    """Additive Gaussian noise with σ ~ U[sigma] on the ``[0,1]`` scale (official: σ ∈ [0, 0.1])."""

    def __init__(self, sigma: Sequence[float] = (0.0, 0.1)) -> None:
        super().__init__()
        _check_range("GaussianNoise.sigma", *sigma, 0.0, 1.0)
        self.sigma = tuple(sigma)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return gaussian_noise(x, _uniform(*self.sigma, generator), generator)


class GaussianBlur(nn.Module):
    """Gaussian blur with σ ~ U[sigma] pixels."""

    def __init__(self, sigma: Sequence[float] = (0.3, 1.0)) -> None:
        super().__init__()
        _check_range("GaussianBlur.sigma", *sigma, 0.0, 10.0)
        self.sigma = tuple(sigma)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return gaussian_blur(x, _uniform(*self.sigma, generator))


class Resize(nn.Module):
    """Down-scaling by ``scale ~ U[scale]`` and back up (spec CPU scale: 0.5–0.9)."""

    def __init__(self, scale: Sequence[float] = (0.5, 0.9)) -> None:
        super().__init__()
        _check_range("Resize.scale", *scale, 1e-3, 1.0)
        self.scale = tuple(scale)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return resize_down_up(x, _uniform(*self.scale, generator))


class CropResize(nn.Module):
    """Random crop keeping ``ratio ~ U[ratio]`` of each side, resized back to the input size."""

    def __init__(self, ratio: Sequence[float] = (0.7, 0.9)) -> None:
        super().__init__()
        _check_range("CropResize.ratio", *ratio, 1e-3, 1.0)
        self.ratio = tuple(ratio)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return crop_resize(x, _uniform(*self.ratio, generator), generator)


class Brightness(nn.Module):
    """Brightness factor ``f ~ U[factor]`` on the ``[0,1]`` scale."""

    def __init__(self, factor: Sequence[float] = (0.8, 1.2)) -> None:
        super().__init__()
        _check_range("Brightness.factor", *factor, 0.0, 10.0)
        self.factor = tuple(factor)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return brightness(x, _uniform(*self.factor, generator))


class JpegApprox(nn.Module):
    """Differentiable JPEG approximation with quality ``~ U[quality]`` (official: 50–99)."""

    def __init__(self, quality: Sequence[float] = (50.0, 99.0)) -> None:
        super().__init__()
        _check_range("JpegApprox.quality", *quality, 1.0, 100.0)
        self.quality = tuple(quality)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        return jpeg_approx(x, _uniform(*self.quality, generator))


NOISE_KINDS = ("identity", "noise", "blur", "resize", "crop", "brightness", "jpeg")


class RandomNoiseLayer(nn.Module):
    """Apply one noise layer chosen uniformly at random per batch (official AT training)."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        if not layers:
            raise ValueError("RandomNoiseLayer needs at least one layer")
        self.choices = nn.ModuleList(layers)

    def forward(self, x: Tensor, generator: torch.Generator | None = None) -> Tensor:
        i = int(torch.randint(0, len(self.choices), (), generator=generator))
        return self.choices[i](x, generator)


def random_noise_layer(kinds: Sequence[str] = NOISE_KINDS) -> RandomNoiseLayer:
    """The robust-training noise pool (spec CPU scale): identity, Gaussian noise σ ∈ [0, 0.1] ([0,1]
    scale), blur σ ∈ [0.3, 1] px, resize 0.5–0.9, crop-resize 0.7–0.9, brightness 0.8–1.2,
    JPEG approximation quality 50–99.

    Raises:
        ValueError: an unknown kind (the valid ones are named).
    """
    table = {"identity": Identity, "noise": GaussianNoise, "blur": GaussianBlur, "resize": Resize,
             "crop": CropResize, "brightness": Brightness, "jpeg": JpegApprox}
    bad = [k for k in kinds if k not in table]
    if bad:
        raise ValueError(f"unknown noise kind(s) {bad}; choose from {list(table)}")
    return RandomNoiseLayer([table[k]() for k in kinds])
