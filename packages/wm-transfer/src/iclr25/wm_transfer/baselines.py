"""Common post-processing baselines at matched image quality (spec "Baselines at matched image quality").

:func:`post_process` applies one transform at a given strength; :func:`match_quality` bisects the
strength to the strongest setting whose mean SSIM (against the watermarked images, on ``[0,1]``)
is still ≥ a target — the attack's own mean SSIM — so the baseline gets at least the attack's
distortion budget.

Strengths (all on images in ``[-1, 1]``):

========== ============================================ ===============
kind       strength                                      range searched
========== ============================================ ===============
noise      Gaussian σ on the ``[0,1]`` scale (fixed draw) 0 – 0.5
blur       Gaussian σ in pixels                          0 – 5
jpeg       ``100 − quality`` (JPEG approximation)         0 – 99
brightness ``f − 1``, intensities × f                    0 – 1
contrast   ``1 − c``, deviations from the mean × c       0 – 1
========== ============================================ ===============
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .noise import brightness, contrast, gaussian_blur, gaussian_noise, jpeg_approx
from .quality import ssim, to_unit

__all__ = ["POST_PROCESSING", "STRENGTH_RANGE", "post_process", "MatchResult", "match_quality"]

POST_PROCESSING = ("noise", "blur", "jpeg", "brightness", "contrast")
STRENGTH_RANGE = {"noise": (0.0, 0.5), "blur": (0.0, 5.0), "jpeg": (0.0, 99.0), "brightness": (0.0, 1.0),
                  "contrast": (0.0, 1.0)}


def post_process(x: Tensor, kind: str, strength: float, *, noise: Tensor | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
    """Apply post-processing ``kind`` at ``strength`` (see the module table) to ``x [B,3,H,W]`` in ``[-1,1]``.

    Args:
        noise: a fixed standard-normal draw for ``kind="noise"`` (reused across strengths).

    Raises:
        ValueError: unknown kind, or a strength that is not finite / outside the kind's range.
    """
    if kind not in STRENGTH_RANGE:
        raise ValueError(f"unknown post-processing {kind!r}; choose from {list(POST_PROCESSING)}")
    lo, hi = STRENGTH_RANGE[kind]
    if not (isinstance(strength, (int, float)) and math.isfinite(strength) and lo <= strength <= hi):
        raise ValueError(f"{kind} strength must be in [{lo}, {hi}], got {strength!r}")
    if kind == "noise":
        return gaussian_noise(x, strength, generator, noise=noise)
    if kind == "blur":
        return gaussian_blur(x, strength)
    if kind == "jpeg":
        return jpeg_approx(x, 100.0 - strength)
    if kind == "brightness":
        return brightness(x, 1.0 + strength)
    return contrast(x, 1.0 - strength)


@dataclass
class MatchResult:
    """Post-processed images at the matched strength.

    Attributes:
        x: ``[B,3,H,W]`` in ``[-1,1]``; kind; strength; ssim: mean SSIM reached; target_ssim;
        reached: whether the strongest setting of the range already stays above the target
            (then ``strength`` is the range's maximum and ``ssim`` > target).
    """

    x: Tensor
    kind: str
    strength: float
    ssim: float
    target_ssim: float
    reached: bool


@torch.no_grad()
def match_quality(x: Tensor, kind: str, target_ssim: float, *, iters: int = 18, seed: int = 0) -> MatchResult:
    """Strongest ``kind`` post-processing whose mean SSIM(post(x), x) is ≥ ``target_ssim`` (bisection).

    Args:
        x: ``[B,3,H,W]`` watermarked images in ``[-1,1]``.
        target_ssim: in (0, 1], typically the attack's mean SSIM.
        iters: bisection steps.
        seed: the fixed Gaussian draw of ``noise``.

    Raises:
        ValueError: unknown kind, or ``target_ssim`` outside (0, 1].
    """
    if kind not in STRENGTH_RANGE:
        raise ValueError(f"unknown post-processing {kind!r}; choose from {list(POST_PROCESSING)}")
    if not (math.isfinite(target_ssim) and 0 < target_ssim <= 1):
        raise ValueError(f"target_ssim must be in (0, 1], got {target_ssim}")
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(x.shape, generator=g).to(x) if kind == "noise" else None
    ref = to_unit(x).clamp(0, 1)

    def mean_ssim(s: float) -> tuple[float, Tensor]:
        y = post_process(x, kind, s, noise=noise)
        return float(ssim(to_unit(y).clamp(0, 1), ref).mean()), y

    lo, hi = STRENGTH_RANGE[kind]
    s_hi, y_hi = mean_ssim(hi)
    if s_hi >= target_ssim:
        return MatchResult(y_hi, kind, hi, s_hi, target_ssim, True)
    best_s, best_y = mean_ssim(lo)
    best = lo
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        sm, ym = mean_ssim(mid)
        if sm >= target_ssim:
            lo, best, best_s, best_y = mid, mid, sm, ym
        else:
            hi = mid
    return MatchResult(best_y, kind, best, best_s, target_ssim, False)
