"""The resumable runner: query -> back-translate -> parse, cached on disk, batched, concurrent, retried.

Every finished item is one JSON line in ``OUT/cache.jsonl``, keyed by (model, lang, vignette id, stage)
with stage ``query``, ``backtranslate`` or ``parse``; each batch is appended and fsync'ed as soon as it
is done. On ``resume`` the cache is read back (a torn last line left by a crash is dropped and the
file truncated first) and no cached item is sent again. A batch that still fails after the bounded
retries is counted as failed (the command exits 1) and is retried by the next ``resume``.

``OUT/config.json`` records what defines the results — model, system role, translators, decoding,
paraphrase, vignette seed, parser — and a resume with any of them changed is refused, naming it. No API
key is ever written anywhere: keys come only from the environment variable the CLI is told to read.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from iclr25.core.lm.generation import GenerationConfig

from ._jsonl import append_jsonl, read_jsonl, repair_torn_tail
from .parser import LLMParser, rule_based_choice
from .query import PAPER_GENERATION, backend_for
from .spec import SYSTEM_PROMPTS, check_langs
from .translation import IdentityTranslator, as_translator, back_translate, translate, translate_system_prompt
from .vignettes import Vignette, generate_vignettes

__all__ = ["RunCache", "RetryPolicy", "client_error", "StageResult", "run_query", "run_parse", "load_choices", "check_config",
           "CACHE_FILE", "CONFIG_FILE"]

log = logging.getLogger(__name__)
T = TypeVar("T")
CACHE_FILE = "cache.jsonl"
CONFIG_FILE = "config.json"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class RunCache:
    """The append-only JSON-lines cache of a run, indexed by (model, lang, id, stage).

    Raises:
        JsonlError (a ValueError): a malformed line that is not the last one ("FILE:LINE: ...").
    """

    KEY = ("model", "lang", "id", "stage")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._data: dict[tuple, dict[str, Any]] = {}
        self.dropped_torn_tail = False
        if self.path.exists():
            self.dropped_torn_tail = repair_torn_tail(self.path)
            for r in read_jsonl(self.path, required=self.KEY):
                self._data.setdefault(tuple(r[k] for k in self.KEY), r)

    def __contains__(self, key: tuple) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: tuple) -> dict[str, Any] | None:
        return self._data.get(key)

    def records(self, stage: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self._data.values() if stage is None or r["stage"] == stage]

    def add(self, records: Sequence[dict[str, Any]]) -> int:
        """Append records whose key is new; flush + fsync. Returns the number written."""
        with self._lock:
            new = []
            for r in records:
                k = tuple(r[f] for f in self.KEY)
                if k not in self._data:
                    self._data[k] = r
                    new.append(r)
            append_jsonl(self.path, new)
            return len(new)


def client_error(e: BaseException) -> int | None:
    """The HTTP status of ``e`` when it is a client error that a retry cannot fix (4xx but 408, 409, 429), else
    ``None``. Reads ``status_code`` (``openai.APIStatusError``) or ``response.status_code``."""
    code = getattr(e, "status_code", None)
    if code is None:
        code = getattr(getattr(e, "response", None), "status_code", None)
    if isinstance(code, int) and 400 <= code < 500 and code not in (408, 409, 429):
        return code
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and jitter for one batch.

    Args:
        max_retries: extra attempts after the first (0 = none).
        backoff_s: first wait in seconds (doubles per retry, at most ``max_backoff_s``).
        max_backoff_s: the longest single wait.
    """

    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or not (self.backoff_s >= 0 and self.max_backoff_s >= 0):
            raise ValueError("max_retries and the backoff times must be >= 0")

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried on failure; a client error (HTTP 4xx other than 408/409/429, e.g. 404 "model not
        found", 401) is raised at once, since the same request fails the same way again."""
        for attempt in range(self.max_retries + 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - retried, then re-raised
                if attempt == self.max_retries or client_error(e) is not None:
                    raise
                w = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
                log.warning("attempt %d failed (%s: %s); retrying in %.2f s", attempt + 1, type(e).__name__,
                            str(e)[:200], w)
                time.sleep(w)
        raise AssertionError("unreachable")


@dataclass
class StageResult:
    """A stage's outcome: ``n_new`` computed now, ``n_cached`` skipped, ``failed`` ``[(lang, id, error)]``."""

    stage: str
    n_total: int = 0
    n_new: int = 0
    n_cached: int = 0
    failed: list[tuple[str, str, str]] = field(default_factory=list)
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        return (f"{self.stage}: {self.n_total - len(self.failed)}/{self.n_total} done ({self.n_new} new, "
                f"{self.n_cached} cached, {len(self.failed)} failed, {self.seconds:.1f} s)")


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from iclr25.core.progress import progress

    return progress(None, desc=desc, total=total, unit="item", quiet=None if enabled else True)


def _run_batches(chunks: list[list[T]], work: Callable[[list[T]], list[dict[str, Any]]], cache: RunCache,
                 ident: Callable[[T], tuple[str, str]], *, concurrency: int, retry: RetryPolicy, desc: str,
                 progress: bool, max_failures: int | None) -> tuple[int, list[tuple[str, str, str]]]:
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    failed: list[tuple[str, str, str]] = []
    n_new = 0
    bar = _progress(sum(len(c) for c in chunks), desc, progress)
    pool = ThreadPoolExecutor(max_workers=concurrency)
    stopped = False
    try:
        it = iter(chunks)
        running: dict[Future, list[T]] = {}
        for ch in it:
            running[pool.submit(retry.call, lambda ch=ch: work(ch))] = ch
            if len(running) >= concurrency:
                break
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                ch = running.pop(fut)
                try:
                    n_new += cache.add(fut.result())
                except Exception as e:  # noqa: BLE001 - counted; the run goes on
                    msg = f"{type(e).__name__}: {str(e)[:300]}"
                    failed += [(*ident(x), msg) for x in ch]
                    code = client_error(e)
                    if code is not None and not stopped:
                        stopped = True  # every other request would get the same answer
                        log.error("%s: HTTP %d (%s); not retried, not sending the rest (fix the model name, key "
                                  "or URL, then rerun with --resume)", desc, code, msg)
                    else:
                        log.error("%s: batch of %d failed after retries: %s", desc, len(ch), msg)
                bar.update(len(ch))
                if max_failures is not None and len(failed) >= max_failures and not stopped:
                    stopped = True
                    log.error("%s: %d items failed; not sending the rest (rerun with --resume)", desc, len(failed))
                nxt = None if stopped else next(it, None)
                if nxt is not None:
                    running[pool.submit(retry.call, lambda ch=nxt: work(ch))] = nxt
        if stopped:
            for ch in it:
                failed += [(*ident(x), "not sent: an earlier batch failed with a client error or too many "
                            "failed") for x in ch]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return n_new, failed


# --- config.json --------------------------------------------------------------------------------------

def check_config(out: str | Path, section: str, settings: Mapping[str, Any], *, resume: bool,
                 fixed: Sequence[str] | None = None) -> dict[str, Any]:
    """Record ``settings`` under ``section`` of ``OUT/config.json``; on resume, refuse changed ``fixed`` keys.

    Raises:
        FileExistsError: results exist and ``resume`` is false.
        ValueError: on resume, a changed setting (named, with the cached and the new value).
    """
    out = Path(out)
    path = out / CONFIG_FILE
    cache = out / CACHE_FILE
    conf: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    new = json.loads(json.dumps(dict(settings), default=str))
    if section in conf:
        if not resume and cache.exists() and cache.stat().st_size > 0:
            raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
        old = conf[section]
        keys = list(fixed) if fixed is not None else list(new)
        changed = [k for k in keys if k in old and old[k] != new.get(k)]
        if changed:
            k = changed[0]
            raise ValueError(f"--resume with a changed {k.replace('_', '-')}: the cached run used {old[k]!r}, now "
                             f"{new.get(k)!r}; use a new --out for a different {k.replace('_', ' ')}"
                             + (f" (also changed: {changed[1:]})" if len(changed) > 1 else ""))
        merged = {**old, **{k: v for k, v in new.items() if k not in keys or k not in old}}
        if "langs" in old and "langs" in new:
            merged["langs"] = list(dict.fromkeys([*old["langs"], *new["langs"]]))
        conf[section] = merged
    else:
        conf[section] = new
    from iclr25.core.runinfo import run_info, to_jsonable

    conf.setdefault("run_info", to_jsonable(run_info("iclr25-multitp")))
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(conf, indent=1) + "\n", encoding="utf-8")
    return conf


def _gen_dict(cfg: GenerationConfig) -> dict[str, Any]:
    return {"temperature": cfg.temperature, "max_tokens": cfg.max_new_tokens, "top_p": cfg.top_p, "seed": cfg.seed}


# --- stages ---------------------------------------------------------------------------------------------

def _chunks(items: list[T], key: Callable[[T], Any], batch_size: int) -> list[list[T]]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    groups: dict[Any, list[T]] = defaultdict(list)
    for x in items:
        groups[key(x)].append(x)
    return [g[i:i + batch_size] for g in groups.values() for i in range(0, len(g), batch_size)]


def run_query(out_dir: str | Path, backend: Any, *, model: str, langs: Sequence[str] | str,
              translator: Any = None, back_translator: Any = None, role: str = "normal",
              config: GenerationConfig = PAPER_GENERATION, paraphrase: int = 0, vignette_seed: int = 0,
              vignettes: Sequence[Vignette] | None = None, batch_size: int = 1, concurrency: int = 1,
              retry: RetryPolicy = RetryPolicy(), resume: bool = False, progress: bool = True,
              max_failures: int | None = None, backend_settings: Mapping[str, Any] | None = None) -> StageResult:
    """Query a model on every (language, vignette) and back-translate the answers (MultiTP §3.2 steps 1-2).

    Args:
        out_dir: the run folder (``cache.jsonl``, ``config.json``, ``translations/``).
        backend: a ``TextGenerator`` (one system prompt per language is set on copies) or a factory
            ``(lang, system_prompt) -> TextGenerator``.
        model: the model name (cache key, reports).
        langs: language codes or ``"all"``.
        translator: forward translator (vignettes and system prompts); default identity (English text).
        back_translator: answers -> English; default the forward translator when it can translate back
            (identity/tag/nllb), identity for ``csv``.
        role: system role (paper: ``normal``).
        config: decoding (paper: T = 0, 1024 tokens).
        paraphrase, vignette_seed: which vignettes (:func:`~iclr25.multitp.vignettes.generate_vignettes`).
        vignettes: English vignettes to use instead of generating them (e.g. a subset).
        batch_size: prompts per backend call (local models); concurrency: calls in flight (HTTP).
        retry: bounded retries per batch; max_failures: stop sending after this many failed items.
        resume: continue the run in ``out_dir``; progress: a progress bar on stderr.
        backend_settings: extra settings recorded in ``config.json`` (e.g. ``base_url``; never a key).

    Returns:
        :class:`StageResult` of the query stage; ``extra["backtranslate"]`` holds the back-translation stage.

    Raises:
        FileExistsError: ``out_dir`` holds a run and ``resume`` is false.
        ValueError: a changed setting on resume, an unknown language or role.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    langs = check_langs(langs)
    if role not in SYSTEM_PROMPTS:
        raise ValueError(f"role={role!r}; choose one of {list(SYSTEM_PROMPTS)}")
    fwd = as_translator(translator or IdentityTranslator())
    if isinstance(fwd, IdentityTranslator) and any(lg != "en" for lg in langs):
        raise ValueError(f"langs {[lg for lg in langs if lg != 'en'][:3]} with the identity translator would send the "
                         "English vignettes and system prompt to every language; pass translator='csv' (the "
                         "official dataset_{lang}+google.csv files: make_translator('csv', csv_folder=DIR)), "
                         "'nllb', your own callable (text, lang) -> text, or 'tag' for a dry run")
    if back_translator is None:
        back_translator = IdentityTranslator() if getattr(fwd, "name", "") == "csv" else fwd
    bwd = as_translator(back_translator)
    base = list(vignettes) if vignettes is not None else generate_vignettes("en", paraphrase, vignette_seed)
    settings = {"model": model, "role": role, "translator": fwd.name, "back_translator": bwd.name,
                "decoding": _gen_dict(config), "paraphrase": paraphrase, "vignette_seed": vignette_seed,
                "n_vignettes": len(base), "langs": langs, **(backend_settings or {})}
    check_config(out, "query", settings, resume=resume,
                 fixed=("model", "role", "translator", "back_translator", "decoding", "paraphrase", "vignette_seed",
                        *(("agent",) if "agent" in settings else ())))  # a scripted run's agent (cli)
    cache = RunCache(out / CACHE_FILE)
    tdir = out / "translations"
    per_lang: dict[str, list[Vignette]] = {}
    sys_prompt: dict[str, str] = {}
    for lang in langs:
        per_lang[lang] = translate(base, lang, fwd, cache_dir=tdir)
        sys_prompt[lang] = translate_system_prompt(lang, fwd, role=role, cache_dir=tdir)
    gens: dict[str, Any] = {}
    glock = threading.Lock()

    def gen_for(lang: str) -> Any:
        with glock:
            if lang not in gens:
                gens[lang] = backend_for(backend, lang, sys_prompt[lang])
            return gens[lang]

    items = [(lang, v) for lang in langs for v in per_lang[lang]]
    pending = [(lang, v) for lang, v in items if (model, lang, v.id, "query") not in cache]
    gen = _gen_dict(config)

    def work(chunk: list[tuple[str, Vignette]]) -> list[dict[str, Any]]:
        lang = chunk[0][0]
        outs = gen_for(lang).generate([v.prompt for _, v in chunk], config)
        if len(outs) != len(chunk) or not all(isinstance(o, str) for o in outs):
            raise RuntimeError(f"backend returned {len(outs)} outputs for {len(chunk)} prompts (or non-text)")
        ts = _now()
        return [{"model": model, "lang": lang, "id": v.id, "stage": "query", "system_prompt": sys_prompt[lang],
                 "prompt": v.prompt, "response": o, "generation": gen, "time": ts} for (_, v), o in zip(chunk, outs)]

    n_new, failed = _run_batches(_chunks(pending, lambda x: x[0], batch_size), work, cache,
                                 lambda x: (x[0], x[1].id), concurrency=concurrency, retry=retry,
                                 desc=f"query[{model}]", progress=progress, max_failures=max_failures)
    res = StageResult("query", len(items), n_new, len(items) - len(pending), failed, time.perf_counter() - t0)
    res.extra["dropped_torn_tail"] = cache.dropped_torn_tail
    res.extra["backtranslate"] = _run_backtranslate(cache, model, items, bwd, tdir, batch_size=max(batch_size, 8),
                                                    concurrency=concurrency, retry=retry, progress=progress)
    return res


def _needs_bt(bwd: Any, lang: str) -> bool:
    return lang != "en" and not isinstance(bwd, IdentityTranslator)


def _run_backtranslate(cache: RunCache, model: str, items: list[tuple[str, Vignette]], bwd: Any, tdir: Path, *,
                       batch_size: int, concurrency: int, retry: RetryPolicy, progress: bool) -> StageResult:
    t0 = time.perf_counter()
    todo = [(lang, v) for lang, v in items if _needs_bt(bwd, lang) and (model, lang, v.id, "query") in cache]
    pending = [(lang, v) for lang, v in todo if (model, lang, v.id, "backtranslate") not in cache]

    def work(chunk: list[tuple[str, Vignette]]) -> list[dict[str, Any]]:
        lang = chunk[0][0]
        texts = [cache.get((model, lang, v.id, "query"))["response"] for _, v in chunk]  # type: ignore[index]
        outs = back_translate(texts, lang, bwd, cache_dir=tdir)
        ts = _now()
        return [{"model": model, "lang": lang, "id": v.id, "stage": "backtranslate", "response_en": o,
                 "back_translator": bwd.name, "time": ts} for (_, v), o in zip(chunk, outs)]

    n_new, failed = _run_batches(_chunks(pending, lambda x: x[0], batch_size), work, cache,
                                 lambda x: (x[0], x[1].id), concurrency=concurrency, retry=retry,
                                 desc="back-translate", progress=progress, max_failures=None)
    return StageResult("backtranslate", len(todo), n_new, len(todo) - len(pending), failed, time.perf_counter() - t0)


def _vignette_index(conf: Mapping[str, Any]) -> dict[str, Vignette]:
    return {v.id: v for v in generate_vignettes("en", int(conf.get("paraphrase", 0)), int(conf.get("vignette_seed", 0)))}


def run_parse(out_dir: str | Path, *, llm_parser: LLMParser | None = None, parser_name: str | None = None,
              batch_size: int = 8, concurrency: int = 1, retry: RetryPolicy = RetryPolicy(), resume: bool = False,
              progress: bool = True, vignettes: Mapping[str, Vignette] | None = None) -> StageResult:
    """Parse every cached answer into a label (MultiTP §3.2 step 3): rule-based, then the LLM parser.

    Args:
        out_dir: a run folder written by :func:`run_query` (or by :func:`records_to_cache`).
        llm_parser: the :class:`~iclr25.multitp.parser.LLMParser` for answers no rule parses (default: none;
            they become ``other``).
        parser_name: recorded name of the parser (default: the LLM parser's backend name, or ``"rules"``).
        batch_size, concurrency, retry, resume, progress: as in :func:`run_query`.
        vignettes: ``{id: English vignette}`` (default: regenerated from ``config.json``).

    Returns:
        :class:`StageResult`; ``extra`` counts labels by method and the answers not yet back-translated.

    Raises:
        FileNotFoundError: no cache; FileExistsError: parse records exist and ``resume`` is false;
        ValueError: a changed parser on resume.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    if not (out / CACHE_FILE).is_file():
        raise FileNotFoundError(f"{out / CACHE_FILE} does not exist; run `query` first (or pass --responses)")
    conf = json.loads((out / CONFIG_FILE).read_text(encoding="utf-8")) if (out / CONFIG_FILE).is_file() else {}
    qconf = conf.get("query", {})
    name = parser_name or (llm_parser.name if llm_parser is not None else "rules")
    cache = RunCache(out / CACHE_FILE)
    if not resume and cache.records("parse"):
        raise FileExistsError(f"{out} already holds parse results; pass --resume to continue them")
    check_config(out, "parse", {"parser": name, "llm_parser": llm_parser is not None}, resume=True,
                 fixed=("parser",))
    vig = dict(vignettes) if vignettes is not None else _vignette_index(qconf)
    bt_needed = qconf.get("back_translator", "identity") != "identity"
    items, not_bt = [], 0
    for q in cache.records("query"):
        k = (q["model"], q["lang"], q["id"])
        v = vig.get(q["id"])
        if v is None:
            raise ValueError(f"{out / CACHE_FILE}: unknown vignette id {q['id']!r} (not a MultiTP vignette of this run)")
        if bt_needed and q["lang"] != "en":
            bt = cache.get((*k, "backtranslate"))
            if bt is None:
                not_bt += 1
                continue
            text = bt["response_en"]
        else:
            text = q.get("response_en", q["response"])
        items.append((k, v, text, q.get("prompt", v.prompt_en)))
    pending = [x for x in items if (*x[0], "parse") not in cache]

    def rec(k: tuple, v: Vignette, text: str, label: str, method: str, raw: str | None) -> dict[str, Any]:
        return {"model": k[0], "lang": k[1], "id": k[2], "stage": "parse", "label": label, "method": method,
                "llm_output": raw, "parser": name, "response_en": text, "category": v.category,
                "left_group": v.left_group, "right_group": v.right_group,
                "two_choices_unordered_set": v.two_choices_unordered_set, "time": _now()}

    rule_recs, rest = [], []
    for k, v, text, prompt in pending:
        lab = rule_based_choice(text, v.left, v.right)
        if lab is not None:
            rule_recs.append(rec(k, v, text, lab, "rule", None))
        elif llm_parser is None:
            rule_recs.append(rec(k, v, text, "other", "none", None))
        else:
            rest.append((k, v, text, prompt))
    n_new = 0
    for i in range(0, len(rule_recs), 1000):
        n_new += cache.add(rule_recs[i:i + 1000])
    failed: list[tuple[str, str, str]] = []
    if rest:
        def work(chunk: list[tuple]) -> list[dict[str, Any]]:
            res = llm_parser.parse([(v.prompt_en, text) for _, v, text, _ in chunk])  # type: ignore[union-attr]
            return [rec(k, v, text, lab, "llm", raw) for (k, v, text, _), (lab, raw) in zip(chunk, res)]

        n2, failed = _run_batches(_chunks(rest, lambda x: x[0][1], batch_size), work, cache,
                                  lambda x: (x[0][1], x[0][2]), concurrency=concurrency, retry=retry,
                                  desc=f"parse[{name}]", progress=progress, max_failures=None)
        n_new += n2
    methods: dict[str, int] = defaultdict(int)
    for r in cache.records("parse"):
        methods[r["method"]] += 1
    res = StageResult("parse", len(items), n_new, len(items) - len(pending), failed, time.perf_counter() - t0,
                      {"by_method": dict(methods), "not_back_translated": not_bt})
    return res


def load_choices(out_dir: str | Path) -> list[dict[str, Any]]:
    """The parse records of a run folder (choice records for :func:`~iclr25.multitp.aggregation.aggregate`)."""
    p = Path(out_dir)
    path = p / CACHE_FILE if p.is_dir() else p
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return RunCache(path).records("parse")


def import_responses(path: str | Path, out_dir: str | Path, *, model: str = "user-model", paraphrase: int = 0,
                     vignette_seed: int = 0, back_translator: Any = None, resume: bool = False) -> StageResult:
    """Bring existing answers into a run folder so that :func:`run_parse` can parse them.

    Args:
        path: JSON lines with ``id`` (a MultiTP vignette id), ``lang`` and ``response`` (optional
            ``response_en``: an English version; optional ``model``).
        out_dir: the run folder to create (or continue with ``resume``).
        model: model name for lines without one.
        paraphrase, vignette_seed: the vignettes the ids refer to.
        back_translator: translate non-English answers to English (default: none — answers are taken as
            English unless ``response_en`` is given).

    Raises:
        FileNotFoundError: no such file. ValueError: an empty file, a line without ``id``/``response``/``lang``,
            an unknown ``id`` or language (line number given), or a repeated (model, lang, id).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"responses file {p} does not exist")
    from ._jsonl import JsonlError
    from .spec import check_lang

    try:
        rows = read_jsonl(p, required=("id", "response"))
    except JsonlError as e:
        raise ValueError(str(e)) from None
    if not rows:
        raise ValueError(f"{p}: the responses file is empty")
    vig = {v.id: v for v in generate_vignettes("en", paraphrase, vignette_seed)}
    bwd = as_translator(back_translator) if back_translator is not None else None
    lines = [i for i, ln in enumerate(p.read_text(encoding="utf-8").split("\n"), start=1) if ln.strip()]
    recs, seen, lines_of = [], set(), {}
    for n, r in zip(lines, rows):
        where = f"{p}:{n}: "
        if r["id"] not in vig:
            raise ValueError(f"{where}unknown vignette id {r['id']!r} (ids look like 'Species:5Dog|5Person:p0'; "
                             "see `iclr25-multitp generate`)")
        lang = r.get("lang")
        if not lang:
            raise ValueError(f"{where}missing field 'lang'")
        try:
            check_lang(lang, field="lang")
        except ValueError as e:
            raise ValueError(f"{where}{e}") from None
        if not isinstance(r["response"], str):
            raise ValueError(f"{where}'response' must be a string")
        if "response_en" in r and not isinstance(r["response_en"], str):
            raise ValueError(f"{where}'response_en' must be a string (or leave the field out)")
        if "model" in r and not (isinstance(r["model"], str) and r["model"].strip()):
            raise ValueError(f"{where}'model' must be a non-empty string (or leave the field out for --model)")
        m = r.get("model") or model
        if (m, lang, r["id"]) in seen:
            raise ValueError(f"{where}repeated (model, lang, id) = ({m}, {lang}, {r['id']})")
        seen.add((m, lang, r["id"]))
        rec = {"model": m, "lang": lang, "id": r["id"], "stage": "query", "prompt": vig[r["id"]].prompt_en,
               "response": r["response"], "time": _now(), "imported_from": str(p)}
        if isinstance(r.get("response_en"), str):
            rec["response_en"] = r["response_en"]
        recs.append(rec)
        lines_of[(m, lang, r["id"])] = n
    out = Path(out_dir)
    if resume and (out / CACHE_FILE).is_file():
        # a cached item keeps its answer and label: another answer for it would be dropped silently
        cached = RunCache(out / CACHE_FILE)
        for rec in recs:
            old = cached.get((rec["model"], rec["lang"], rec["id"], "query"))
            if old is not None and (old.get("response"), old.get("response_en")) != (rec["response"], rec.get("response_en")):
                raise ValueError(f"{p}:{lines_of[(rec['model'], rec['lang'], rec['id'])]}: ({rec['model']}, {rec['lang']}, "
                                 f"{rec['id']}) is in {out} with another response; --resume keeps cached answers, "
                                 "so parse changed answers into a new --out")
    check_config(out, "query", {"model": model, "role": "unknown", "translator": "user",
                                "back_translator": getattr(bwd, "name", "identity"), "decoding": "unknown",
                                "paraphrase": paraphrase, "vignette_seed": vignette_seed,
                                "imported_from": str(p)}, resume=resume,
                 fixed=("paraphrase", "vignette_seed", "back_translator"))
    cache = RunCache(out / CACHE_FILE)
    n = cache.add(recs)
    if bwd is not None:
        if bwd.name == "identity":
            pass
        else:
            tdir = out / "translations"
            todo = [r for r in recs if r["lang"] != "en" and "response_en" not in r]
            by: dict[str, list[dict]] = defaultdict(list)
            for r in todo:
                by[r["lang"]].append(r)
            bt = []
            for lang, rs in by.items():
                outs = back_translate([r["response"] for r in rs], lang, bwd, cache_dir=tdir)
                bt += [{"model": r["model"], "lang": lang, "id": r["id"], "stage": "backtranslate", "response_en": o,
                        "back_translator": bwd.name, "time": _now()} for r, o in zip(rs, outs)]
            cache.add(bt)
    return StageResult("import", len(recs), n, len(recs) - n)
