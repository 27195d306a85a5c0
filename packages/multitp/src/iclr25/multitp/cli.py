"""The ``iclr25-multitp`` command: generate / query / parse / evaluate / human / reproduce / bench.

Only the config dataclasses are imported at module level, so ``--help`` is fast; everything else is
imported inside the commands.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    BenchConfig,
    EvaluateConfig,
    GenerateConfig,
    HumanConfig,
    ParseConfig,
    QueryConfig,
    ReproduceConfig,
)

__all__ = ["main"]

log = logging.getLogger("iclr25.multitp")
PROG = "iclr25-multitp"


def _setup(cfg: Any) -> None:
    """Logging level, threads and --out are set by the core's run_cli; silence per-request HTTP logs."""
    for noisy in ("httpx", "httpcore", "openai", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _out(cfg: Any, command: str) -> Path:
    return Path(cfg.out) if getattr(cfg, "out", None) is not None else Path("runs/multitp") / command


def _api_key(env_name: str) -> str:
    """The key from the named environment variable only; "EMPTY" (accepted by vLLM) when it is unset."""
    key = os.environ.get(env_name)
    if not key:
        log.info("$%s is not set: sending no API key (fine for a local vLLM server)", env_name)
        return "EMPTY"
    return key


def _http(model: str, base_url: str | None, env_name: str, timeout_s: float) -> Any:
    try:
        from iclr25.core.lm.generation import OpenAIChatGenerator

        # the runner retries (bounded, with backoff): the client itself does not
        return OpenAIChatGenerator(model, base_url=base_url, api_key=_api_key(env_name), timeout=timeout_s,
                                   max_retries=0, concurrency=1)
    except ImportError as e:
        raise SystemExit(f"{PROG}: the openai backend needs the openai client: pip install 'iclr25-multitp[http]' ({e})") from None


def _hf(model: str, device: str, batch_size: int, load: dict[str, Any] | None = None,
        chat_template: bool = False) -> Any:
    try:
        from iclr25.core.lm import TransformersGenerator, load_causal_lm
    except ImportError as e:
        raise SystemExit(f"{PROG}: the hf backend needs torch + transformers: pip install 'iclr25-multitp[hf]' ({e})") from None
    m, tok = load_causal_lm(model, device=device, padding_side="left", **(load or {}))
    return TransformersGenerator(m, tok, batch_size=batch_size, chat_template=chat_template, name=model)


def _translator(kind: str, cfg: Any) -> Any:
    from .translation import make_translator

    return make_translator(kind, csv_folder=getattr(cfg, "translations_dir", None),
                           nllb_model=getattr(cfg, "nllb_model", None), device=getattr(cfg, "device", "auto"))


def cmd_generate(cfg: GenerateConfig) -> int:
    from .vignettes import category_counts, generate_vignettes, write_dataset_csv

    _setup(cfg)
    out = _out(cfg, "generate")
    out.mkdir(parents=True, exist_ok=True)
    V = generate_vignettes(cfg.lang, cfg.paraphrase, cfg.seed)
    with open(out / "vignettes.jsonl", "w", encoding="utf-8") as fh:
        for v in V:
            fh.write(json.dumps(v.to_dict(), ensure_ascii=False) + "\n")
    csvp = write_dataset_csv(V, out / f"dataset_{cfg.lang}+google.csv")
    print(f"generate: {len(V)} vignettes {category_counts(V)} -> {out / 'vignettes.jsonl'}, {csvp}")
    return 0


def _scripted(cfg: QueryConfig, langs: list[str]) -> Any:
    from .agents import ScriptedAgent, always_left, random_chooser
    from .human import approximate_weights, global_human_vector, human_by_language
    from .spec import CATEGORIES

    if cfg.agent_profile == "random":
        return random_chooser(seed=cfg.agent_seed, refusal=cfg.agent_refusal)
    if cfg.agent_profile == "left":
        return always_left(seed=cfg.agent_seed, refusal=cfg.agent_refusal)
    W = approximate_weights()
    H = human_by_language(W)
    g = global_human_vector(H, W)
    return ScriptedAgent({lg: {c: H.get(lg, g)[c] for c in CATEGORIES} for lg in langs}, seed=cfg.agent_seed, refusal=cfg.agent_refusal, name=cfg.model or "scripted-human")


def cmd_query(cfg: QueryConfig) -> int:
    from iclr25.core.lm.generation import GenerationConfig

    from .runner import RetryPolicy, run_query
    from .spec import check_langs

    _setup(cfg)
    out = _out(cfg, "query")
    langs = check_langs(cfg.langs, field="--langs")
    if cfg.backend == "openai":
        backend = _http(cfg.model, cfg.base_url, cfg.api_key_env, cfg.timeout_s)
    elif cfg.backend == "hf":
        backend = _hf(cfg.model, cfg.device, cfg.batch_size, cfg.load_kwargs())
    else:
        backend = _scripted(cfg, langs)
    model = cfg.model or getattr(backend, "name", cfg.backend)
    fwd = _translator(cfg.translator, cfg)
    bwd = None if cfg.back_translator == "auto" else _translator(cfg.back_translator, cfg)
    settings: dict[str, Any] = {"backend": cfg.backend}
    if cfg.backend == "scripted":  # the agent is the model of a scripted run: fixed on --resume (run_query)
        settings["agent"] = {"profile": cfg.agent_profile, "refusal": cfg.agent_refusal, "seed": cfg.agent_seed}
    if cfg.base_url:
        settings["base_url"] = cfg.base_url
    vignettes = None
    if cfg.limit is not None:
        from .vignettes import generate_vignettes, spread_subset

        vignettes = spread_subset(generate_vignettes("en", cfg.paraphrase, cfg.vignette_seed), cfg.limit)
        settings["limit"] = cfg.limit
    res = run_query(out, backend, model=model, langs=langs, translator=fwd, back_translator=bwd, role=cfg.role,
                    config=GenerationConfig(max_new_tokens=cfg.max_tokens, temperature=cfg.temperature),
                    paraphrase=cfg.paraphrase, vignette_seed=cfg.vignette_seed, vignettes=vignettes,
                    batch_size=cfg.batch_size,
                    concurrency=cfg.concurrency, retry=RetryPolicy(cfg.max_retries, cfg.backoff_s),
                    resume=cfg.resume, progress=not cfg.quiet, max_failures=cfg.max_failures,
                    backend_settings=settings)
    bt = res.extra["backtranslate"]
    failed = len(res.failed) + len(bt.failed)
    if res.extra.get("dropped_torn_tail"):
        print(f"query: dropped a torn last line of {out / 'cache.jsonl'} (interrupted write)")
    msg = f"{res.summary()}; {bt.summary()}; results in {out}"
    if failed:
        errs = {e for *_, e in (res.failed + bt.failed)}
        print(msg + f"\nquery: {failed} items failed ({sorted(errs)[:2]}); rerun with --resume to retry them")
        return 1
    print(msg)
    return 0


def _llm_parser(cfg: ParseConfig) -> Any:
    from .parser import LLMParser

    if not cfg.llm_parser_model:
        return None
    if cfg.llm_parser_backend == "openai":
        be = _http(cfg.llm_parser_model, cfg.llm_parser_base_url, cfg.api_key_env, cfg.timeout_s)
    else:
        be = _hf(cfg.llm_parser_model, cfg.device, cfg.batch_size, chat_template=True)
    return LLMParser(be)


def cmd_parse(cfg: ParseConfig) -> int:
    from .runner import RetryPolicy, import_responses, load_choices, run_parse

    _setup(cfg)
    if cfg.responses is not None:
        run = _out(cfg, "parse")
        bwd = None if cfg.back_translator == "identity" else _translator(cfg.back_translator, cfg)
        imp = import_responses(cfg.responses, run, model=cfg.model, back_translator=bwd, resume=cfg.resume)
        log.info("imported %d answers (%d new) into %s", imp.n_total, imp.n_new, run)
    else:
        run = cfg.run or Path("runs/multitp/query")
    res = run_parse(run, llm_parser=_llm_parser(cfg), batch_size=cfg.batch_size, concurrency=cfg.concurrency,
                    retry=RetryPolicy(cfg.max_retries, cfg.backoff_s), resume=cfg.resume or cfg.responses is not None,
                    progress=not cfg.quiet)
    from collections import Counter

    labs = Counter(r["label"] for r in load_choices(run))
    msg = (f"{res.summary()}; labels {dict(labs)}; n_other {labs.get('other', 0)}; by method "
           f"{res.extra['by_method']}")
    if res.extra["not_back_translated"]:
        msg += f"; {res.extra['not_back_translated']} answers not back-translated yet (rerun query --resume)"
    if res.failed:
        print(msg + f"\nparse: {len(res.failed)} LLM-parser calls failed; rerun with --resume to retry them")
        return 1
    print(msg + f"; results in {run}/cache.jsonl")
    return 0


def _lang_from_name(p: Path) -> str | None:
    from .spec import LANGUAGES

    stem = p.stem.replace("_parsed", "")
    for part in reversed(stem.replace("+", "_").split("_")):
        if part in LANGUAGES:
            return part
        if part == "zh":
            return "zh-cn"
    return None


def cmd_evaluate(cfg: EvaluateConfig) -> int:
    from .evaluate import evaluate_choices, write_evaluation
    from .human import approximate_weights, load_weights

    _setup(cfg)
    out = _out(cfg, "evaluate")
    if cfg.parsed_csv:
        from .aggregation import read_parsed_csv

        recs = []
        for p in cfg.parsed_csv:
            lang = cfg.lang if (cfg.lang and len(cfg.parsed_csv) == 1) else _lang_from_name(Path(p))
            if lang is None:
                raise ValueError(f"{p}: cannot tell the language from the file name; pass --lang (one file at a time)")
            recs += read_parsed_csv(p, lang=lang, model=Path(p).stem.split("_")[0])
        source = [str(p) for p in cfg.parsed_csv]
    else:
        from .runner import load_choices

        run = cfg.run or Path("runs/multitp/query")
        recs = load_choices(run)
        source = [str(run)]
        conf_p = run / "config.json"
        q = json.loads(conf_p.read_text(encoding="utf-8")).get("query", {}) if conf_p.is_file() else {}
        if q.get("translator") == "identity" and any(lg != "en" for lg in q.get("langs", [])):
            log.warning("%s was queried with the identity translator: every language got the English vignettes "
                        "and system prompt, so language differences are not measured", run)
            print(f"{PROG} evaluate: warning: {run} was queried with the identity translator (English text for "
                  "every language); language sensitivity and clusters say nothing about languages", file=sys.stderr)
    if not recs:
        raise ValueError(f"no parsed answers in {source}; run `parse` first")
    W = load_weights(cfg.weights) if cfg.weights is not None else approximate_weights(population=cfg.population)
    res = evaluate_choices(recs, weights=W, k=cfg.k)
    res["source"] = source
    paths = write_evaluation(res, out, plot=cfg.plot)
    lines = []
    for m, r in res["models"].items():
        mr = r["misalignment"]["country/renormalised"]
        mis = mr["score"]
        if mis is None or mis != mis:
            why = next(iter(mr["excluded"].values()), "no unit has a human value") if mr["excluded"] else \
                "no unit has a human value"
            mis_s = (f"misalignment undefined ({len(mr['excluded'])} countries excluded, e.g. {why}; "
                     f"{r['n_other']} answers `other`)")
        else:
            mis_s = f"misalignment {mis:.3f} (country, renormalised)"
        for w in r.get("warnings", []):
            print(f"{PROG} evaluate: warning: {m}: {w}", file=sys.stderr)
        lines.append(f"{m}: {len(r['languages'])} languages, {mis_s}, "
                     f"sensitivity {r['language_sensitivity'] if r['language_sensitivity'] is None else round(r['language_sensitivity'], 2)}, "
                     f"refusal {_pct(r['refusal_rate_mean'])}, n_other {r['n_other']}")
    print("evaluate: " + "; ".join(lines) + f"; {', '.join(str(p) for p in paths)}")
    return 0


def _pct(x: float | None) -> str:
    return "undefined (no answer decided or refused)" if x is None or x != x else f"{x:.1f} %"


def cmd_human(cfg: HumanConfig) -> int:
    from .human import approximate_weights, human_by_country, human_by_language, load_weights
    from .spec import CATEGORIES, HUMAN_LABEL

    _setup(cfg)
    out = _out(cfg, "human")
    W = load_weights(cfg.weights) if cfg.weights is not None else approximate_weights(population=cfg.population)
    hl, hc = human_by_language(W), human_by_country()
    miss = [c for c in cfg.country if c.upper() not in hc]
    if miss:
        raise ValueError(f"--country {miss[0]!r} is not an ISO3 code of country_amce.csv (e.g. DEU, USA, ZAF)")
    nol = [lg for lg in cfg.lang if lg not in hl]
    if nol:
        raise ValueError(f"--lang {nol[0]!r} has no human value under these weights ({W.source})")
    rows = [("country", c.upper(), hc[c.upper()]) for c in cfg.country]
    rows += [("lang", lg, hl[lg]) for lg in (cfg.lang or ([] if cfg.country else sorted(hl)))]
    head = "| kind | code | " + " | ".join(HUMAN_LABEL[c] for c in CATEGORIES) + " |"
    table = [head, "|" + "---|" * (2 + len(CATEGORIES))]
    table += [f"| {k} | {code} | " + " | ".join(f"{v[c]:.2f}" for c in CATEGORIES) + " |" for k, code, v in rows]
    out.mkdir(parents=True, exist_ok=True)
    (out / "human.json").write_text(json.dumps({"weights": W.source, "approximation": W.approximation,
                                                "by_language": hl, "by_country": hc}, indent=1) + "\n", encoding="utf-8")
    print("\n".join(table))
    label = "approximation: " + W.source if W.approximation else "weights: " + W.source
    print(f"human: {len(rows)} rows ({label}); all values in {out / 'human.json'}")
    return 0


def cmd_bench(cfg: BenchConfig) -> int:
    from .bench import run_bench

    _setup(cfg)
    out = _out(cfg, "bench")
    r = run_bench(out, latency_s=cfg.latency_s, concurrency=cfg.concurrency, n=cfg.n_vignettes)
    h, p, a = r["http"], r["parse"], r["analysis"]
    print(f"bench: runner {h['sequential']:.1f} -> {h['concurrent']:.1f} vignettes/s at concurrency {cfg.concurrency} "
          f"({h['ratio']:.1f}x, {cfg.latency_s * 1000:.0f} ms latency); rule-based parse {p['rows_per_s']:.0f} rows/s; "
          f"analysis of {a['languages']} x {a['vignettes']} in {a['total_seconds']:.2f} s; {out / 'bench.json'}")
    return 0


def _clean(name: str, fn: Callable[[Any], int]) -> Callable[[Any], int]:
    """Expected errors (bad input, an existing run, a missing file) as one line and exit code 2."""

    def run(cfg: Any) -> int:
        try:
            return fn(cfg)
        except (FileExistsError, FileNotFoundError, ValueError, KeyError) as e:
            if os.environ.get("ICLR25_DEBUG") == "1":
                raise
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            print(f"{PROG} {name}: error: {msg}", file=sys.stderr)
            return 2

    return run


COMMANDS = {
    "generate": (GenerateConfig, cmd_generate, "the 460 vignettes (JSONL + official dataset CSV)"),
    "query": (QueryConfig, cmd_query, "ask a model (vLLM/hosted API/local HF) every (language, vignette); resumable"),
    "parse": (ParseConfig, cmd_parse, "answers -> left/right/either/neither/underskilled/other (rules, LLM parser)"),
    "evaluate": (EvaluateConfig, cmd_evaluate, "preferences, refusal, consistency, misalignment, sensitivity, clusters"),
    "human": (HumanConfig, cmd_human, "Moral Machine human preferences by country and language"),
    "bench": (BenchConfig, cmd_bench, "throughput: concurrency, parse rate, analysis time"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-multitp``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    cmds = {n: Command(c, _clean(n, f), h) for n, (c, f, h) in COMMANDS.items()}
    cmds["reproduce"] = reproduce_command("multitp", "iclr25.multitp.reproduce:reproduce", __version__,
                                          config=ReproduceConfig, help="reproduce the paper's claims at CPU scale")
    cmds = {k: cmds[k] for k in ("generate", "query", "parse", "evaluate", "human", "reproduce", "bench")}
    return run_cli(PROG, "MultiTP (ICLR 2025): LLM choices in Moral-Machine trolley dilemmas across 107 languages, "
                   "compared with human preferences.", cmds, args, version=__version__)
