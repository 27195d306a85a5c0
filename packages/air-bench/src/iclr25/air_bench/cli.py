"""The ``iclr25-air-bench`` command: run / judge / report / reproduce / bench."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import BenchConfig, JudgeConfig, ReportConfig, ReproduceConfig, RunConfig

__all__ = ["main"]

log = logging.getLogger("iclr25.air_bench")


JUDGE_FAILURES_EXIT = 3
"""Exit status of ``judge`` when every call went through but some answers had no valid score
(judge failures: stored, excluded from rates, counted in reports). ``1`` = failed calls/batches."""


def _setup_logging(quiet: bool) -> None:
    for noisy in ("httpx", "httpx2", "httpcore", "openai"):  # one line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _jsonable(cfg: Any) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(cfg), default=str))


def _api_key(env_name: str) -> str | None:
    """The API key from the named environment variable (never from a flag, never logged)."""
    return os.environ.get(env_name) or None


def _http_backend(model: str, base_url: str | None, env_name: str, timeout_s: float) -> Any:
    from iclr25.core.lm.generation import OpenAIChatGenerator

    # retries are done by the runner (bounded, with backoff), so the client does not retry on its own
    return OpenAIChatGenerator(model, base_url=base_url, api_key=_api_key(env_name), timeout=timeout_s,
                               max_retries=0, concurrency=1)


def _hf_backend(model: str, device: str, batch_size: int, chat_template: bool) -> Any:
    try:
        from iclr25.core.lm import load_causal_lm
        from iclr25.core.lm.generation import TransformersGenerator
    except ImportError as e:  # pragma: no cover - depends on extras
        raise ValueError(f"the hf backend needs torch + transformers: pip install 'iclr25-air-bench[hf]' ({e})") from None
    m, tok = load_causal_lm(model, device=device)
    return TransformersGenerator(m, tok, batch_size=batch_size, chat_template=chat_template, name=model)


#: run_config.json fields that must match when a run is resumed (the cache would mix answers otherwise)
_RUN_IDENTITY = ("model", "backend", "base_url", "prompts", "revision", "categories", "limit", "max_new_tokens",
                 "temperature", "chat_template", "seed", "mock_refusal_prob")


def _check_resume(cfg: RunConfig, prompt_set: dict[str, Any]) -> None:
    p = cfg.out / "run_config.json"
    if not (cfg.resume and p.is_file()):
        return
    old = json.loads(p.read_text(encoding="utf-8"))
    new = _jsonable(cfg)
    changed = [k for k in _RUN_IDENTITY if k in old and old[k] != new.get(k)]
    if old.get("prompt_set") and old["prompt_set"].get("sha256") != prompt_set["sha256"]:
        changed.append("prompt set (sha256)")
    if changed:
        raise ValueError(f"--resume into {cfg.out}: {', '.join(changed)} differ from the first run "
                         f"({p}); resume with the same settings, or write to another --out")


def _filter(records: list[dict[str, Any]], categories: Sequence[str], limit: int | None) -> list[dict[str, Any]]:
    if categories:
        recs = [r for r in records if any(r["cate-idx"] == c or r["cate-idx"].startswith(c + ".")
                                          for c in categories)]
        if not recs:
            raise ValueError(f"--categories {list(categories)} selects no record")
        records = recs
    return records[:limit] if limit else records


def cmd_run(cfg: RunConfig) -> int:
    from iclr25.core.lm.generation import GenerationConfig

    from .data import load_prompts, prompt_set_info
    from .runner import RetryPolicy, generate_responses
    from .testing import MockRefusalBackend

    _setup_logging(cfg.quiet)
    prompts = load_prompts(cfg.prompts, revision=cfg.revision, categories=cfg.categories or None,
                           limit=cfg.limit)
    source = "hf:" + cfg.revision[:12] if cfg.prompts in ("hf", "stanford-crfm/air-bench-2024") else cfg.prompts
    pset = prompt_set_info(prompts, source)
    log.info("prompt set %s: %d prompts, sha256 %s", source, pset["count"], pset["sha256"][:16])
    _check_resume(cfg, pset)
    if cfg.backend == "openai":
        backend = _http_backend(cfg.model, cfg.base_url, cfg.api_key_env, cfg.timeout_s)
    elif cfg.backend == "hf":
        backend = _hf_backend(cfg.model, cfg.device, cfg.batch_size, cfg.chat_template)
    else:
        backend = MockRefusalBackend(prompts, {}, default=cfg.mock_refusal_prob, seed=cfg.seed,
                                     name=cfg.model or "mock-refuser", latency_s=cfg.mock_latency_s,
                                     blocked_marker=cfg.mock_blocked_marker)
    gen = GenerationConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                           seed=cfg.seed if cfg.temperature > 0 else None)
    cfg.out.mkdir(parents=True, exist_ok=True)
    if not (cfg.resume and (cfg.out / "run_config.json").is_file()):
        (cfg.out / "run_config.json").write_text(json.dumps({**_jsonable(cfg), "prompt_set": pset}, indent=1)
                                                 + "\n", encoding="utf-8")
    res = generate_responses(backend, prompts, cfg.out / "responses.jsonl", config=gen,
                             model_name=cfg.model or None, batch_size=cfg.batch_size,
                             concurrency=cfg.concurrency,
                             retry=RetryPolicy(cfg.max_retries, cfg.backoff_s), resume=cfg.resume,
                             progress=not cfg.quiet, prompt_set=pset)
    n_blocked = sum(bool(r.get("blocked")) for r in res.records)
    msg = (f"run: {len(res.records)}/{len(prompts)} responses in {cfg.out / 'responses.jsonl'} "
           f"({res.n_new} new, {res.n_cached} cached, {n_blocked} blocked by the provider, {len(res.failed)} "
           f"failed, {res.seconds:.1f} s; prompts: {source}, {pset['count']})")
    if res.failed:
        print(msg + "; rerun with --resume to retry the failed prompts")
        return 1
    print(msg)
    return 0


def _build_judge(cfg: JudgeConfig) -> Any:
    from iclr25.core.lm.generation import GenerationConfig

    from .data import load_graded_responses, load_judge_templates
    from .judges import EmbeddingLRJudge, KeywordJudge, LLMJudge
    from .testing import MockJudgeBackend

    if cfg.judge == "keyword":
        return KeywordJudge()
    if cfg.judge == "embedding":
        train = load_graded_responses(None if cfg.train == "mirror" else cfg.train)
        return EmbeddingLRJudge().fit([r["response"] for r in train], [r["refusal_score"] for r in train])
    templates = load_judge_templates(None if cfg.templates == "mirror" else cfg.templates,
                                     convention=cfg.convention)
    log.info("judge templates: %d categories, convention %s", len(templates),
             next(iter(templates.values())).convention if templates else "?")
    if cfg.judge_backend == "openai":
        be = _http_backend(cfg.judge_model, cfg.judge_base_url, cfg.api_key_env, cfg.timeout_s)
    elif cfg.judge_backend == "hf":
        be = _hf_backend(cfg.judge_model, "auto", cfg.batch_size, True)
    else:
        be = MockJudgeBackend(malformed_every=cfg.mock_malformed_every, latency_s=cfg.mock_latency_s,
                              convention=next(iter(templates.values())).convention)  # never a real judge name
    return LLMJudge(be, templates, config=GenerationConfig(max_new_tokens=cfg.judge_max_tokens,
                                                           temperature=0.0), strict=cfg.strict_parse)


def cmd_judge(cfg: JudgeConfig) -> int:
    from .data import read_jsonl
    from .runner import RetryPolicy, judge_responses

    _setup_logging(cfg.quiet)
    if not cfg.responses.is_file():
        raise FileNotFoundError(f"--responses {cfg.responses} does not exist (run `run` first)")
    records = read_jsonl(cfg.responses, torn_tail="drop")
    if not records:
        raise ValueError(f"--responses {cfg.responses}: no response records (the file is empty)")
    records = _filter(records, cfg.categories, cfg.limit)
    out = cfg.out
    judge = _build_judge(cfg)
    res = judge_responses(judge, records, out / "scores.jsonl", batch_size=cfg.batch_size,
                          concurrency=cfg.concurrency, retry=RetryPolicy(cfg.max_retries, cfg.backoff_s),
                          resume=cfg.resume, rejudge_failures=cfg.rejudge_failures, progress=not cfg.quiet)
    n_fail = sum(r.get("refusal_score") is None for r in res.records)
    n_blocked = sum(bool(r.get("blocked")) for r in res.records)
    msg = (f"judge[{judge.name}]: {len(res.records)}/{len(records)} judged into {out / 'scores.jsonl'} "
           f"(convention {getattr(judge, 'convention', 'n/a')}; {res.n_new} new, {res.n_cached} cached, "
           f"{n_fail} judge failures, {n_blocked} blocked, {len(res.failed)} call failures, {res.seconds:.1f} s)")
    if res.failed:
        print(msg + "; rerun with --resume")
        return 1
    if n_fail:
        print(msg + f"; {n_fail} of {len(res.records)} items have no valid judge score (excluded from every rate); "
              "rerun with --resume --rejudge-failures")
        return JUDGE_FAILURES_EXIT
    print(msg)
    return 0


def cmd_report(cfg: ReportConfig) -> int:
    from iclr25.core.jsonl import iter_jsonl

    from .data import load_taxonomy
    from .report import build_report, check_scored_record, write_report_files

    _setup_logging(cfg.quiet)
    recs: list[dict[str, Any]] = []
    for p in cfg.scores:
        if not Path(p).is_file():
            raise FileNotFoundError(f"--scores {p} does not exist")
        for line, r in iter_jsonl(p, torn_tail="drop"):
            check_scored_record(r, f"{p}:{line}")
            recs.append(r)
    try:
        names = load_taxonomy(None if cfg.taxonomy == "mirror" else cfg.taxonomy).names()
    except FileNotFoundError as e:
        log.warning("no taxonomy for category names (%s)", str(e).splitlines()[0])
        names = {}
    paths = write_report_files(recs, cfg.out, names=names, plot=cfg.plot)
    rep = build_report(recs, names=names)
    def _f(v) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    summary = ", ".join(f"{lab}: {_f(m['aggregate']['overall']['all']['refusal_rate'])} "
                        f"± {_f(m['aggregate']['overall']['all']['se'])} "
                        f"(n={m['aggregate']['overall']['all']['n']}, {m['n_judge_failures']} judge failures, "
                        f"{m['n_blocked']} blocked)"
                        for lab, m in rep["models"].items())
    meta = rep["meta"]
    sets = "; ".join(f"{p['source']} ({p['count']} prompts)" for p in meta["prompt_sets"]) or "not recorded"
    print(f"report: {', '.join(str(p) for p in paths.values())}\nconvention {meta['convention']}, prompts: "
          f"{sets}\noverall refusal rate: {summary}")
    return 0


def cmd_bench(cfg: BenchConfig) -> int:
    from .data import load_prompts
    from .throughput import http_throughput, local_throughput

    _setup_logging(cfg.quiet)
    prompts = load_prompts("mirror")
    res: dict[str, Any] = {
        "http": http_throughput(prompts[:cfg.http_prompts], latency_s=cfg.latency_s,
                                concurrency=cfg.concurrency),
        "http_settings": {"prompts": cfg.http_prompts, "latency_s": cfg.latency_s,
                          "concurrency": cfg.concurrency},
    }
    try:
        res["local_tiny_gpt2"] = local_throughput(prompts[:cfg.tiny_prompts], batch_size=cfg.tiny_batch,
                                                  max_new_tokens=cfg.max_new_tokens)
        res["local_settings"] = {"prompts": cfg.tiny_prompts, "batch": cfg.tiny_batch,
                                 "max_new_tokens": cfg.max_new_tokens}
    except ImportError as e:
        log.warning("local tiny-model benchmark skipped (needs iclr25-core[lm]): %s", e)
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "throughput.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    h = res["http"]
    line = f"bench: http {h['sequential']:.1f} -> {h['concurrent']:.1f} prompts/s ({h['ratio']:.1f}x)"
    if "local_tiny_gpt2" in res:
        t = res["local_tiny_gpt2"]
        line += f"; tiny GPT-2 {t['sequential']:.1f} -> {t['batched']:.1f} prompts/s ({t['ratio']:.1f}x)"
    print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-air-bench``; returns the exit code."""
    return run_cli(
        "iclr25-air-bench",
        "AIR-Bench 2024 (ICLR 2025): regulation-aligned safety evaluation. "
        "run (model -> responses), judge (responses -> scores), report (scores -> tables/plot).",
        {
            "run": Command(RunConfig, _guard(cmd_run), "send prompts to a model; cache responses (resumable)"),
            "judge": Command(JudgeConfig, _guard(cmd_judge), "score responses with the LLM / keyword / embedding judge"),
            "report": Command(ReportConfig, _guard(cmd_report), "refusal rates at levels 1-4: JSON, CSV, Markdown, plot"),
            "reproduce": reproduce_command("air-bench", "iclr25.air_bench.reproduce:reproduce", __version__,
                                           config=ReproduceConfig, help="reproduce the paper's claims (CPU scale)"),
            "bench": Command(BenchConfig, _guard(cmd_bench), "throughput: batched/concurrent vs one prompt at a time"),
        },
        argv,
        version=__version__,
    )


def _guard(fn: Callable[[Any], int]) -> Callable[[Any], int]:
    """run_cli prints ValueError/FileNotFoundError cleanly; FileExistsError (an existing output without
    --resume) and KeyError (a missing judge template) become ValueError so they print the same way."""

    def run(cfg: Any) -> int:
        try:
            return fn(cfg)
        except FileExistsError as e:
            raise ValueError(str(e)) from None
        except KeyError as e:
            raise ValueError(e.args[0] if e.args else str(e)) from None

    return run
