"""Sensitivity of preference models to dominant preferences (Xu & Kankanhalli, ICLR 2025).

The closed forms, region reports, MLE and file loading are numpy/scipy only. The torch parts —
:func:`sensitivity_matrix` (autograd checker) and the DPO experiments — are loaded lazily on first
access and need the ``[dpo]`` extra.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._checks import ProbabilityClippedWarning
from ._version import __version__
from .analyze import analyze_file, analyze_preferences
from .closed_form import amplifies, bt_predict, bt_sensitivity, max_sensitivity, sensitive_region_area
from .data import PreferenceData, load_preferences
from .experiments import bt_mle_experiment
from .mle import MLEDoesNotExistError, MLEExistenceWarning, fit_bt, fit_bt_counts, fit_pl, wins_matrix
from .plackett_luce import pl_log_prob, pl_top1_prob, pl_tuple_predict, pl_tuple_sensitivity
from .regions import (
    SensitivityReport,
    check_preference_matrix,
    scores_to_matrix,
    sensitive_triples,
    sensitive_tuples,
)

_LAZY = {
    "sensitivity_matrix": "autograd",
    "bt_sensitivity_autograd": "autograd",
    "pl_tuple_sensitivity_autograd": "autograd",
    "check_closed_form": "autograd",
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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
