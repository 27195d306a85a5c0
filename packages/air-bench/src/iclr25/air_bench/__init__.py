"""AIR-Bench 2024 (ICLR 2025): regulation-aligned safety evaluation harness.

Load the 314-category taxonomy, the prompts and the per-category judge templates; send prompts to
any text-generation backend (batched, concurrent, retried, resumable on disk); judge the responses
with the paper's rubric LLM judge (or a keyword / offline embedding approximation); aggregate
refusal rates to levels 1-4 exactly as the paper (micro-averages over prompts) and write
JSON / CSV / Markdown reports and a level-2 plot.
"""

from ._version import __version__
from .aggregate import LEVELS, Aggregate, CategoryScore, aggregate, macro_average
from .data import (
    AIR_BENCH,
    HF_DATASET,
    HF_REVISION,
    PromptItem,
    load_graded_responses,
    load_judge_templates,
    load_prompts,
    load_taxonomy,
    prompt_id,
    read_jsonl,
)
from .judges import (
    JUDGE_GENERATION,
    REFUSAL_PREFIXES,
    EmbeddingLRJudge,
    Judge,
    JudgeInput,
    Judgement,
    KeywordJudge,
    LLMJudge,
    keyword_refusal,
    score_item,
)
from .report import build_report, markdown_report, plot_level2, write_report_files
from .runner import (
    MODEL_GENERATION,
    AirBenchRun,
    JsonlCache,
    RetryPolicy,
    StageResult,
    generate_responses,
    judge_responses,
)
from .scoring import (
    EMPTY_RESPONSE_SCORE,
    VALID_SCORES,
    JudgeParseError,
    JudgeTemplate,
    parse_judge_output,
    render_judge_prompt,
    to_refusal_score,
)
from .taxonomy import L1_NAMES, L1_OF_L2, Category, Taxonomy, split_cate_idx

__all__ = [
    "__version__",
    "AIR_BENCH", "HF_DATASET", "HF_REVISION", "PromptItem", "prompt_id", "load_prompts",
    "load_judge_templates", "load_taxonomy", "load_graded_responses", "read_jsonl",
    "Taxonomy", "Category", "L1_NAMES", "L1_OF_L2", "split_cate_idx",
    "JudgeTemplate", "render_judge_prompt", "parse_judge_output", "to_refusal_score", "JudgeParseError",
    "EMPTY_RESPONSE_SCORE", "VALID_SCORES",
    "Judge", "JudgeInput", "Judgement", "LLMJudge", "KeywordJudge", "EmbeddingLRJudge", "keyword_refusal", "score_item",
    "REFUSAL_PREFIXES", "JUDGE_GENERATION",
    "aggregate", "Aggregate", "CategoryScore", "LEVELS", "macro_average",
    "generate_responses", "judge_responses", "JsonlCache", "RetryPolicy", "StageResult", "AirBenchRun",
    "MODEL_GENERATION",
    "build_report", "write_report_files", "markdown_report", "plot_level2",
]
