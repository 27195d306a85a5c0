"""Sensitivity of preference models to dominant preferences (Xu & Kankanhalli, ICLR 2025).

The closed forms, region reports, MLE and file loading are numpy/scipy only (imported on first use). The torch parts —
:func:`sensitivity_matrix` (autograd checker) and the DPO experiments — are loaded lazily on first
access and need the ``[dpo]`` extra.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._checks import ProbabilityClippedWarning
from ._version import __version__

# every public name is imported on first access (module __getattr__), so `iclr25-pref-sensitivity
# --help` imports no scipy (it took 4.8 s); `import iclr25.pref_sensitivity` stays light.
_LAZY = {
    "analyze_file": "analyze",
    "analyze_preferences": "analyze",
    "amplifies": "closed_form",
    "bt_predict": "closed_form",
    "bt_sensitivity": "closed_form",
    "max_sensitivity": "closed_form",
    "sensitive_region_area": "closed_form",
    "PreferenceData": "data",
    "load_preferences": "data",
    "bt_mle_experiment": "experiments",
    "MLEDoesNotExistError": "mle",
    "MLEExistenceWarning": "mle",
    "fit_bt": "mle",
    "fit_bt_counts": "mle",
    "fit_pl": "mle",
    "wins_matrix": "mle",
    "pl_log_prob": "plackett_luce",
    "pl_top1_prob": "plackett_luce",
    "pl_tuple_predict": "plackett_luce",
    "pl_tuple_sensitivity": "plackett_luce",
    "SensitivityReport": "regions",
    "check_preference_matrix": "regions",
    "scores_to_matrix": "regions",
    "sensitive_triples": "regions",
    "sensitive_tuples": "regions",
    "sensitivity_matrix": "autograd",
    "bt_sensitivity_autograd": "autograd",
    "pl_tuple_sensitivity_autograd": "autograd",
    "check_closed_form": "crosscheck",
    "dpo_chain_experiment": "dpo",
    "dpo_tabular": "dpo",
    "train_dpo_lm": "dpo",
    "make_chain_data": "dpo",
    "tiny_gpt2_options": "dpo",
    "tokenize_options": "dpo",
}

__all__ = [
    "__version__",
    "ProbabilityClippedWarning",
    "bt_predict",
    "bt_sensitivity",
    "max_sensitivity",
    "amplifies",
    "sensitive_region_area",
    "pl_log_prob",
    "pl_top1_prob",
    "pl_tuple_predict",
    "pl_tuple_sensitivity",
    "SensitivityReport",
    "check_preference_matrix",
    "scores_to_matrix",
    "sensitive_triples",
    "sensitive_tuples",
    "MLEDoesNotExistError",
    "MLEExistenceWarning",
    "wins_matrix",
    "fit_bt",
    "fit_bt_counts",
    "fit_pl",
    "PreferenceData",
    "load_preferences",
    "analyze_preferences",
    "analyze_file",
    "bt_mle_experiment",
    *_LAZY,
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
