"""Linear toy watermark with a known answer (spec Known-answer test 6).

Images in ``R^d`` (d = 64); target patterns ``P`` (k = 8 orthonormal rows), ``D(x) = 0.5 + P x``;
``x_w = x_0 + 0.5 Σ_i (2w_i − 1) P_i`` with ``x_0`` orthogonal to every pattern. The surrogate's
patterns are ``P'_i = ρ P_i + sqrt(1 − ρ²) Q_i`` (``Q`` orthonormal, orthogonal to ``P``). The surrogate
reads coefficient ``0.5ρ``; the inverse-decode attack (Eq. 3, no ℓ∞ bound, no early stop, run to
convergence) drives it to ``−0.5`` and the target's signed coefficient becomes ``0.5 (1 − ρ − ρ²)``:
the target's bits flip iff ``ρ > (√5 − 1)/2 ≈ 0.618``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .attack import eq3_descent
from .detect import bit_accuracy, inverse_decode_targets

__all__ = ["linear_toy", "GOLDEN_THRESHOLD"]

GOLDEN_THRESHOLD = (math.sqrt(5.0) - 1.0) / 2.0


def linear_toy(rho: float, *, d: int = 64, k: int = 8, n_images: int = 16, alpha: float = 1.0,
               max_iters: int = 300, seed: int = 0) -> dict[str, Any]:
    """Run the inverse-decode attack on the linear toy with surrogate overlap ``rho``.

    Args:
        rho: in ``[0, 1]``; 1 = surrogate equals target, 0 = orthogonal.
        d, k: dimension and bits (need ``d ≥ 2k + 1``).
        n_images: images (each with its own random message and ``x_0``).
        alpha: step size of the plain gradient step (Hessian eigenvalue ``2/k``: stable for ``α < k``).
        max_iters: steps (the default converges to float precision).
        seed: the random basis, messages and ``x_0``.

    Returns:
        dict with ``target_bit_acc`` (mean), ``target_coef`` (mean signed coefficient ``s_i · P_i x_adv``),
        ``expected_coef`` ``0.5 (1 − ρ − ρ²)``, ``surrogate_coef_before`` (``0.5ρ``) and
        ``surrogate_coef_after`` (→ −0.5), ``flips_expected`` (ρ > 0.618).

    Raises:
        ValueError: ``rho`` outside [0, 1] or ``d < 2k + 1``.
    """
    if not (math.isfinite(rho) and 0.0 <= rho <= 1.0):
        raise ValueError(f"rho must be in [0, 1], got {rho}")
    if d < 2 * k + 1:
        raise ValueError(f"d={d} must be >= 2k+1={2 * k + 1}")
    g = torch.Generator().manual_seed(seed)
    basis, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    basis = basis.T  # rows orthonormal
    P, Q, rest = basis[:k], basis[k:2 * k], basis[2 * k:]
    Ps = rho * P + math.sqrt(max(0.0, 1.0 - rho * rho)) * Q
    w = torch.randint(0, 2, (n_images, k), generator=g).double()
    s = 2 * w - 1
    x0 = torch.randn(n_images, rest.shape[0], generator=g, dtype=torch.float64) @ rest
    x_w = x0 + 0.5 * s @ P

    def target(x):
        return 0.5 + x @ P.T

    def surrogate(x):
        return 0.5 + x @ Ps.T

    t = inverse_decode_targets(surrogate(x_w))
    x_adv, iters, _, sur_acc = eq3_descent(x_w, [surrogate], [t], alpha=alpha, r=None, eps=None,
                                           max_iters=max_iters, ssim_stop=None, box=False)
    coef = (s * (x_adv @ P.T)).mean()
    sur_before = (s * (x_w @ Ps.T)).mean()
    sur_after = (s * (x_adv @ Ps.T)).mean()
    return {
        "rho": rho,
        "target_bit_acc": float(bit_accuracy(target(x_adv), w).mean()),
        "target_bit_acc_before": float(bit_accuracy(target(x_w), w).mean()),
        "target_coef": float(coef),
        "expected_coef": 0.5 * (1 - rho - rho * rho),
        "surrogate_coef_before": float(sur_before),
        "surrogate_coef_after": float(sur_after),
        "surrogate_bit_acc_vs_targets": float(sur_acc.mean()),
        "flips_expected": rho > GOLDEN_THRESHOLD,
        "iterations": int(iters.max()),
    }
