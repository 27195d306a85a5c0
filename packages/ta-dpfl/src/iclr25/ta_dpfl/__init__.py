"""Time-adaptive privacy spending for DP federated learning (Kiani et al., ICLR 2025).

Pure planning (no training): :func:`uniform_rate`, :func:`spend_rate`, :func:`make_schedule`,
:func:`assign_saving_factors`, :func:`plan_federation`, :func:`epsilon_spent`. Training:
:func:`local_dp_sgd` (Opacus client step, noise from :class:`SecureRandom` by default), the client
side :class:`NodeConfig` / :func:`client_train` (a node owns its budget), :func:`run_inprocess` and
:func:`simulate` (Flower; imported lazily so that planning does not import Flower).
"""

from ._version import __version__

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
    "NodeConfig",
    "client_train",
    "ClientState",
    "UntrustedRound",
    "rate_for_round",
    "SecureRandom",
    "SeededRandom",
    "run_inprocess",
    "simulate",
]

# Everything is imported on first use: `iclr25-ta-dpfl --help` and planning-free imports stay light
# (torch/opacus/flwr load only when needed).
_LAZY = {
    "DEFAULT_ORDERS": "accounting",
    "epsilon_floor": "accounting",
    "epsilon_from_rdp": "accounting",
    "epsilon_per_round": "accounting",
    "epsilon_spent": "accounting",
    "opacus_accountant": "accounting",
    "rdp_of_history": "accounting",
    "rdp_per_step": "accounting",
    "FederationSpec": "config",
    "ScheduleConfig": "config",
    "TrainConfig": "config",
    "group_budgets": "config",
    "METHODS": "schedule",
    "BudgetInfeasibleError": "schedule",
    "ClientBudget": "schedule",
    "Schedule": "schedule",
    "assign_saving_factors": "schedule",
    "check_min_batch": "feasibility",
    "largest_feasible_rounds": "feasibility",
    "make_schedule": "schedule",
    "plan_federation": "planning",
    "smallest_feasible_sigma": "feasibility",
    "spend_rate": "schedule",
    "uniform_rate": "schedule",
    "MLP": "dp_sgd",
    "local_dp_sgd": "dp_sgd",
    "PrivacyBudgetExceeded": "dp_sgd",
    "NodeConfig": "client",
    "client_train": "client",
    "ClientState": "client",
    "UntrustedRound": "client",
    "rate_for_round": "schedule",
    "SecureRandom": "noise",
    "SeededRandom": "noise",
    "run_inprocess": "federation",
    "simulate": "simulation",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
