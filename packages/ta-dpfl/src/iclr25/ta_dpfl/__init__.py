"""Time-adaptive privacy spending for DP federated learning (Kiani et al., ICLR 2025).

Pure planning (no training): :func:`uniform_rate`, :func:`spend_rate`, :func:`make_schedule`,
:func:`assign_saving_factors`, :func:`plan_federation`, :func:`epsilon_spent`. Training:
:func:`local_dp_sgd` (Opacus client step), :class:`TimeAdaptiveFedAvg` and :func:`simulate`
(Flower; imported lazily so that planning does not import Flower).
"""

from ._version import __version__
from .accounting import (
    DEFAULT_ORDERS,
    epsilon_floor,
    epsilon_from_rdp,
    epsilon_per_round,
    epsilon_spent,
    opacus_accountant,
    rdp_of_history,
    rdp_per_step,
)
from .config import FederationSpec, ReproduceConfig, ScheduleConfig, TrainConfig, group_budgets
from .schedule import (
    METHODS,
    BudgetInfeasibleError,
    ClientBudget,
    Schedule,
    assign_saving_factors,
    check_min_batch,
    largest_feasible_rounds,
    make_schedule,
    plan_federation,
    smallest_feasible_sigma,
    spend_rate,
    uniform_rate,
)

__all__ = [
    "__version__",
    "DEFAULT_ORDERS",
    "epsilon_floor",
    "epsilon_from_rdp",
    "epsilon_per_round",
    "epsilon_spent",
    "opacus_accountant",
    "rdp_of_history",
    "rdp_per_step",
    "FederationSpec",
    "ReproduceConfig",
    "ScheduleConfig",
    "TrainConfig",
    "group_budgets",
    "METHODS",
    "BudgetInfeasibleError",
    "ClientBudget",
    "Schedule",
    "assign_saving_factors",
    "check_min_batch",
    "largest_feasible_rounds",
    "make_schedule",
    "plan_federation",
    "smallest_feasible_sigma",
    "spend_rate",
    "uniform_rate",
    "MLP",
    "local_dp_sgd",
    "PrivacyBudgetExceeded",
    "TimeAdaptiveFedAvg",
    "simulate",
]

_LAZY = {
    "MLP": "dp_sgd",
    "local_dp_sgd": "dp_sgd",
    "PrivacyBudgetExceeded": "dp_sgd",
    "TimeAdaptiveFedAvg": "flower_app",
    "simulate": "flower_app",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
