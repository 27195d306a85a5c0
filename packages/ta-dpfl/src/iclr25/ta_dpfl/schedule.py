"""Time-adaptive sampling-rate schedules: save early, spend later (Kiani et al., ICLR 2025, Sec. 3-4).

Per client ``n`` with budget ``(ε_n, δ)``, noise multiplier ``σ``, ``T`` rounds of ``K`` local DP-SGD
steps:

1. uniform rate ``q_uni``: the largest ``q`` whose ``T·K`` steps spend at most ``ε_n`` (IDP-FedAvg);
2. saving rate ``q_sav = ρ_n · q_uni`` for rounds ``1..τ_n`` ([design]: the paper's saving-based
   rates, parameterised here by the saving factor ``ρ_n``);
3. spending rate ``q_spe``: the largest ``q`` such that the whole schedule spends at most ``ε_n``
   (the client spends, from round ``τ_n + 1`` on, what it saved; "spend-as-you-go", Algorithm 1).

A client that misses rounds re-solves the rest of its schedule from what its accountant actually
booked (:func:`rate_for_round`): the saving rate stays, the spending (or uniform) rate becomes the
largest one that keeps the whole history within ``ε_n`` — it can never overspend.

Every rate is solved by bracketing on the RDP→DP ``ε`` (increasing in ``q``) and the returned rate
is always on the feasible side: ``epsilon_spent(schedule) <= ε_n`` exactly, never above.

Feasibility (smallest σ, largest T, the expected-batch guard) is in :mod:`.feasibility`; planning a whole
federation (every client's schedule) in :mod:`.planning`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq

from .accounting import DEFAULT_ORDERS, epsilon_floor, epsilon_from_rdp, epsilon_per_round, rdp_per_step

__all__ = [
    "BudgetInfeasibleError",
    "ClientBudget",
    "Schedule",
    "uniform_rate",
    "spend_rate",
    "make_schedule",
    "assign_saving_factors",
    "rate_for_round",
    "METHODS",
    "ORDERS",
]

METHODS = ("dpfedavg", "idp", "ta", "ta-reverse", "ta-uniform", "ta-spend-first")
#: ``save-first``: the paper's schedule (save in rounds 1..τ, then spend); ``spend-first``: the same
#: multiset of rates in the opposite time order (a mechanism probe: identical privacy cost)
ORDERS = ("save-first", "spend-first")


class BudgetInfeasibleError(ValueError):
    """A privacy budget cannot be met with the given ``σ``, rounds and local steps (even ``q = 1``
    would be needed or exceeded, or the saved budget cannot be spent with ``q <= 1``)."""


@dataclass(frozen=True)
class ClientBudget:
    """A client's privacy budget and dataset size.

    Args:
        epsilon: the client's ``ε_n`` (> 0).
        delta: ``δ`` in ``(0, 1)``; a warning is raised when ``δ >= 1/m_n``.
        num_examples: ``m_n`` (records held by the client), or ``None`` if unknown.
    """

    epsilon: float
    delta: float = 1e-5
    num_examples: int | None = None

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"ClientBudget.epsilon must be a positive finite number, got {self.epsilon}")
        if not (0 < self.delta < 1):
            raise ValueError(f"ClientBudget.delta must lie in (0, 1), got {self.delta}")
        if self.num_examples is not None and self.delta >= 1.0 / max(self.num_examples, 1):
            warnings.warn(
                f"delta={self.delta:g} >= 1/m_n = 1/{self.num_examples}: such a delta allows leaking a "
                "whole record; choose delta well below 1/m_n (e.g. 1e-5)",
                UserWarning,
                stacklevel=2,
            )


@dataclass(frozen=True)
class Schedule:
    """One client's per-round sampling rates.

    Attributes:
        rates: ``float64 (T,)``, ``q_t`` for rounds ``t = 1..T``.
        sigma: noise multiplier (every round).
        local_steps: DP-SGD steps per round ``K``.
        epsilon: the client's budget ``ε_n``.
        delta: ``δ``.
        transition: ``τ``, the number of saving rounds (``0`` for a uniform schedule).
        rho: saving factor ``ρ``.
        q_uniform, q_saving, q_spending: the three solved rates.
        order: ``"save-first"`` (rounds ``1..τ`` save) or ``"spend-first"`` (the last ``τ`` rounds save).
    """

    rates: np.ndarray
    sigma: float
    local_steps: int
    epsilon: float
    delta: float
    transition: int = 0
    rho: float = 1.0
    q_uniform: float = float("nan")
    q_saving: float = float("nan")
    q_spending: float = float("nan")
    orders: tuple[float, ...] = field(default=DEFAULT_ORDERS, repr=False)
    order: str = "save-first"

    @property
    def rounds(self) -> int:
        return len(self.rates)

    @property
    def free(self) -> np.ndarray:
        """``bool (T,)``: rounds whose rate is re-solved after missed rounds (spending rounds; every
        round of a uniform schedule). Saving rounds keep ``q_sav``."""
        if self.transition == 0:
            return np.ones(self.rounds, dtype=bool)
        saving = np.zeros(self.rounds, dtype=bool)
        if self.order == "save-first":
            saving[: self.transition] = True
        else:
            saving[self.rounds - self.transition:] = True
        return ~saving

    def history(self, upto: int | None = None) -> list[tuple[float, float, int]]:
        """Opacus-style history ``[(σ, q_t, K), ...]`` for rounds ``1..upto`` (all by default)."""
        rates = self.rates if upto is None else self.rates[:upto]
        return [(self.sigma, float(q), self.local_steps) for q in rates]

    def epsilon_per_round(self) -> np.ndarray:
        """Cumulative ``ε`` spent after each round, ``float64 (T,)`` (non-decreasing)."""
        return epsilon_per_round(self.rates, self.sigma, self.local_steps, self.delta, self.orders)

    def to_dict(self) -> dict:
        return {
            "rates": [float(q) for q in self.rates],
            "sigma": self.sigma,
            "local_steps": self.local_steps,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "transition": self.transition,
            "rho": self.rho,
            "q_uniform": self.q_uniform,
            "q_saving": self.q_saving,
            "q_spending": self.q_spending,
            "order": self.order,
        }


def _eps_two_phase(q1: float, n1: int, q2: float, n2: int, sigma: float, delta: float, orders) -> float:
    rdp = n1 * rdp_per_step(sigma, q1, orders) + n2 * rdp_per_step(sigma, q2, orders)
    return epsilon_from_rdp(rdp, delta, orders)


def _largest_feasible(f, target: float, lo: float = 0.0, hi: float = 1.0) -> float:
    """Largest x in [lo, hi] with f(x) <= target for increasing f, f(lo) <= target < f(hi)."""
    x = brentq(lambda v: f(v) - target, lo, hi, xtol=1e-13, rtol=4 * np.finfo(float).eps, maxiter=200)
    # brentq may land a hair above the root: walk down to the feasible side.
    step = max(abs(x) * 1e-12, 1e-15)
    while f(x) > target:
        x -= step
        step *= 2
    return float(x)


def uniform_rate(
    eps: float, delta: float, sigma: float, steps: int, orders: Sequence[float] = DEFAULT_ORDERS
) -> float:
    """Largest Poisson rate ``q ∈ (0, 1]`` with ``ε_RDP→DP([(σ, q, steps)], δ) <= eps`` (IDP-FedAvg rate).

    Args:
        eps: budget ``ε`` (> 0).
        delta: ``δ``.
        sigma: noise multiplier.
        steps: total DP-SGD steps ``T·K``.

    Returns:
        ``q`` (float). ``1.0`` when even full batches fit in the budget.

    Raises:
        BudgetInfeasibleError: ``steps <= 0``. (Poisson subsampling makes any ``ε > 0`` reachable
            as ``q → 0``; usable batch sizes are enforced by :func:`check_min_batch`.)
    """
    if steps <= 0:
        raise BudgetInfeasibleError(f"steps must be >= 1, got {steps}")
    orders = tuple(orders)
    floor = epsilon_floor(delta, orders)
    if eps <= floor:
        raise BudgetInfeasibleError(
            f"eps={eps:g} is below {floor:.4f}, the smallest epsilon the RDP conversion certifies at "
            f"delta={delta:g} with these orders; raise eps or delta")

    def f(q: float) -> float:
        return epsilon_from_rdp(steps * rdp_per_step(sigma, q, orders), delta, orders)

    if f(1.0) <= eps:
        return 1.0
    return _largest_feasible(f, eps)


def spend_rate(
    eps: float,
    delta: float,
    sigma: float,
    q_saving: float,
    saving_steps: int,
    spending_steps: int,
    orders: Sequence[float] = DEFAULT_ORDERS,
    *,
    allow_underspend: bool = False,
) -> float:
    """Spend-as-you-go rate: the largest ``q`` with ``ε([(σ, q_sav, n_sav), (σ, q, n_spe)], δ) <= eps``.

    Args:
        allow_underspend: when even ``q = 1`` cannot spend what was saved, return ``1.0`` (the client
            under-spends, which is safe) instead of raising — as a uniform client whose ``q_uni``
            reaches 1 does.

    Raises:
        BudgetInfeasibleError: the saving phase alone exceeds ``eps``, or (without ``allow_underspend``)
            ``q <= 1`` cannot spend what was saved (save less: larger ``rho`` or a later transition).
    """
    orders = tuple(orders)
    if spending_steps <= 0:
        raise BudgetInfeasibleError("no spending rounds: transition must be < rounds")

    def f(q: float) -> float:
        return _eps_two_phase(q_saving, saving_steps, q, spending_steps, sigma, delta, orders)

    if f(0.0) > eps:
        raise BudgetInfeasibleError(
            f"the saving phase alone (q={q_saving:.6g} for {saving_steps} steps) spends {f(0.0):.4g} > eps={eps}"
        )
    if f(1.0) <= eps:
        if allow_underspend:
            return 1.0
        raise BudgetInfeasibleError(
            f"even q=1 in the {spending_steps} spending steps spends only {f(1.0):.4g} < eps={eps}: the saved "
            "budget cannot be spent; use a larger rho or a later transition round"
        )
    return _largest_feasible(f, eps)


def make_schedule(
    eps: float,
    delta: float,
    sigma: float,
    rounds: int,
    local_steps: int,
    transition: int | None = None,
    rho: float = 1.0,
    orders: Sequence[float] = DEFAULT_ORDERS,
    *,
    order: str = "save-first",
) -> Schedule:
    """One client's time-adaptive schedule (Algorithm 1, spend-as-you-go).

    Args:
        eps, delta: the client's budget.
        sigma: noise multiplier ``σ``.
        rounds: ``T``.
        local_steps: ``K`` DP-SGD steps per round.
        transition: ``τ``: rounds ``1..τ`` save, ``τ+1..T`` spend; default ``⌊T/2⌋``.
        rho: saving factor ``ρ ∈ (0, 1]``; ``ρ = 1`` gives the uniform (IDP-FedAvg) schedule.
        order: ``"save-first"`` (the paper's) or ``"spend-first"``: the same rates in reverse time
            order, so the same ``ε`` (RDP composition does not depend on the order).

    Returns:
        :class:`Schedule` with ``rates`` of shape ``(T,)``; ``q_sav <= q_uni <= q_spe``.

    Raises:
        BudgetInfeasibleError: ``ε`` cannot be met at ``q <= 1`` (message names the smallest
            feasible ``σ`` and the largest feasible number of rounds). A saved budget that even
            ``q = 1`` cannot spend is not an error: the spending rate is capped at 1 and the client
            under-spends (warned), as a uniform client whose ``q_uni`` reaches 1.
        ValueError: bad ``rounds``, ``local_steps``, ``transition`` or ``rho``.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if local_steps < 1:
        raise ValueError(f"local_steps must be >= 1, got {local_steps}")
    if not (0 < rho <= 1):
        raise ValueError(f"rho must lie in (0, 1], got {rho}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    for name, v in (("eps", eps), ("delta", delta), ("sigma", sigma)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    tau = rounds // 2 if transition is None else int(transition)
    if not (0 <= tau < rounds):
        raise ValueError(f"transition must lie in [0, rounds), got {tau} with rounds={rounds}")
    orders = tuple(orders)
    total = rounds * local_steps
    q_uni = uniform_rate(eps, delta, sigma, total, orders)
    if q_uni >= 1.0:
        warnings.warn(
            f"eps={eps:g} is loose: full batches (q=1) for all {total} steps spend less than it; the "
            "client cannot spend its whole budget (lower sigma or add rounds)", UserWarning, stacklevel=2)
    if rho == 1.0 or tau == 0:
        rates = np.full(rounds, q_uni)
        return Schedule(rates, float(sigma), int(local_steps), float(eps), float(delta), 0, 1.0,
                        q_uni, q_uni, q_uni, orders, "save-first")
    q_sav = rho * q_uni
    q_spe = spend_rate(eps, delta, sigma, q_sav, tau * local_steps, (rounds - tau) * local_steps, orders,
                       allow_underspend=True)
    if q_spe >= 1.0:
        spent = _eps_two_phase(q_sav, tau * local_steps, 1.0, (rounds - tau) * local_steps, sigma, delta, orders)
        warnings.warn(
            f"eps={eps:g} with rho={rho:g}: even q=1 in the {rounds - tau} spending rounds cannot spend what was "
            f"saved; the spending rate is capped at 1 and the client under-spends (eps {spent:.4f} of {eps:g}; "
            "use a larger rho or a later transition to spend it)", UserWarning, stacklevel=2)
    rates = np.concatenate([np.full(tau, q_sav), np.full(rounds - tau, q_spe)])
    if order == "spend-first":
        rates = rates[::-1].copy()
    return Schedule(rates, float(sigma), int(local_steps), float(eps), float(delta), tau, float(rho),
                    q_uni, q_sav, q_spe, orders, order)


def rate_for_round(schedule: Schedule, ran_rounds: Sequence[int], ran_rates: Sequence[float], round_: int) -> float:
    """The rate a client uses in round ``t`` given what its accountant booked so far ("as you go").

    With no missed round (``ran_rounds == [1, ..., t-1]`` at the planned rates) this is the planned
    ``q_t``. After missed rounds the client re-solves: a saving round keeps ``q_sav``; a free round
    (spending, or any round of a uniform schedule) gets the largest ``q <= 1`` such that the booked
    history, the remaining saving rounds and all remaining free rounds at ``q`` spend at most ``ε_n``
    (spec, schedule step 4, "as-you-go" variant). So a client never overspends, and a missed round's
    budget is spent later instead of lost.

    Args:
        schedule: the client's planned :class:`Schedule`.
        ran_rounds: rounds (1-based) the client actually trained in, ascending.
        ran_rates: the rates it booked in them (same length).
        round_: ``t``, 1-based, ``<= T``.

    Returns:
        ``q_t`` in ``[0, 1]`` (``0.0``: nothing left to spend in this round).

    Raises:
        ValueError: ``t`` outside ``1..T``, a round run twice or not before ``t``, length mismatch.
    """
    t, big_t = int(round_), schedule.rounds
    if not (1 <= t <= big_t):
        raise ValueError(f"round {t} is outside the schedule's rounds 1..{big_t}")
    ran_rounds = [int(r) for r in ran_rounds]
    if len(ran_rounds) != len(ran_rates):
        raise ValueError(f"{len(ran_rounds)} rounds but {len(ran_rates)} rates booked")
    if any(b <= a for a, b in zip(ran_rounds, ran_rounds[1:])) or any(r >= t or r < 1 for r in ran_rounds):
        raise ValueError(f"booked rounds {ran_rounds} must be distinct, ascending and before round {t}")
    planned = schedule.rates
    if ran_rounds == list(range(1, t)) and all(float(q) == float(planned[r - 1]) for r, q in zip(ran_rounds, ran_rates)):
        return float(planned[t - 1])
    free = schedule.free
    if not free[t - 1]:
        return float(planned[t - 1])
    sig, k, orders = schedule.sigma, schedule.local_steps, schedule.orders
    base = np.zeros(len(orders))
    for q in ran_rates:
        base += k * rdp_per_step(sig, float(q), orders)
    for s in range(t, big_t):  # later rounds (0-based index s = round s+1)
        if not free[s]:
            base += k * rdp_per_step(sig, float(planned[s]), orders)
    n_free = 1 + int(free[t:].sum())

    def f(q: float) -> float:
        return epsilon_from_rdp(base + n_free * k * rdp_per_step(sig, q, orders), schedule.delta, orders)

    if f(0.0) > schedule.epsilon:
        return 0.0
    if f(1.0) <= schedule.epsilon:
        return 1.0
    return _largest_feasible(f, schedule.epsilon)


def assign_saving_factors(eps_list: Sequence[float], rhos: Sequence[float], reverse: bool = False) -> list[float]:
    """Permutation rule: the smallest saving factor (most saving) goes to the strictest budget.

    Args:
        eps_list: budgets ``ε_n`` of the ``N`` clients.
        rhos: a multiset of ``N`` saving factors in ``(0, 1]``.
        reverse: the ablation: the *relaxed* clients save most.

    Returns:
        ``list[float]`` of length ``N`` aligned with ``eps_list`` (ties in ``ε`` keep input order).

    Raises:
        ValueError: length mismatch, a ``ρ`` outside ``(0, 1]`` or an ``ε`` that is not finite and positive.

    Example:
        ``assign_saving_factors([4, 1, 2], [0.5, 1.0, 0.25]) == [1.0, 0.25, 0.5]``
    """
    if len(eps_list) != len(rhos):
        raise ValueError(f"eps_list has {len(eps_list)} entries but rhos has {len(rhos)}")
    if any(not (math.isfinite(float(e)) and e > 0) for e in eps_list):
        raise ValueError(f"every budget epsilon must be finite and > 0, got {list(eps_list)}")
    if any(not (0 < r <= 1) for r in rhos):
        raise ValueError(f"every rho must lie in (0, 1], got {list(rhos)}")
    order = sorted(range(len(eps_list)), key=lambda i: (eps_list[i], i))  # stable ascending ε
    sorted_rhos = sorted(rhos, reverse=reverse)
    out = [0.0] * len(eps_list)
    for rank, i in enumerate(order):
        out[i] = float(sorted_rhos[rank])
    return out
