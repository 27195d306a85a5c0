"""The CPU-scale safety tasks with known labels (spec §4.2) and the tiny aligned base model (spec §4.1), one
module per job, re-exported here:

* :mod:`.safety_task` — :class:`SafetyTask`, the template and the data mirror's files;
* :mod:`.synthetic_task` — :func:`make_synthetic_safety_task`;
* :mod:`.real_task` — :func:`make_real_safety_task` (SafeInstr + GSM8K);
* :mod:`.base_model` — :func:`word_tokenizer`, :func:`base_spec`, :func:`aligned_base`.
"""

from __future__ import annotations

from .base_model import aligned_base, base_spec, word_tokenizer
from .real_task import REAL_COMPLIANCE, REAL_REFUSAL_PREFIXES, make_real_safety_task
from .safety_task import SEAL_DATA, SPECIAL_TOKENS, TINY_TEMPLATE, SafetyTask, ev_b_texts
from .synthetic_task import ALPHABET, COMPLIANCE, COMPLIANCE_MARKERS, REFUSAL, make_synthetic_safety_task

__all__ = [
    "SafetyTask",
    "make_synthetic_safety_task",
    "make_real_safety_task",
    "word_tokenizer",
    "aligned_base",
    "base_spec",
    "SEAL_DATA",
    "TINY_TEMPLATE",
    "SPECIAL_TOKENS",
    "ALPHABET",
    "REFUSAL",
    "COMPLIANCE",
    "COMPLIANCE_MARKERS",
    "REAL_COMPLIANCE",
    "REAL_REFUSAL_PREFIXES",
    "ev_b_texts",
]
