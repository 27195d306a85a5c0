"""Watermark-based detection (spec "Watermark-based detection"): bits, bitwise accuracy, the
double-tail detector and the evasion rate.

Decoder outputs ``D(x)`` are real ``[B, n]``; bits are ``round(clip(D(x), 0, 1))``. The detector
flags ``x`` iff the number of matching bits ``M`` is ``≥ hi`` or ``≤ lo`` (the lower tail catches
an attack that flips almost every bit). ``hi``/``lo`` are the smallest symmetric counts whose
false-positive rate for i.i.d. fair-coin bits is at most ``fpr`` (exact binomial sums).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "decode_bits",
    "inverse_decode_targets",
    "matching_bits",
    "bit_accuracy",
    "double_tail_threshold",
    "double_tail_fpr",
    "is_detected",
    "lower_tail",
    "evasion_rate",
    "evasion_summary",
]


def decode_bits(decoded: Tensor) -> Tensor:
    """Bits read from decoder outputs: ``round(clip(D(x), 0, 1))``; ``[B, n]`` float → ``[B, n]`` float in {0,1}.
    (``torch.round`` rounds halves to even, as the official code.)"""
    return torch.round(decoded.clamp(0.0, 1.0))


def inverse_decode_targets(decoded: Tensor) -> Tensor:
    """Inverse-decode target bits (spec Attack step 2): ``t = 1 − round(clip(D(x_w), 0, 1))``; ``[B, n]``."""
    return 1.0 - decode_bits(decoded)


def _check_pair(decoded: Tensor, w: Tensor) -> Tensor:
    if decoded.dim() != 2:
        raise ValueError(f"decoded must be [B, n], got shape {tuple(decoded.shape)}")
    w = torch.as_tensor(w, device=decoded.device, dtype=decoded.dtype)
    if w.dim() == 1:
        w = w[None].expand(decoded.shape[0], -1)
    if w.shape[-1] != decoded.shape[-1]:
        raise ValueError(f"message length {w.shape[-1]} != decoder n_bits {decoded.shape[-1]}")
    if w.shape[0] != decoded.shape[0]:
        raise ValueError(f"{w.shape[0]} messages for {decoded.shape[0]} decoded rows")
    return w


def matching_bits(decoded: Tensor, w: Tensor) -> Tensor:
    """``M``: the number of positions where the decoded bits equal ``w``; ``[B]`` long."""
    w = _check_pair(decoded, w)
    return (decode_bits(decoded) == w).sum(1)


def bit_accuracy(decoded: Tensor, w: Tensor) -> Tensor:
    """Bitwise accuracy ``BA = M / n`` per image; ``decoded [B, n]``, ``w [B, n]`` or ``[n]`` → ``[B]`` float."""
    return matching_bits(decoded, w).to(torch.float32) / decoded.shape[-1]


def double_tail_fpr(n_bits: int, hi: int, lo: int) -> float:
    """Exact false-positive rate ``P(M ≥ hi) + P(M ≤ lo)`` for ``M ~ Binomial(n_bits, 1/2)``."""
    tot = sum(math.comb(n_bits, k) for k in range(n_bits + 1) if k >= hi or k <= lo)
    return float(Fraction(tot, 2 ** n_bits))


def double_tail_threshold(n_bits: int, fpr: float = 1e-4) -> tuple[int, int]:
    """The smallest symmetric double-tail counts ``(hi, lo = n − hi)`` with false-positive rate ≤ ``fpr``.

    Known answers (fpr 1e-4): n = 20 → (19, 1), 30 → (26, 4), 48 → (38, 10), 64 → (48, 16).

    Raises:
        ValueError: ``fpr`` outside (0, 1), ``n_bits < 1``, or no symmetric threshold reaches ``fpr``
            (the smallest reachable rate, ``2 / 2^n`` with ``hi = n``, is named; e.g. n ≤ 14 at 1e-4).
    """
    if not isinstance(n_bits, int) or isinstance(n_bits, bool) or n_bits < 1:
        raise ValueError(f"n_bits must be a positive integer, got {n_bits!r}")
    if not (isinstance(fpr, (int, float)) and math.isfinite(fpr) and 0.0 < fpr < 1.0):
        raise ValueError(f"fpr must be in (0, 1), got {fpr!r}")
    target = Fraction(fpr)
    for hi in range(n_bits // 2 + 1, n_bits + 1):
        lo = n_bits - hi
        tot = sum(math.comb(n_bits, k) for k in range(n_bits + 1) if k >= hi or k <= lo)
        if Fraction(tot, 2 ** n_bits) <= target:
            return hi, lo
    best = double_tail_fpr(n_bits, n_bits, 0) if n_bits > 1 else 1.0
    raise ValueError(f"no symmetric double-tail threshold for n_bits={n_bits} reaches fpr={fpr:g}: the "
                     f"smallest reachable rate is {best:.4g} (M = n or M = 0); use more bits or a larger fpr")


def is_detected(decoded: Tensor, w: Tensor, *, fpr: float = 1e-4, thresholds: tuple[int, int] | None = None) -> Tensor:
    """Double-tail detection ``M ≥ hi or M ≤ lo``; ``[B]`` bool.

    Args:
        decoded: ``[B, n]`` decoder outputs; w: the owner's message ``[n]`` or ``[B, n]``.
        fpr: false-positive rate that sets ``(hi, lo)`` via :func:`double_tail_threshold`.
        thresholds: explicit ``(hi, lo)`` instead.
    """
    hi, lo = thresholds if thresholds is not None else double_tail_threshold(decoded.shape[-1], fpr)
    m = matching_bits(decoded, w)
    return (m >= hi) | (m <= lo)


def lower_tail(decoded: Tensor, w: Tensor, *, fpr: float = 1e-4) -> Tensor:
    """Images caught by the lower tail only (``M ≤ lo``: almost every bit flipped); ``[B]`` bool."""
    _, lo = double_tail_threshold(decoded.shape[-1], fpr)
    return matching_bits(decoded, w) <= lo


def evasion_rate(before: Tensor, after: Tensor) -> float:
    """Fraction of images detected before the attack that are no longer detected after it.

    Returns ``nan`` when no image was detected before (undefined; :func:`evasion_summary` says why).
    """
    before, after = torch.as_tensor(before, dtype=torch.bool), torch.as_tensor(after, dtype=torch.bool)
    if before.shape != after.shape:
        raise ValueError(f"before {tuple(before.shape)} and after {tuple(after.shape)} differ in shape")
    n = int(before.sum())
    if n == 0:
        return float("nan")
    return float((before & ~after).sum()) / n


def evasion_summary(before: Tensor, after: Tensor) -> dict[str, Any]:
    """``{"evasion_rate": float | None, "n_detected_before", "n_evaded", "n_images", "evasion_note"}``;
    the rate is ``None`` with a reason when no image was detected before the attack."""
    before, after = torch.as_tensor(before, dtype=torch.bool), torch.as_tensor(after, dtype=torch.bool)
    n = int(before.sum())
    rate = evasion_rate(before, after)
    note = "" if n else (f"undefined: no image was detected before the attack (0/{before.numel()}), "
                         "so there is nothing to evade; check the target's clean bit accuracy")
    return {"evasion_rate": None if n == 0 else rate, "n_detected_before": n,
            "n_evaded": int((before & ~after).sum()), "n_images": int(before.numel()), "evasion_note": note}
