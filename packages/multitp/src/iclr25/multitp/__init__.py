"""iclr25-multitp: MultiTP — LLM choices in trolley dilemmas across 107 languages, compared with human
moral preferences (Jin, Kleiman-Weiner, Piatti et al., ICLR 2025, arXiv 2407.02273).

Generate the 460 Moral-Machine vignettes, translate them (pluggable, cached), query any text-generation
backend with each language's system prompt (resumable, concurrent), back-translate and parse the answers
(rule-based, then an optional LLM parser that never stops the run), aggregate six-dimension preferences,
and compare them with human preferences by country and language (misalignment, language sensitivity,
clustering). Names are imported lazily, so ``import iclr25.multitp`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    # spec
    "CATEGORIES": "spec", "DIMENSIONS": "spec", "LANGUAGES": "spec", "LABELS": "spec", "SYSTEM_PROMPTS": "spec",
    "POSITIVE_GROUP": "spec", "SAVING_PROB": "spec", "EXPECTED_COUNTS": "spec", "MODELS": "spec",
    "check_lang": "spec",
    # vignettes
    "Vignette": "vignettes", "generate_vignettes": "vignettes", "verbalize_group": "vignettes",
    "read_dataset_csv": "vignettes", "write_dataset_csv": "vignettes", "category_counts": "vignettes",
    # translation
    "translate": "translation", "back_translate": "translation", "translate_system_prompt": "translation",
    "IdentityTranslator": "translation", "TagTranslator": "translation", "CsvTranslator": "translation",
    "NLLBTranslator": "translation", "CachedTranslator": "translation", "NLLB_CODES": "translation",
    # querying
    "query_model": "query", "with_system_prompt": "query", "PAPER_GENERATION": "query",
    # parsing
    "parse_choice": "parser", "parse_choice_detailed": "parser", "rule_based_choice": "parser",
    "normalise_llm_label": "parser", "LLMParser": "parser", "ParsedChoice": "parser",
    # aggregation
    "aggregate": "aggregation", "aggregate_by": "aggregation", "Aggregate": "aggregation", "choice_records": "aggregation",
    "read_parsed_csv": "aggregation", "write_parsed_csv": "aggregation", "to_rows": "aggregation",
    # human side
    "human_by_country": "human", "human_by_language": "human", "approximate_weights": "human",
    "load_weights": "human", "LanguageWeights": "human", "global_human_vector": "human",
    "load_country_amce": "human",
    # metrics
    "misalignment": "metrics", "MisalignmentResult": "metrics", "language_sensitivity": "metrics",
    "sensitivity_per_dimension": "metrics", "cluster_languages": "metrics", "random_chooser_misalignment": "metrics",
    "l2_distance": "metrics", "pearson": "metrics",
    # agents / baselines
    "ScriptedAgent": "agents", "random_chooser": "agents", "always_left": "agents", "human_like_agent": "agents",
    # runner
    "run_query": "runner", "run_parse": "runner", "import_responses": "runner", "load_choices": "runner",
    "RetryPolicy": "runner", "RunCache": "runner", "StageResult": "runner",
    # testing
    "StubChatServer": "testing", "scripted_reply": "testing",
    # data
    "reference_values": "data", "data_path": "data", "MULTITP_DATA": "data",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
