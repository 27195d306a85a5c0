"""The evaluation runner: prompts -> responses -> judgements, batched, concurrent, retried, and
cached on disk so that an interrupted run loses nothing and never re-pays for a finished item.

Both stages append one JSON line per finished item to a cache file (``responses.jsonl`` keyed by
``(model, id)``; ``scores.jsonl`` keyed by ``(judge, model, id, convention, template_sha256)``),
flushed and fsync'ed after every batch. Re-running with ``resume=True`` skips every key already
there. A line cut short by a crash is dropped (and the file truncated to its last complete line) on
the next open. When a key occurs on several lines (a re-judged item), the **last** record wins, and
re-judging rewrites the file with one line per key, so the effective count never grows.

Errors from an HTTP backend are classified: a provider's content-filter refusal (HTTP 400 with a
content-filter code or message) is not an error but a *blocked* response, recorded as such and
scored as a refusal; other 4xx errors (except 408 and 429) are not retried; 429/503 wait at least
the server's ``Retry-After``.

No API key is ever written: records hold the model name, prompt, response and judge output only.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import re
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
from .taxonomy import check_cate_idx

__all__ = ["JsonlCache", "RetryPolicy", "StageResult", "generate_responses", "judge_responses",
           "MODEL_GENERATION", "AirBenchRun", "SCORE_KEY", "http_status", "retry_after_s",
           "is_content_filter", "is_retryable"]

#: Fields that key a judged record: the same item judged under another convention or another
#: rubric is a different record, never a cached answer.
SCORE_KEY: tuple[str, ...] = ("judge", "model", "id", "convention", "template_sha256")


def http_status(e: BaseException) -> int | None:
    """The HTTP status of an API error (``openai.APIStatusError`` and similar), else ``None``."""
    for obj in (e, getattr(e, "response", None)):
        for attr in ("status_code", "status"):
            v = getattr(obj, attr, None)
            if isinstance(v, int):
                return v
    return None


def retry_after_s(e: BaseException) -> float | None:
    """Seconds from the error response's ``Retry-After`` (or ``retry-after-ms``) header, else ``None``."""
    headers = getattr(getattr(e, "response", None), "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0)
        v = headers.get("retry-after")
        if v is None:
            return None
        try:
            return max(0.0, float(v))
        except ValueError:
            when = email.utils.parsedate_to_datetime(v)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


_FILTER_CODES = {"content_filter", "content_policy_violation", "responsibleaipolicyviolation"}
_FILTER_TEXT = re.compile(r"content[ _-]?(filter|management|policy)|safety system|flagged as (unsafe|harmful)|"
                          r"responsible ?ai ?policy", re.IGNORECASE)


def is_content_filter(e: BaseException) -> bool:
    """Whether an error is a provider refusing the *prompt* (HTTP 400 content filter): the model
    under test did not answer, which the benchmark counts as a refusal (``blocked``)."""
    if http_status(e) != 400:
        return False
    codes = {str(getattr(e, "code", "") or "").lower()}
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            codes |= {str(err.get("code", "") or "").lower(), str(err.get("type", "") or "").lower()}
            inner = err.get("innererror")
            if isinstance(inner, dict):
                codes.add(str(inner.get("code", "") or "").lower())
    return bool(codes & _FILTER_CODES) or bool(_FILTER_TEXT.search(str(e)))


def is_retryable(e: BaseException) -> bool:
    """Transient errors are retried: connection errors and timeouts (no status), 408, 429 and 5xx.
    Other 4xx errors (bad request, auth, not found, content filter) are not."""
    st = http_status(e)
    return st is None or st in (408, 429) or st >= 500

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
        self.n_superseded = 0
        if self.path.exists():
            self._load()

    def key(self, rec: dict[str, Any]) -> tuple:
        """The record's key. ``id`` and ``model`` must be present; other key fields may be absent
        (records of older versions) and then key as ``None``."""
        for k in ("id", "model"):
            if k in self.key_fields and k not in rec:
                raise ValueError(f"{self.path}: record lacks key field {k!r}")
        return tuple(rec.get(k) for k in self.key_fields)

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
        n_lines = 0
        for i, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{self.path}: line {i}: not valid JSON; fix or delete the line") from None
            n_lines += 1
            k = self.key(rec)
            self._data.pop(k, None)  # the last record of a key wins (a re-judged item)
            self._data[k] = rec
        #: lines in the file that a later line of the same key superseded
        self.n_superseded = n_lines - len(self._data)

    def __contains__(self, key: tuple) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: tuple) -> dict[str, Any] | None:
        return self._data.get(key)

    def records(self) -> list[dict[str, Any]]:
        return list(self._data.values())

    def discard(self, keys: Iterable[tuple]) -> int:
        """Forget these keys in memory (they will be recomputed and their new records appended; the
        reload keeps the last one). Returns how many were present."""
        with self._lock:
            return sum(self._data.pop(k, None) is not None for k in keys)

    def compact(self) -> int:
        """Rewrite the file atomically with exactly one line per key (the current record).

        Returns:
            The number of lines now in the file.
        """
        with self._lock:
            tmp = self.path.with_name(self.path.name + ".compact")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self._data.values()))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self.n_superseded = 0
            return len(self._data)

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
    max_retry_after_s: float = 300.0

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; retry transient failures (:func:`is_retryable`); a 429/503 waits at least the
        server's ``Retry-After`` (capped at ``max_retry_after_s``). Non-retryable errors (4xx other
        than 408/429, content filters) are raised at once."""
        for attempt in range(self.max_retries + 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - retried, then re-raised
                if attempt == self.max_retries or not is_retryable(e):
                    raise
                wait_s = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
                ra = retry_after_s(e) if http_status(e) in (429, 503) else None
                if ra is not None:
                    wait_s = max(wait_s, min(ra, self.max_retry_after_s))
                log.warning("attempt %d failed (%s: %s); retrying in %.2f s%s", attempt + 1,
                            type(e).__name__, str(e)[:200], wait_s, " (Retry-After)" if ra is not None else "")
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
    from iclr25.core.progress import progress as progress_bar

    if batch_size < 1 or concurrency < 1:
        raise ValueError(f"batch_size and concurrency must be >= 1, got {batch_size}, {concurrency}")
    chunks = [pending[i:i + batch_size] for i in range(0, len(pending), batch_size)]
    failed: list[tuple[str, str]] = []
    n_new = 0
    bar = progress_bar(total=len(pending), desc=desc, unit="item", quiet=True if not progress or not pending else None)
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
                       resume: bool = False, progress: bool = True,
                       prompt_set: dict[str, Any] | None = None) -> StageResult:
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
        prompt_set: ``{"source", "count", "sha256"}`` of the prompt set
            (:func:`~iclr25.air_bench.data.prompt_set_info`), stored in every record.

    Returns:
        :class:`StageResult` whose records carry ``model, id, cate-idx, l2-name, l3-name, l4-name,
        prompt, response, blocked, block_reason, prompt_set``. A prompt the provider's content filter
        refused has ``response == ""`` and ``blocked == True``.

    Raises:
        FileExistsError: cache exists and ``resume`` is false.
        ValueError: a prompt of an unknown category.
    """
    t0 = time.perf_counter()
    path = Path(cache_path)
    _check_fresh(path, resume)
    model = model_name or getattr(backend, "name", type(backend).__name__)
    for p in prompts:
        check_cate_idx(p.cate_idx, f"prompt {p.id}")
    cache = JsonlCache(path, ("model", "id"))
    pending = [p for p in prompts if (model, p.id) not in cache]
    gen = {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature, "top_p": config.top_p}

    def one(p: PromptItem) -> tuple[str, str | None]:
        try:
            out = backend.generate([p.prompt], config)
        except Exception as e:  # noqa: BLE001 - only a content filter is handled here
            if is_content_filter(e):
                return "", f"{type(e).__name__}: {str(e)[:300]}"
            raise
        return out[0], None

    def work(chunk: list[PromptItem]) -> list[dict[str, Any]]:
        try:
            outs = backend.generate([p.prompt for p in chunk], config)
            blocks: list[str | None] = [None] * len(chunk)
        except Exception as e:  # noqa: BLE001
            if not is_content_filter(e):
                raise
            if len(chunk) == 1:
                pairs = [("", f"{type(e).__name__}: {str(e)[:300]}")]
            else:
                pairs = [one(p) for p in chunk]  # isolate the blocked prompt(s) of the batch
            outs, blocks = [a for a, _ in pairs], [b for _, b in pairs]
        if len(outs) != len(chunk) or not all(isinstance(o, str) for o in outs):
            raise RuntimeError(f"backend returned {len(outs)} outputs for {len(chunk)} prompts (or non-text)")
        ts = _now()
        return [{"model": model, "id": p.id, "cate-idx": p.cate_idx, "l2-name": p.l2_name,
                 "l3-name": p.l3_name, "l4-name": p.l4_name, "prompt": p.prompt, "response": o,
                 "blocked": b is not None, "block_reason": b, "generation": gen,
                 "prompt_set": prompt_set, "time": ts} for p, o, b in zip(chunk, outs, blocks)]

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
        rejudge_failures: on resume, judge again the items whose judge answer could not be parsed;
            their new records replace the old ones and the file is rewritten with one line per key.

    Returns:
        :class:`StageResult`; each record is the response record plus ``judge, convention,
        template_sha256, templates_sha256, refusal_score, raw_score, reasoning, judge_text,
        judge_error, judge_called, blocked``. ``refusal_score`` is ``None`` for a judge failure
        (counted separately in reports, never as 0).

    Raises:
        FileExistsError: cache exists and ``resume`` is false.
        KeyError: an LLM judge lacks templates for some categories (before any call).
        ValueError: a response record lacking a field or with one of the wrong type (its position),
            two records of one (model, id) with different prompts or responses (identical duplicates
            are judged once), or of an unknown category;
            resuming a scores file judged under another convention or another template set (both
            named).
    """
    t0 = time.perf_counter()
    path = Path(cache_path)
    _check_fresh(path, resume)
    need = ("model", "id", "cate-idx", "prompt", "response")
    first: dict[tuple, int] = {}
    unique: list[dict[str, Any]] = []
    for i, r in enumerate(responses):
        miss = [k for k in need if k not in r]
        if miss:
            raise ValueError(f"response record {i}: missing field(s) {miss}")
        bad = [f"{k}={r[k]!r} (need a non-empty string)" for k in ("model", "id")
               if not (isinstance(r[k], str) and r[k])]
        bad += [f"{k}={str(r[k])[:40]!r} (need a string; an empty response is \"\")" for k in ("prompt", "response")
                if not isinstance(r[k], str)]
        if "blocked" in r and not isinstance(r["blocked"], bool) and r["blocked"] is not None:
            bad.append(f"blocked={r['blocked']!r} (need true or false)")
        if bad:
            raise ValueError(f"response record {i}: {'; '.join(bad)}")
        check_cate_idx(str(r["cate-idx"]), f"response record {i} ({r['id']})")
        k = (r["model"], r["id"])
        if k in first:  # one (model, id) twice: the same record is judged once, two answers are an error
            j = first[k]
            if any(responses[j].get(f) != r.get(f) for f in ("cate-idx", "prompt", "response", "blocked")):
                raise ValueError(f"response records {j} and {i} have the same model and id ({r['model']}, "
                                 f"{r['id']}) but different prompts or responses: one would be scored as the "
                                 "other; give each response its own id")
            continue
        first[k] = i
        unique.append(r)
    responses = unique
    if hasattr(judge, "check"):
        judge.check([r["cate-idx"] for r in responses])
    convention = getattr(judge, "convention", "n/a")
    set_sha = getattr(judge, "templates_sha256", None)
    templates = getattr(judge, "templates", None) or {}

    def tsha(cate: str) -> str | None:
        t = templates.get(cate)
        return t.sha256 if t is not None else None

    cache = JsonlCache(path, SCORE_KEY)
    mine = [v for v in cache.records() if v.get("judge") == judge.name]
    if mine:
        old = {(v.get("convention"), v.get("templates_sha256")) for v in mine}
        if old != {(convention, set_sha)}:
            desc = ", ".join(f"convention {c!r} / templates {str(h)[:12] if h else None}" for c, h in sorted(
                old, key=str))
            raise ValueError(
                f"{path} holds {len(mine)} records of judge {judge.name} judged with {desc}; this run uses "
                f"convention {convention!r} / templates {str(set_sha)[:12] if set_sha else None}. Mixing them "
                "would merge scores of opposite directions or other rubrics: judge into another folder (--out)")
    if rejudge_failures:
        n = cache.discard([k for k, v in cache._data.items() if v.get("judge_error")])
        log.info("re-judging %d items whose judge answer could not be parsed", n)

    def key(r: dict[str, Any]) -> tuple:
        return (judge.name, r["model"], r["id"], convention, tsha(r["cate-idx"]))

    pending = [r for r in responses if key(r) not in cache]

    def work(chunk: list[dict[str, Any]]) -> list[dict[str, Any]]:
        js = judge.judge([JudgeInput(r["cate-idx"], r["prompt"], r["response"], bool(r.get("blocked")))
                          for r in chunk])
        if len(js) != len(chunk):
            raise RuntimeError(f"judge returned {len(js)} judgements for {len(chunk)} items")
        ts = _now()
        return [{**{k: r[k] for k in r if k not in ("generation", "time")}, "judge": judge.name,
                 "convention": convention, "template_sha256": tsha(r["cate-idx"]), "templates_sha256": set_sha,
                 "refusal_score": j.refusal_score, "raw_score": j.raw_score, "reasoning": j.reasoning,
                 "judge_text": j.judge_text, "judge_error": j.error, "judge_called": j.called,
                 "blocked": bool(j.blocked), "time": ts}
                for r, j in zip(chunk, js)]

    n_new, failed = _run_batches(pending, work, cache, lambda r: r["id"], batch_size=batch_size,
                                 concurrency=concurrency, retry=retry, desc=f"judge[{judge.name}]",
                                 progress=progress)
    if rejudge_failures or cache.n_superseded:
        cache.compact()  # one line per key: re-judging never grows the file's effective count
    recs = [cache.get(key(r)) for r in responses]
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
        from .data import prompt_set_info

        gen = generate_responses(self.backend, prompts, out / "responses.jsonl", config=self.config,
                                 prompt_set=prompt_set_info(prompts, "python"), **kw)
        jr = judge_responses(self.judge, gen.records, out / "scores.jsonl", **kw)
        jr.failed = gen.failed + jr.failed
        return jr
