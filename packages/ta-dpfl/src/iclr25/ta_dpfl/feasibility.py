"""Feasibility of a schedule: the smallest σ and the largest number of rounds that meet a budget, and the
spec's guard on the expected batch ``q·m_n`` (checked before any training, with the way out named)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from scipy.optimize import brentq

from .accounting import DEFAULT_ORDERS, epsilon_floor, epsilon_from_rdp, rdp_per_step
from .schedule import BudgetInfeasibleError, Schedule, make_schedule

__all__ = ["smallest_feasible_sigma", "largest_feasible_rounds", "check_min_batch"]


def smallest_feasible_sigma(epsilon: float, delta: float, steps: int, q: float = 1.0,
                            orders: Sequence[float] = DEFAULT_ORDERS) -> float:
    """Smallest ``σ`` for which ``steps`` steps at Poisson rate ``q`` spend at most ``ε``."""
    orders = tuple(orders)

    def eps_of(s: float) -> float:
        return epsilon_from_rdp(steps * rdp_per_step(s, q, orders), delta, orders)

    floor = epsilon_floor(delta, orders)
    if epsilon <= floor:
        return float("inf")
    hi = 1.0
    while eps_of(hi) > epsilon:
        hi *= 2
        if hi > 1e6:
            return float("inf")
    lo = hi / 2
    while lo > 0.1 and eps_of(lo) <= epsilon:  # opacus' RDP series is unstable for tiny sigma
        lo /= 2
    if eps_of(lo) <= epsilon:
        return float(lo)
    s = brentq(lambda v: eps_of(v) - epsilon, lo, hi, xtol=1e-10)
    while eps_of(s) > epsilon:
        s *= 1 + 1e-9
    return float(s)


def largest_feasible_rounds(epsilon: float, delta: float, sigma: float, local_steps: int, q: float = 1.0,
                            orders: Sequence[float] = DEFAULT_ORDERS) -> int:
    """Largest ``T`` for which ``T·K`` steps at rate ``q`` and ``σ`` spend at most ``ε`` (0 if none)."""
    orders = tuple(orders)
    per = rdp_per_step(sigma, q, orders) * local_steps

    def ok(t: int) -> bool:
        return epsilon_from_rdp(t * per, delta, orders) <= epsilon

    if not ok(1):
        return 0
    hi = 1
    while ok(hi * 2) and hi < 2**30:
        hi *= 2
    lo, hi = hi, hi * 2  # ok(lo), not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _min_expected_batch_of(schedule: Schedule, num_examples: int) -> float:
    return float(schedule.rates.min()) * num_examples


def _feasible_at(schedule: Schedule, num_examples: int, min_expected_batch: float, *, sigma: float | None = None,
                 rounds: int | None = None) -> bool:
    """Whether the schedule re-solved with another ``σ`` or ``T`` meets the expected-batch guard."""
    t = schedule.rounds if rounds is None else rounds
    if t < 1:
        return False
    tau = schedule.transition if schedule.transition < t else t // 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = make_schedule(schedule.epsilon, schedule.delta, schedule.sigma if sigma is None else sigma, t,
                              schedule.local_steps, tau if schedule.transition else 0, schedule.rho,
                              schedule.orders, order=schedule.order)
    except BudgetInfeasibleError:
        return False
    return _min_expected_batch_of(s, num_examples) >= min_expected_batch


def check_min_batch(schedule: Schedule, num_examples: int, min_expected_batch: float) -> None:
    """Error before training when a schedule's smallest rate gives expected batches ``q·m_n`` below
    ``min_expected_batch`` (the spec's guard ``q·m_n >= 20``): the budget cannot be met at a usable
    batch size with this ``σ`` and ``T``.

    The suggested ``σ`` is rounded **up** (4 decimals) and the suggested number of rounds down, and
    both are re-checked by solving the schedule again with them: the suggestion is feasible.

    Raises:
        BudgetInfeasibleError: naming the smallest feasible ``σ`` (same ``T``) and the largest
            feasible number of rounds (same ``σ``).
    """
    if min_expected_batch <= 0:
        return
    if _min_expected_batch_of(schedule, num_examples) >= min_expected_batch:
        return
    q_min = float(schedule.rates.min())
    rho = schedule.rho if schedule.transition else 1.0
    q_req = min_expected_batch / num_examples / rho  # uniform rate needed so that rho*q_uni*m >= min
    steps = schedule.rounds * schedule.local_steps
    if q_req > 1:
        raise BudgetInfeasibleError(
            f"client with {num_examples} records cannot reach an expected batch of {min_expected_batch:g} "
            f"(needs q={q_req:.3g} > 1); lower min_expected_batch or give the client more data"
        )
    s_min = smallest_feasible_sigma(schedule.epsilon, schedule.delta, steps, q_req, schedule.orders)
    s_sug = math.ceil(s_min * 1e4) / 1e4 if math.isfinite(s_min) else math.inf
    tries = 0
    while math.isfinite(s_sug) and not _feasible_at(schedule, num_examples, min_expected_batch, sigma=s_sug):
        tries += 1  # rounding / the solver's feasible side can leave the guard a hair short
        s_sug = math.ceil(s_sug * (1.0 + 1e-4 * 2 ** min(tries, 30)) * 1e4) / 1e4
        if tries > 60:
            s_sug = math.inf
    t_max = largest_feasible_rounds(schedule.epsilon, schedule.delta, schedule.sigma, schedule.local_steps,
                                    q_req, schedule.orders)
    while t_max > 0 and not _feasible_at(schedule, num_examples, min_expected_batch, rounds=t_max):
        t_max -= 1
    sigma_txt = f"{s_sug:.4f}" if math.isfinite(s_sug) else "none found"
    raise BudgetInfeasibleError(
        f"budget eps={schedule.epsilon:g} (delta={schedule.delta:g}) cannot be met with sigma={schedule.sigma:g}, "
        f"rounds={schedule.rounds}, local_steps={schedule.local_steps} at an expected batch >= "
        f"{min_expected_batch:g} (client with m={num_examples}, rho={rho:g} would get q*m="
        f"{q_min * num_examples:.2f}). Smallest feasible sigma: {sigma_txt}; largest feasible rounds: {t_max}."
    )
