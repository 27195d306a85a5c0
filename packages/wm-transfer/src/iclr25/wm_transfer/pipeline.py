"""Former home of the attack run, the evaluation of a run and the comparison; split by job into
:mod:`.attack_run` (the ``attack`` command), :mod:`.evaluate_run` (``evaluate``) and :mod:`.comparison`
(``compare`` and the reproduction's comparison job). The names stay importable from here."""

from __future__ import annotations

from .attack_run import RESUME_KEYS, load_model, run_attack, watermark_images
from .comparison import comparison_table, mean_sd, run_comparison, surrogate_subsets
from .evaluate_run import evaluate_run

__all__ = ["load_model", "watermark_images", "surrogate_subsets", "run_attack", "evaluate_run",
           "run_comparison", "comparison_table", "mean_sd", "RESUME_KEYS"]
