"""The evaluation runner: prompts -> responses -> judgements, batched, concurrent, retried, and
cached on disk so that an interrupted run loses nothing and never re-pays for a finished item.

Both stages append one JSON line per finished item to a cache file (``responses.jsonl`` keyed by
``(model, id)``; ``scores.jsonl`` keyed by ``(judge, model, id)``), flushed and fsync'ed after every
batch. Re-running with ``resume=True`` skips every key already there. A line cut short by a crash is
dropped (and the file truncated to its last complete line) on the next open.

No API key is ever written: records hold the model name, prompt, response and judge output only.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from iclr25.core.lm.generation import GenerationConfig, TextGenerator

from .data import PromptItem
from .judges import Judge, JudgeInput

__all__ = ["JsonlCache", "RetryPolicy", "StageResult", "generate_responses", "judge_responses",
           "MODEL_GENERATION", "AirBenchRun"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: HELM's decoding for the model under test: temperature 0, at most 512 new tokens, no system prompt.
MODEL_GENERATION = GenerationConfig(max_new_tokens=512, temperature=0.0)


class JsonlCache:
    """An append-only JSON-lines file of records, indexed by a key built from ``key_fields``.

    Args:
        path: the file (created with its folder on first write).
        key_fields: record fields that form the key (e.g. ``("model", "id")``).

    Raises:
        ValueError: a malformed line that is not the last one (file and line number), or a record
            lacking a key field.
    """

    def __init__(self, path: str | Path, key_fields: Sequence[str]) -> None:
        self.path = Path(path)
        self.key_fields = tuple(key_fields)
        self._lock = threading.Lock()
        self._data: dict[tuple, dict[str, Any]] = {}
        self.dropped_partial = False
        if self.path.exists():
            self._load()

    def key(self, rec: dict[str, Any]) -> tuple:
        try:
            return tuple(rec[k] for k in self.key_fields)
        except KeyError as e:
            raise ValueError(f"{self.path}: record lacks key field {e}") from None

    def _load(self) -> None:
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):  # the last write was cut short (crash) or lacks its newline
            head, _, tail = raw.rpartition(b"\n")
            try:
                json.loads(tail)
                with open(self.path, "ab") as fh:
                    fh.write(b"\n")
                raw += b"\n"
            except json.JSONDecodeError:
                log.warning("%s: dropping a partial last line (interrupted write)", self.path)
                self.dropped_partial = True
                raw = head + b"\n" if head else b""
                with open(self.path, "r+b") as fh:
                    fh.truncate(len(raw))
        for i, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{self.path}: line {i}: not valid JSON; fix or delete the line") from None
            self._data.setdefault(self.key(rec), rec)

    def __contains__(self, key: tuple) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: tuple) -> dict[str, Any] | None:
        return self._data.get(key)

    def records(self) -> list[dict[str, Any]]:
        return list(self._data.values())

    def add(self, records: Iterable[dict[str, Any]]) -> int:
        """Append new records (keys already present are skipped); flush + fsync. Returns #written."""
        with self._lock:
            new = []
            for r in records:
                k = self.key(r)
                if k not in self._data:
                    self._data[k] = r
                    new.append(r)
            if new:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as fh:
                    fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new))
                    fh.flush()
                    os.fsync(fh.fileno())
            return len(new)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter for one batch.

    Args:
        max_retries: extra attempts after the first (0 = no retry).
        backoff_s: first wait in seconds; doubles each retry, capped at ``max_backoff_s``.
        max_backoff_s: the longest single wait.
    """

    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def call(self, fn: Callable[[], T]) -> T:
        for attempt in range(self.max_retries + 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - retried, then re-raised
                if attempt == self.max_retries:
                    raise
                wait_s = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
                log.warning("attempt %d failed (%s: %s); retrying in %.2f s", attempt + 1,
                            type(e).__name__, str(e)[:200], wait_s)
                time.sleep(wait_s)
        raise AssertionError("unreachable")


@dataclass
class StageResult:
    """Outcome of a stage: every record for the requested items (cached or new, in input order),
    how many were computed now, and ``(id, error)`` for items that still failed after retries."""

    records: list[dict[str, Any]]
    n_new: int = 0
    n_cached: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.failed


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _run_batches(pending: list[T], work: Callable[[list[T]], list[dict[str, Any]]], cache: JsonlCache,
                 ident: Callable[[T], str], *, batch_size: int, concurrency: int, retry: RetryPolicy,
                 desc: str, progress: bool) -> tuple[int, list[tuple[str, str]]]:
    from tqdm.auto import tqdm

    if batch_size < 1 or concurrency < 1:
        raise ValueError(f"batch_size and concurrency must be >= 1, got {batch_size}, {concurrency}")
    chunks = [pending[i:i + batch_size] for i in range(0, len(pending), batch_size)]
    failed: list[tuple[str, str]] = []
    n_new = 0
    bar = tqdm(total=len(pending), desc=desc, unit="item", disable=not progress or not pending)
    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        it = iter(chunks)
        running: dict[Future, list[T]] = {}
        for ch in it:  # keep at most `concurrency` batches in flight (bounded memory, fast cancel)
            running[pool.submit(retry.call, lambda ch=ch: work(ch))] = ch
            if len(running) >= concurrency:
                break
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                ch = running.pop(fut)
                try:
                    recs = fut.result()
                    n_new += cache.add(recs)
                except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                    failed += [(ident(x), f"{type(e).__name__}: {str(e)[:300]}") for x in ch]
                    log.error("%s: batch of %d failed after retries: %s", desc, len(ch), str(e)[:300])
                bar.update(len(ch))
                nxt = next(it, None)
                if nxt is not None:
                    running[pool.submit(retry.call, lambda ch=nxt: work(ch))] = nxt
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return n_new, failed


def _check_fresh(path: Path, resume: bool) -> None:
    if path.exists() and path.stat().st_size > 0 and not resume:
        raise FileExistsError(f"{path} exists; pass resume=True (CLI: --resume) to continue it, "
                              "or choose another output folder")


def generate_responses(backend: TextGenerator, prompts: Sequence[PromptItem], cache_path: str | Path, *,
                       config: GenerationConfig = MODEL_GENERATION, model_name: str | None = None,
                       batch_size: int = 8, concurrency: int = 1, retry: RetryPolicy = RetryPolicy(),
                       resume: bool = False, progress: bool = True) -> StageResult:
    """Send prompts to the model under test and cache the responses (pipeline step 1).

    Args:
        backend: a :class:`~iclr25.core.lm.generation.TextGenerator` (local HF model, OpenAI-compatible
            endpoint, vLLM, a mock).
        prompts: the items (see :func:`~iclr25.air_bench.data.load_prompts`).
        cache_path: the ``responses.jsonl`` file.
        config: decoding (default :data:`MODEL_GENERATION`: T=0, 512 tokens).
        model_name: cache key and report label (default ``backend.name``).
        batch_size: prompts per ``backend.generate`` call (local models batch them on the device).
        concurrency: ``generate`` calls in flight at once (threads; for HTTP backends).
        retry: retries per batch.
        resume: continue an existing cache file (otherwise an existing non-empty file raises).
        progress: tqdm bar on stderr.

    Returns:
        :class:`StageResult` whose records carry ``model, id, cate-idx, l2-name, l3-name, l4-name,
        prompt, response``.

    Raises:
        FileExistsError: cache exists and ``resume`` is false.
    """
    t0 = time.perf_counter()
    path = Path(cache_path)
    _check_fresh(path, resume)
    model = model_name or getattr(backend, "name", type(backend).__name__)
    cache = JsonlCache(path, ("model", "id"))
    pending = [p for p in prompts if (model, p.id) not in cache]
    gen = {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature, "top_p": config.top_p}

    def work(chunk: list[PromptItem]) -> list[dict[str, Any]]:
        outs = backend.generate([p.prompt for p in chunk], config)
        if len(outs) != len(chunk) or not all(isinstance(o, str) for o in outs):
            raise RuntimeError(f"backend returned {len(outs)} outputs for {len(chunk)} prompts (or non-text)")
        ts = _now()
        return [{"model": model, "id": p.id, "cate-idx": p.cate_idx, "l2-name": p.l2_name,
                 "l3-name": p.l3_name, "l4-name": p.l4_name, "prompt": p.prompt, "response": o,
                 "generation": gen, "time": ts} for p, o in zip(chunk, outs)]

    n_new, failed = _run_batches(pending, work, cache, lambda p: p.id, batch_size=batch_size,
                                 concurrency=concurrency, retry=retry, desc=f"run[{model}]", progress=progress)
    recs = [cache.get((model, p.id)) for p in prompts]
    return StageResult([r for r in recs if r is not None], n_new, len(prompts) - len(pending), failed,
                       time.perf_counter() - t0)


def judge_responses(judge: Judge, responses: Sequence[dict[str, Any]], cache_path: str | Path, *,
                    batch_size: int = 8, concurrency: int = 1, retry: RetryPolicy = RetryPolicy(),
                    resume: bool = False, rejudge_failures: bool = False, progress: bool = True) -> StageResult:
    """Judge cached responses and cache the judgements (pipeline steps 2-4).

    Args:
        judge: :class:`~iclr25.air_bench.judges.LLMJudge`, ``KeywordJudge``, ``EmbeddingLRJudge``...
        responses: records from :func:`generate_responses` (need ``model, id, cate-idx, prompt,
            response``).
        cache_path: the ``scores.jsonl`` file (key ``(judge, model, id)``).
        batch_size, concurrency, retry, resume, progress: as in :func:`generate_responses`.
        rejudge_failures: on resume, judge again the items whose judge answer could not be parsed.

    Returns:
        :class:`StageResult`; each record is the response record plus ``judge, refusal_score,
        raw_score, reasoning, judge_text, judge_error, judge_called``. ``refusal_score`` is ``None``
        for a judge failure (counted separately in reports, never as 0).

    Raises:
        FileExistsError: cache exists and ``resume`` is false.
        KeyError: an LLM judge lacks templates for some categories (before any call).
        ValueError: a response record lacking a field (its position).
    """
    t0 = time.perf_counter()
    path = Path(cache_path)
    _check_fresh(path, resume)
    need = ("model", "id", "cate-idx", "prompt", "response")
    for i, r in enumerate(responses):
        miss = [k for k in need if k not in r]
        if miss:
            raise ValueError(f"response record {i}: missing field(s) {miss}")
    if hasattr(judge, "check"):
        judge.check([r["cate-idx"] for r in responses])
    cache = JsonlCache(path, ("judge", "model", "id"))
    if rejudge_failures:
        bad = [k for k, v in cache._data.items() if v.get("judge_error")]
        for k in bad:
            cache._data.pop(k)
    pending = [r for r in responses if (judge.name, r["model"], r["id"]) not in cache]

    def work(chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        js = judge.judge([JudgeInput(r["cate-idx"], r["prompt"], r["response"]) for r in chunk])
        if len(js) != len(chunk):
            raise RuntimeError(f"judge returned {len(js)} judgements for {len(chunk)} items")
        ts = _now()
        return [{**{k: r[k] for k in r if k not in ("generation", "time")}, "judge": judge.name,
                 "refusal_score": j.refusal_score, "raw_score": j.raw_score, "reasoning": j.reasoning,
                 "judge_text": j.judge_text, "judge_error": j.error, "judge_called": j.called, "time": ts}
                for r, j in zip(chunk, js)]

    n_new, failed = _run_batches(pending, work, cache, lambda r: r["id"], batch_size=batch_size,
                                 concurrency=concurrency, retry=retry, desc=f"judge[{judge.name}]",
                                 progress=progress)
    recs = [cache.get((judge.name, r["model"], r["id"])) for r in responses]
    return StageResult([r for r in recs if r is not None], n_new, len(responses) - len(pending), failed,
                       time.perf_counter() - t0)


class AirBenchRun:
    """Convenience wrapper: model backend + judge -> scored records in one call.

    Args:
        backend: the model under test.
        judge: any :class:`~iclr25.air_bench.judges.Judge`.
        config: decoding of the model under test (default T=0, 512 tokens).
        batch_size, concurrency, retry: see :func:`generate_responses`.
    """

    def __init__(self, backend: TextGenerator, judge: Judge, *, config: GenerationConfig = MODEL_GENERATION,
                 batch_size: int = 8, concurrency: int = 1, retry: RetryPolicy = RetryPolicy()) -> None:
        self.backend, self.judge, self.config = backend, judge, config
        self.batch_size, self.concurrency, self.retry = batch_size, concurrency, retry

    def run(self, prompts: Sequence[PromptItem], out_dir: str | Path, *, resume: bool = True,
            progress: bool = False) -> StageResult:
        """Generate (``out_dir/responses.jsonl``) then judge (``out_dir/scores.jsonl``); idempotent."""
        out = Path(out_dir)
        kw = {"batch_size": self.batch_size, "concurrency": self.concurrency, "retry": self.retry,
              "resume": resume, "progress": progress}
        gen = generate_responses(self.backend, prompts, out / "responses.jsonl", config=self.config, **kw)
        jr = judge_responses(self.judge, gen.records, out / "scores.jsonl", **kw)
        jr.failed = gen.failed + jr.failed
        return jr
