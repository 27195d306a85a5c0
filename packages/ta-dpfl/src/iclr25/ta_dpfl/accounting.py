"""Rényi-DP accounting of the Poisson-subsampled Gaussian mechanism (Opacus' ``RDPAccountant`` math).

A *history* is a sequence of ``(noise_multiplier, sample_rate, num_steps)`` tuples, exactly the
format of :attr:`opacus.accountants.RDPAccountant.history`. RDP composes additively over the
entries (Mironov 2017, Prop. 1), and the total is converted once to ``(ε, δ)``-DP with Opacus'
conversion (Balle et al. 2020, Thm. 21), so :func:`epsilon_spent` equals
``RDPAccountant.get_epsilon(delta)`` on the same history (tested).

Paper: Kiani et al., ICLR 2025, Sec. 3 ("privacy accounting with Rényi DP").
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp as _rdp

__all__ = [
    "DEFAULT_ORDERS",
    "HistoryEntry",
    "rdp_per_step",
    "rdp_of_history",
    "epsilon_from_rdp",
    "epsilon_spent",
    "epsilon_floor",
    "epsilon_per_round",
    "opacus_accountant",
]

#: Opacus' default RDP orders ``[1 + x/10 for x in 1..99] + [12..63]`` (151 orders).
DEFAULT_ORDERS: tuple[float, ...] = tuple(float(a) for a in RDPAccountant.DEFAULT_ALPHAS)

HistoryEntry = tuple[float, float, int]


def _check(sigma: float, q: float) -> None:
    if not (sigma > 0 and np.isfinite(sigma)):
        raise ValueError(f"noise_multiplier must be a positive finite number, got {sigma}")
    if not (0 <= q <= 1):
        raise ValueError(f"sample_rate must lie in [0, 1], got {q}")


@lru_cache(maxsize=4096)
def _rdp_step_cached(sigma: float, q: float, orders: tuple[float, ...]) -> np.ndarray:
    if q == 0:
        return np.zeros(len(orders))
    return np.asarray(_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(orders)), dtype=float)


def rdp_per_step(sigma: float, q: float, orders: Sequence[float] = DEFAULT_ORDERS) -> np.ndarray:
    """RDP ``ε_α(q, σ)`` of ONE Poisson-subsampled Gaussian step at every order.

    Args:
        sigma: noise multiplier ``σ`` (noise std / clip norm), > 0.
        q: Poisson sampling rate in ``[0, 1]``; ``q = 1`` gives ``α / (2σ²)``.
        orders: RDP orders ``α > 1``.

    Returns:
        ``float64`` array of shape ``(len(orders),)``.

    Raises:
        ValueError: ``sigma <= 0`` or ``q`` outside ``[0, 1]``.
    """
    sigma, q = float(sigma), float(q)
    _check(sigma, q)
    return _rdp_step_cached(sigma, q, tuple(float(a) for a in orders)).copy()


def rdp_of_history(history: Iterable[HistoryEntry], orders: Sequence[float] = DEFAULT_ORDERS) -> np.ndarray:
    """Total RDP of a heterogeneous history (additive composition; RDP is linear in steps).

    Args:
        history: ``(noise_multiplier, sample_rate, num_steps)`` tuples.
        orders: RDP orders.

    Returns:
        ``float64`` array ``(len(orders),)``.
    """
    total = np.zeros(len(orders))
    for sigma, q, steps in history:
        if steps < 0:
            raise ValueError(f"num_steps must be >= 0, got {steps}")
        if steps:
            total += steps * rdp_per_step(sigma, q, orders)
    return total


def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: Sequence[float] = DEFAULT_ORDERS) -> float:
    """Convert an RDP curve to ``ε`` at ``δ`` with Opacus' conversion (Balle et al. 2020, Thm. 21).

    Raises:
        ValueError: ``delta`` not in ``(0, 1)``.
    """
    if not (0 < delta < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if not np.any(rdp):
        return 0.0
    with warnings.catch_warnings():  # "optimal order is the largest alpha": expected near the floor
        warnings.filterwarnings("ignore", message="Optimal order is the")
        eps, _ = _rdp.get_privacy_spent(orders=list(orders), rdp=np.asarray(rdp, dtype=float), delta=delta)
    return float(eps)


def epsilon_floor(delta: float, orders: Sequence[float] = DEFAULT_ORDERS) -> float:
    """Smallest ``ε > 0`` the RDP→DP conversion can certify at ``δ`` with these orders (the value for
    a vanishing RDP curve). About 0.10 for ``δ = 1e-5`` with Opacus' default orders: no schedule can
    certify a smaller budget."""
    return epsilon_from_rdp(np.full(len(orders), 1e-300), delta, orders)


def epsilon_spent(history: Iterable[HistoryEntry], delta: float, orders: Sequence[float] = DEFAULT_ORDERS) -> float:
    """``ε`` spent by a history at ``δ`` — equal to ``RDPAccountant(history).get_epsilon(delta)``.

    Args:
        history: ``(noise_multiplier, sample_rate, num_steps)`` tuples.
        delta: target ``δ`` in ``(0, 1)``.

    Returns:
        ``ε`` (float, ``0.0`` for an empty history).
    """
    return epsilon_from_rdp(rdp_of_history(history, orders), delta, orders)


def epsilon_per_round(
    rates: Sequence[float], sigma: float, local_steps: int, delta: float, orders: Sequence[float] = DEFAULT_ORDERS
) -> np.ndarray:
    """Cumulative ``ε`` after each round of a per-round rate schedule (the per-round accountant).

    Args:
        rates: ``q_t`` for rounds ``t = 1..T`` (length ``T``).
        sigma: noise multiplier (same every round).
        local_steps: DP-SGD steps per round ``K``.
        delta: ``δ``.

    Returns:
        ``float64`` array ``(T,)``: ``ε`` spent after rounds ``1..t``. Non-decreasing.
    """
    cum = np.zeros(len(orders))
    out = np.empty(len(rates))
    for t, q in enumerate(rates):
        cum = cum + local_steps * rdp_per_step(sigma, q, orders)
        out[t] = epsilon_from_rdp(cum, delta, orders)
    return out


def opacus_accountant(history: Iterable[HistoryEntry]) -> RDPAccountant:
    """An :class:`opacus.accountants.RDPAccountant` holding ``history`` (for audits / interop)."""
    acc = RDPAccountant()
    acc.history = [(float(s), float(q), int(k)) for s, q, k in history]
    return acc
