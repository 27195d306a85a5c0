"""Configs of the CLI commands, with the paper's / HELM's defaults (each field cites its source)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .data import HF_REVISION

__all__ = ["RunConfig", "JudgeConfig", "ReportConfig", "ReproduceConfig", "BenchConfig"]

_DEFAULT_BATCH = {"openai": (1, 16), "hf": (16, 1), "mock": (32, 1)}


@dataclass
class RunConfig:
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
    """hf = the full 5,694 prompts from the hub (falls back to the mirrored 632-prompt sample when
    unreachable), mirror = the sample, or a .jsonl/.csv file."""
    revision: str = HF_REVISION
    """Hub revision of stanford-crfm/air-bench-2024 (pinned)."""
    limit: int | None = None
    """Use only the first N prompts (after --categories)."""
    categories: tuple[str, ...] = ()
    """Keep only these categories: ids like 3 (level-2), 3.8 (level-3) or 3.8.1 (level-4)."""
    out: Path = Path("runs/air-bench")
    """Output folder (responses.jsonl, run_config.json)."""
    resume: bool = False
    """Continue an interrupted run: prompts already in responses.jsonl are skipped (never re-paid)."""
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
    device: str = "auto"
    """hf backend: torch device."""
    chat_template: bool = True
    """hf backend: wrap each prompt as one user turn with the tokenizer's chat template (paper: single
    user turn, no system prompt)."""
    mock_refusal_prob: float = 0.5
    """mock backend: refusal probability of every level-2 category."""
    seed: int = 0
    """Seed (sampling when temperature > 0; mock draws)."""
    quiet: bool = False
    """No progress bar."""

    def __post_init__(self) -> None:
        if self.backend != "mock" and not self.model:
            raise ValueError("--model is required for the openai and hf backends")
        b, c = _DEFAULT_BATCH[self.backend]
        self.batch_size = self.batch_size or b
        self.concurrency = self.concurrency or c
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError("--batch-size and --concurrency must be >= 1")
        if not 0 <= self.mock_refusal_prob <= 1:
            raise ValueError("--mock-refusal-prob must be in [0, 1]")


@dataclass
class JudgeConfig:
    """`judge`: score cached responses with a judge (out/scores.jsonl)."""

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
    convention: Literal["2024-06", "2024-07"] = "2024-06"
    """Score direction of the templates: 2024-06 says 0 = refusal (refusal score = 1 - judge score);
    2024-07 (HF revision 976d9fbb, HELM) says 1 = refusal."""
    strict_parse: bool = False
    """HELM's exact parser instead of the lenient one (neither ever guesses a score)."""
    judge_max_tokens: int = 64
    """Judge answer length (HELM: 64; the repo notebooks: 512)."""
    train: str = "mirror"
    """embedding judge: graded responses to train on (JSONL with response, refusal_score)."""
    out: Path | None = None
    """Output folder (default: the folder of --responses)."""
    resume: bool = False
    """Continue: items already in scores.jsonl are not judged again."""
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
    quiet: bool = False
    """No progress bar."""


@dataclass
class ReportConfig:
    """`report`: refusal-rate tables per level (JSON, CSV, Markdown) and a level-2 plot."""

    scores: tuple[Path, ...] = ()
    """One or more scores.jsonl files (one per model, or several models in one file)."""
    out: Path = Path("runs/air-bench/report")
    """Output folder."""
    plot: bool = True
    """Write level2.png (needs matplotlib, extra [plot])."""
    taxonomy: str = "mirror"
    """taxonomy.csv for category names (mirror = the shipped mirror file)."""

    def __post_init__(self) -> None:
        if not self.scores:
            raise ValueError("--scores needs at least one scores.jsonl")


@dataclass
class ReproduceConfig:
    """`reproduce`: the CPU-scale reproduction (writes results.json / results.md)."""

    quick: bool = False
    """Quick mode (< 1 min on 2 cores): embedding judge on 160 responses."""
    out: Path = Path("results/air-bench")
    """Output folder."""


@dataclass
class BenchConfig:
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
    out: Path = Path("runs/air-bench/bench")
    """Output folder (throughput.json)."""
