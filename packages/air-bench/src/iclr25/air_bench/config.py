"""Configs of the CLI commands, with the paper's / HELM's defaults (each field cites its source)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

HF_REVISION = "58d507aa176c4b6a46d2050645eb0ee6ae71442c"
"""HF revision of stanford-crfm/air-bench-2024 (config default, 5,694 rows); == data.HF_REVISION."""


def _positive(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
        raise ValueError(f"--{name.replace('_', '-')}={v!r} must be finite and > 0")


def _nonneg(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
        raise ValueError(f"--{name.replace('_', '-')}={v!r} must be finite and >= 0")

__all__ = ["RunConfig", "JudgeConfig", "ReportConfig", "ReproduceConfig", "BenchConfig"]

_DEFAULT_BATCH = {"openai": (1, 16), "hf": (16, 1), "mock": (32, 1)}


@dataclass(kw_only=True)
class RunConfig(CommonOptions, SeedOption):
    """`run`: send AIR-Bench prompts to a model and cache the responses (out/responses.jsonl)."""

    model: str = ""
    """Model under test: the server's model name (openai), a HF id or local path (hf); unused for mock."""
    backend: Literal["openai", "hf", "mock"] = "openai"
    """openai = any OpenAI-compatible endpoint (OpenAI, vLLM `vllm serve`, ...); hf = local transformers
    model (extra [hf]); mock = a synthetic refuser (testing)."""
    base_url: str | None = None
    """Endpoint `.../v1` (openai backend); default $OPENAI_BASE_URL, else OpenAI's."""
    api_key_env: str = "OPENAI_API_KEY"
    """NAME of the environment variable that holds the API key (the key itself is never a flag, never
    logged, never written)."""
    prompts: str = "hf"
    """hf = the full 5,694 prompts from the hub or its cache (extra [hub]; an error, never a silent
    fallback, when unavailable), mirror = the 632-prompt sample (not the paper's set), or a .jsonl/.csv file."""
    revision: str = HF_REVISION
    """Hub revision of stanford-crfm/air-bench-2024 (pinned)."""
    limit: int | None = None
    """Use only the first N prompts (after --categories)."""
    categories: tuple[str, ...] = ()
    """Keep only these categories: ids like 3 (level-2), 3.8 (level-3) or 3.8.1 (level-4)."""
    resume: bool = False
    """Continue an interrupted run: prompts already in responses.jsonl are skipped (never re-paid).
    The model, backend, prompt set and decoding must match the first run's (run_config.json)."""
    batch_size: int | None = None
    """Prompts per backend call (default: openai 1, hf 16, mock 32)."""
    concurrency: int | None = None
    """Backend calls in flight (default: openai 16, hf 1, mock 1)."""
    max_new_tokens: int = 512
    """Response length cap (HELM: 512)."""
    temperature: float = 0.0
    """Decoding temperature (HELM: 0)."""
    timeout_s: float = 60.0
    """HTTP timeout per request (seconds)."""
    max_retries: int = 3
    """Bounded retries per batch, exponential backoff with jitter."""
    backoff_s: float = 1.0
    """First retry wait (seconds; doubles per retry, capped at 30 s)."""
    chat_template: bool = True
    """hf backend: wrap each prompt as one user turn with the tokenizer's chat template (paper: single
    user turn, no system prompt)."""
    mock_refusal_prob: float = 0.5
    """mock backend: refusal probability of every level-2 category."""
    mock_latency_s: float = 0.0
    """mock backend: seconds per prompt (testing interrupted runs)."""
    mock_blocked_marker: str | None = None
    """mock backend: prompts containing this text are refused by a simulated HTTP 400 content filter."""

    def __post_init__(self) -> None:
        if self.backend != "mock" and not self.model:
            raise ValueError("--model is required for the openai and hf backends")
        b, c = _DEFAULT_BATCH[self.backend]
        self.batch_size = b if self.batch_size is None else self.batch_size  # 0 is refused, not the default
        self.concurrency = c if self.concurrency is None else self.concurrency
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError("--batch-size and --concurrency must be >= 1")
        if not 0 <= self.mock_refusal_prob <= 1:
            raise ValueError("--mock-refusal-prob must be in [0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens={self.max_new_tokens} must be >= 1")
        _nonneg("temperature", self.temperature)
        _positive("timeout_s", self.timeout_s)
        _nonneg("backoff_s", self.backoff_s)
        _nonneg("mock_latency_s", self.mock_latency_s)
        if self.max_retries < 0:
            raise ValueError(f"--max-retries={self.max_retries} must be >= 0")


@dataclass(kw_only=True)
class JudgeConfig(CommonOptions):
    """`judge`: score cached responses with a judge (out/scores.jsonl). Exit status: 0 = every item
    judged; 1 = failed calls (rerun with --resume); 3 = all calls done but some answers had no valid
    score (judge failures; the count is printed; rerun with --resume --rejudge-failures)."""

    responses: Path = Path("runs/air-bench/responses.jsonl")
    """responses.jsonl written by `run` (or any JSONL with model, id, cate-idx, prompt, response)."""
    judge: Literal["llm", "keyword", "embedding"] = "llm"
    """llm = the paper's rubric judge; keyword = refusal-prefix matcher (biased low); embedding =
    offline MiniLM + logistic regression approximation (extra [embed]; not comparable to the paper)."""
    judge_model: str = "gpt-4o-2024-05-13"
    """LLM judge model (paper/HELM: gpt-4o-2024-05-13). Results with another judge are not comparable."""
    judge_backend: Literal["openai", "hf", "mock"] = "openai"
    """Backend of the LLM judge (mock = rule-based, for tests)."""
    judge_base_url: str | None = None
    """Judge endpoint `.../v1`; default $OPENAI_BASE_URL, else OpenAI's."""
    api_key_env: str = "OPENAI_API_KEY"
    """NAME of the environment variable holding the judge's API key."""
    templates: str = "mirror"
    """Judge-template CSV (cate-idx, ..., judge_prompt); mirror = the June-2024 set (314)."""
    convention: Literal["auto", "2024-06", "2024-07"] = "auto"
    """Score direction of the templates: auto = read from the rubrics; 2024-06 says 0 = refusal
    (refusal score = 1 - judge score); 2024-07 (HF revision 976d9fbb, HELM) says 1 = refusal. A
    convention the rubrics contradict is an error (it would invert every rate)."""
    strict_parse: bool = False
    """HELM's exact parser instead of the lenient one (neither ever guesses a score)."""
    judge_max_tokens: int = 64
    """Judge answer length (HELM: 64; the repo notebooks: 512)."""
    train: str = "mirror"
    """embedding judge: graded responses to train on (JSONL with response, refusal_score)."""
    resume: bool = False
    """Continue: items already in scores.jsonl are not judged again (same judge, convention and
    templates only; anything else is refused)."""
    rejudge_failures: bool = False
    """With --resume: judge again the items whose judge answer could not be parsed."""
    limit: int | None = None
    """Judge only the first N responses (after --categories)."""
    categories: tuple[str, ...] = ()
    """Keep only these categories (ids like 3, 3.8, 3.8.1)."""
    batch_size: int = 1
    """Items per judge call."""
    concurrency: int = 16
    """Judge calls in flight."""
    timeout_s: float = 60.0
    """HTTP timeout per request (seconds)."""
    max_retries: int = 3
    """Bounded retries per batch."""
    backoff_s: float = 1.0
    """First retry wait (seconds)."""
    mock_malformed_every: int | None = None
    """mock judge backend: every n-th answer is malformed (testing failures and --rejudge-failures)."""
    mock_latency_s: float = 0.0
    """mock judge backend: seconds per item (testing interrupted runs)."""

    def __post_init__(self) -> None:
        if self.rejudge_failures and not self.resume:
            raise ValueError("--rejudge-failures needs --resume (it re-judges the failures of an existing "
                             "scores.jsonl)")
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError("--batch-size and --concurrency must be >= 1")
        if self.judge_max_tokens < 1:
            raise ValueError(f"--judge-max-tokens={self.judge_max_tokens} must be >= 1")
        _positive("timeout_s", self.timeout_s)
        _nonneg("backoff_s", self.backoff_s)
        _nonneg("mock_latency_s", self.mock_latency_s)
        if self.max_retries < 0:
            raise ValueError(f"--max-retries={self.max_retries} must be >= 0")


@dataclass(kw_only=True)
class ReportConfig(CommonOptions):
    """`report`: refusal-rate tables per level (JSON, CSV, Markdown) and a level-2 plot."""

    scores: tuple[Path, ...] = ()
    """One or more scores.jsonl files (one per model, or several models in one file)."""
    plot: bool = True
    """Write level2.png (needs matplotlib, extra [plot])."""
    taxonomy: str = "mirror"
    """taxonomy.csv for category names (mirror = the shipped mirror file)."""

    def __post_init__(self) -> None:
        if not self.scores:
            raise ValueError("--scores needs at least one scores.jsonl")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """`reproduce`: the CPU-scale reproduction (writes results.json / results.md); --quick: embedding
    judge on 160 responses, under a minute on 2 cores."""

    workers: int | None = None
    """Processes the jobs (scoring, offline judge, one per mock seed) run in (default: from the CPUs;
    1: in-process)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (records/<job>.json); changed settings are refused."""


@dataclass(kw_only=True)
class BenchConfig(CommonOptions):
    """`bench`: throughput (prompts/s) batched/concurrent vs one prompt at a time."""

    http_prompts: int = 64
    """Prompts sent to the local stub HTTP server in each mode."""
    latency_s: float = 0.05
    """Simulated per-request latency of the stub server (seconds)."""
    concurrency: int = 16
    """Requests in flight in the concurrent mode."""
    tiny_prompts: int = 32
    """Prompts given to the local tiny GPT-2 in each mode."""
    tiny_batch: int = 32
    """Batch size of the batched local mode."""
    max_new_tokens: int = 32
    """Tokens generated per prompt by the tiny model."""
