"""Planning a federation: every client's schedule from its budget, the method and the public
hyperparameters, solved once per process and checked against the expected-batch guard."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from .feasibility import check_min_batch
from .schedule import (
    METHODS,
    BudgetInfeasibleError,
    ClientBudget,
    Schedule,
    assign_saving_factors,
    make_schedule,
)

__all__ = ["plan_federation"]


@functools.lru_cache(maxsize=512)
def _make_schedule_cached(eps, delta, sigma, rounds, local_steps, transition, rho, order) -> Schedule:
    # schedules are immutable and solving one costs ~0.5 s of RDP evaluations: a process solves each once
    return make_schedule(eps, delta, sigma, rounds, local_steps, transition, rho, order=order)


def plan_federation(
    budgets: Sequence[ClientBudget],
    method: str,
    sigma: float,
    rounds: int,
    local_steps: int,
    transition: int | None = None,
    rhos: Sequence[float] | None = None,
    min_expected_batch: float = 20.0,
    *,
    order: str = "save-first",
) -> list[Schedule]:
    """Schedules for all clients under one method.

    Args:
        budgets: one :class:`ClientBudget` per client.
        method: ``"dpfedavg"`` (all at the strictest ``ε``, uniform in time), ``"idp"`` (individual
            ``ε``, uniform), ``"ta"`` (individual ``ε``, saving factors ``rhos`` assigned by the
            permutation rule), ``"ta-reverse"`` (the reversed permutation), ``"ta-uniform"``
            (``rhos`` used as given, aligned with ``budgets``).
        sigma, rounds, local_steps, transition: see :func:`make_schedule`.
        rhos: ``N`` saving factors (for the ``ta*`` methods).
        min_expected_batch: error (:func:`check_min_batch`) when a client's smallest expected batch
            ``q · m_n`` falls below this (spec: 20); needs ``ClientBudget.num_examples``.
        order: ``"save-first"`` or ``"spend-first"`` (forced to ``spend-first`` by ``ta-spend-first``).

    Returns:
        ``list[Schedule]`` aligned with ``budgets``; every one spends at most its client's ``ε``.

    Raises:
        BudgetInfeasibleError: see :func:`make_schedule` (raised before any training).
        ValueError: unknown method or missing ``rhos``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    if sigma <= 0:
        raise BudgetInfeasibleError(f"sigma must be > 0, got {sigma}")
    eps = [b.epsilon for b in budgets]
    deltas = [b.delta for b in budgets]
    if method == "dpfedavg":
        eps = [min(eps)] * len(eps)
        rho_n = [1.0] * len(eps)
    elif method == "idp":
        rho_n = [1.0] * len(eps)
    else:
        if rhos is None:
            raise ValueError(f"method {method!r} needs rhos (one saving factor per client)")
        if method == "ta-uniform":
            if len(rhos) != len(eps):
                raise ValueError(f"rhos has {len(rhos)} entries for {len(eps)} clients")
            rho_n = [float(r) for r in rhos]
        else:
            rho_n = assign_saving_factors(eps, rhos, reverse=(method == "ta-reverse"))
        if method == "ta-spend-first":
            order = "spend-first"
    cache: dict[tuple, Schedule] = {}
    out = []
    for e, d, r, b in zip(eps, deltas, rho_n, budgets):
        key = (e, d, r)
        if key not in cache:
            cache[key] = _make_schedule_cached(float(e), float(d), float(sigma), int(rounds), int(local_steps),
                                               transition, float(r), order)
        s = cache[key]
        if b.num_examples is not None:
            check_min_batch(s, b.num_examples, min_expected_batch)
        out.append(s)
    return out
