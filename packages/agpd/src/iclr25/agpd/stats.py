"""Robust z-score (target-class identification, Section 4.2) and the Jensen-Shannon stopping
rule of the iterative filtering (Algorithm 1, Appendix D.1)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.spatial.distance import jensenshannon
from torch import Tensor

__all__ = ["GAMMA", "robust_z", "closeness_histogram", "js_between", "js_trace", "window_scores",
           "select_stop"]

GAMMA = 1.4826
"""Consistency constant of the MAD for normal data (``1 / Phi^{-1}(3/4)``)."""


def robust_z(values: Tensor | Sequence[float], one_sided: bool = False, eps: float = 0.0) -> Tensor:
    """Robust z-score ``z_k = (v_k - median v) / (gamma * (MAD + eps))``, ``gamma = 1.4826``,
    ``MAD = median_k |v_k - median v|`` (medians average the two middle values).

    Args:
        values: ``(K,)`` statistics (e.g. the CVBT ``rho`` of each class at one layer).
        one_sided: set negative scores to 0 (BackdoorBench).
        eps: added to the MAD (BackdoorBench: ``1e-6``; paper: 0).

    Returns:
        ``(K,)`` float64. When the scale is 0, values at the median get 0 and the others +-inf.
    """
    v = torch.as_tensor(values, dtype=torch.float64).flatten()
    if v.numel() == 0:
        raise ValueError("robust_z needs at least one value")
    med = torch.quantile(v, 0.5)
    dev = v - med
    scale = GAMMA * (torch.quantile(dev.abs(), 0.5) + eps)
    if scale > 0:
        z = dev / scale
    else:
        z = torch.where(dev == 0, torch.zeros_like(dev), torch.sign(dev) * torch.inf)
    return z.clamp_min(0.0) if one_sided else z


def closeness_histogram(s: Tensor | np.ndarray, bins: int = 99) -> np.ndarray:
    """Density histogram of closeness values on [0, 1] with ``bins`` equal bins -> ``(bins,)``
    (official code: ``np.linspace(0, 1, 100)`` edges, i.e. 99 bins)."""
    s = np.asarray(s, dtype=np.float64).ravel()
    h, _ = np.histogram(s, bins=bins, range=(0.0, 1.0), density=True)
    return h


def js_between(s_now, s_prev, bins: int = 99, distance: bool = False) -> float:
    """Jensen-Shannon divergence (natural log; ``distance=True``: its square root, the JS
    distance of ``scipy.spatial.distance.jensenshannon``) between the histograms of two sets of
    closeness values. In [0, ln 2] (divergence) or [0, sqrt(ln 2)] (distance)."""
    d = float(jensenshannon(closeness_histogram(s_now, bins), closeness_histogram(s_prev, bins)))
    if not np.isfinite(d):  # an empty set of values gives an all-zero histogram
        d = 0.0
    return d if distance else d * d


def js_trace(rounds: Sequence, bins: int = 99, distance: bool = False) -> list[float]:
    """``JS_t`` for ``t = 1..T-1``: :func:`js_between` of round ``t``'s closeness values and
    round ``t-1``'s. ``rounds`` is the list of per-round closeness arrays."""
    return [js_between(rounds[t], rounds[t - 1], bins, distance) for t in range(1, len(rounds))]


def window_scores(js: Sequence[float], window: int = 10, beta: float = 5.0) -> np.ndarray:
    """Sliding-window scores ``S_m = mu_m + beta * sigma_m`` over ``JS_m..JS_{m+w-1}`` (population
    std), ``m = 0..len(js)-w``. Empty when the trace is shorter than the window."""
    a = np.asarray(js, dtype=np.float64)
    if len(a) < window:
        return np.empty(0)
    w = np.lib.stride_tricks.sliding_window_view(a, window)
    return w.mean(1) + beta * w.std(1)


def select_stop(js: Sequence[float], window: int = 10, beta: float = 5.0, rule: str = "middle", *,
                exhausted: bool = False, ends_empty: bool = False) -> int:
    """Stopping round of the iterative filtering (Appendix D.1.2).

    ``m* = argmin_m S_m`` (see :func:`window_scores`); ``rule="middle"`` (paper) returns
    ``t* = m* + window // 2``, ``rule="start"`` (BackdoorBench) returns ``m*``. Samples flagged in
    rounds ``0 .. t*-1`` are the poisoned ones.

    Short traces (fewer than ``window`` values, which the official code rejects with a
    ``ValueError``) have no window to trace back over (README deviation 3):

    - the filtering stalled with samples left (``exhausted=False``; the paper variant's raw
      closeness): every filtered round counts, ``t* = len(js) + 1`` — the samples that never
      dropped below ``tau_s`` stay clean;
    - the filtering removed every sample (``exhausted=True``; min-max normalisation removes at
      least one sample per round, so a small class always ends empty): the stop is the round after
      the largest change of the closeness distribution, ``t* = argmax_t JS_t + 1`` (``JS_t``
      compares rounds ``t`` and ``t-1``, 0-based over the trace), so the tail is excluded and a
      whole class is never marked. An empty trace (one round removed everything) gives ``t* = 0``.
      With ``ends_empty`` the last value compares with an empty set (the official code's ``JS = 1``
      after the round that removed the last samples) and is left out of this argmax.

    Args:
        js: the JS trace ``JS_1..JS_T``.
        window, beta: the window rule's ``w`` and ``beta``.
        rule: ``"middle"`` or ``"start"``.
        exhausted: whether the filtering ended with no sample left.
        ends_empty: whether the last JS value is the empty-set marker (see above).

    Raises:
        ValueError: for ``window < 1`` or an unknown ``rule``.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if rule not in ("middle", "start"):
        raise ValueError(f"rule must be 'middle' or 'start', got {rule!r}")
    scores = window_scores(js, window, beta)
    if len(scores) == 0:
        if not exhausted:
            return len(js) + 1
        a = np.asarray(js, dtype=np.float64)
        a = a[:-1] if ends_empty else a
        return int(np.argmax(a)) + 1 if len(a) else 0
    m = int(np.argmin(scores))
    return m + window // 2 if rule == "middle" else m
