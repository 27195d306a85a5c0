"""Console script ``iclr25-seal``: ``train-selector``, ``select``, ``sft``, ``evaluate``, ``reproduce``, ``demo``.

Only the config dataclasses are imported at module level, so ``--help`` stays light (no torch,
transformers or peft).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    BilevelConfig,
    DemoConfig,
    EvaluateConfig,
    ReproduceConfig,
    SelectConfig,
    SFTCommandConfig,
    SFTConfig,
    TrainSelectorConfig,
)

PROG = "iclr25-seal"
DESCRIPTION = (f"SEAL (ICLR 2025, iclr25-seal {__version__}): bilevel data selection that keeps an aligned LLM safe "
               "under fine-tuning. train-selector learns one score per fine-tuning sample against a trusted safety "
               "set, select keeps the top-ranked fraction as a file, sft fine-tunes the original model on it, "
               "evaluate scores answers (exact match, refusal rate, likelihood safety margin, win rate). Any local "
               "model folder or Hugging Face id; LoRA with --lora-r; multi-GPU under `accelerate launch` (DeepSpeed "
               "ZeRO-3 config shipped).")
log = logging.getLogger("iclr25.seal")


def _sub(cfg: Any, cls: type) -> Any:
    return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})


def _labels_auroc(logits: Any, labels: Sequence[str | None]) -> dict[str, float]:
    if not labels or any(lab is None for lab in labels):
        return {}
    from .experiment import selection_metrics

    try:
        return selection_metrics(logits, [str(x) for x in labels])
    except ValueError:
        return {}


def cmd_train_selector(cfg: TrainSelectorConfig) -> int:
    from iclr25.core.runinfo import write_run_files

    from .bilevel import train_selector
    from .data import encode_pairs, read_pairs
    from .runtime import make_runtime
    from .scale import load_model

    t0 = time.perf_counter()
    out = Path(cfg.out)
    safe_ps = read_pairs(cfg.safe, what="--safe")
    ft_ps = read_pairs(cfg.ft, what="--ft")
    runtime = make_runtime(cfg.device)
    model, tok = load_model(cfg.model, cfg, runtime)
    safe = encode_pairs(tok, safe_ps, template=cfg.prompt_template, max_len=cfg.max_len, what="--safe")
    ft = encode_pairs(tok, ft_ps, template=cfg.prompt_template, max_len=cfg.max_len, what="--ft")
    if runtime.is_main:
        out.mkdir(parents=True, exist_ok=True)
    bcfg = _sub(cfg, BilevelConfig)
    res = train_selector(model, safe, ft, bcfg, runtime=runtime, checkpoint_dir=out / "checkpoint", resume=cfg.resume,
                         stop_after_steps=cfg.stop_after_steps, progress=not cfg.quiet,
                         metrics_path=out / "metrics.jsonl")
    res.metadata = {"ft_sha256": ft_ps.sha256, "ft_path": str(cfg.ft), "safe_sha256": safe_ps.sha256,
                    "safe_path": str(cfg.safe), "model": str(cfg.model), "n_duplicates": str(ft_ps.n_duplicates)}
    done = len(res.history)
    summary = {"n_ft": len(ft), "n_safe": len(safe), "epochs_done": done, "epochs": cfg.epochs,
               "fraction_updated_every_epoch": res.fraction_updated_every_epoch() if done else None,
               "ft_duplicates": ft_ps.n_duplicates, "ft_truncated": ft.n_truncated, "history": res.history,
               **_labels_auroc(res.logits, ft_ps.labels)}
    if runtime.is_main:
        if done == cfg.epochs:
            res.save(out / "selector.safetensors")
        (out / "history.json").write_text(json.dumps(res.history, indent=1) + "\n")
        write_run_files(out, cfg, summary, started=t0)
    if done < cfg.epochs:
        print(f"train-selector: stopped after {done}/{cfg.epochs} epochs (checkpoint in {out / 'checkpoint'}); "
              "continue with --resume")
        return 0
    cov = summary["fraction_updated_every_epoch"]
    extra = "".join(f", {k} {v:.3f}" for k, v in summary.items() if k.startswith("auroc"))
    print(f"train-selector: {len(ft)} scores over {cfg.epochs} epochs (σ {bcfg.sigmas()[0]:g} → {bcfg.sigmas()[-1]:g}, "
          f"{cfg.selector_optimizer} on ω), {cov:.3f} of D_ft updated in every epoch{extra}, "
          f"{time.perf_counter() - t0:.0f} s -> {out / 'selector.safetensors'}")
    return 0


def cmd_select(cfg: SelectConfig) -> int:
    from iclr25.core.jsonl import write_jsonl
    from iclr25.core.runinfo import write_run_files

    from .bilevel import load_selector
    from .data import read_pairs
    from .selection import select_top

    out = Path(cfg.out)
    sel = load_selector(cfg.selector)
    ft = read_pairs(cfg.ft, what="--ft")
    if sel.n != len(ft):
        raise ValueError(f"the selector {cfg.selector} has {sel.n} scores but --ft {cfg.ft} has {len(ft)} samples: it "
                         "was trained on another file; pass the fine-tuning file it was trained on")
    want = sel.metadata.get("ft_sha256")
    if want and want != ft.sha256:
        log.warning("--ft %s has the same length as, but other bytes than, the file the selector was trained on "
                    "(%s); scores follow the line order", cfg.ft, sel.metadata.get("ft_path"))
    order = select_top(sel.logits, cfg.keep)
    rank = {int(i): r + 1 for r, i in enumerate(order.tolist())}
    kept = sorted(rank)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "kept.jsonl", "w", encoding="utf-8") as fh:
        for i in kept:
            if cfg.annotate:
                rec = json.loads(ft.raw_lines[i])
                rec["seal_score"], rec["seal_rank"] = float(sel.logits[i]), rank[i]
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            else:
                fh.write(ft.raw_lines[i] + "\n")
    write_jsonl(out / "scores.jsonl", ({"line": int(ft.sources[i].rsplit(":", 1)[1]), "index": i,
                                        "score": float(sel.logits[i]), "rank": rank[i]} for i in kept))
    labs = [ft.labels[i] for i in kept]
    summary: dict[str, Any] = {"n_ft": len(ft), "kept": len(kept), "keep": cfg.keep,
                               "score_min_kept": float(sel.logits[order[-1]]), "score_max": float(sel.logits[order[0]]),
                               "duplicates_in_ft": ft.n_duplicates}
    if all(lab is not None for lab in ft.labels):
        summary["kept_label_counts"] = {str(k): labs.count(k) for k in sorted(set(map(str, ft.labels)))}
    write_run_files(out, cfg, summary)
    lab_txt = f"; kept labels {summary['kept_label_counts']}" if "kept_label_counts" in summary else ""
    print(f"select: kept {len(kept)} of {len(ft)} lines (keep {cfg.keep}){lab_txt} -> {out / 'kept.jsonl'} "
          f"(+ scores.jsonl)")
    return 0


def cmd_sft(cfg: SFTCommandConfig) -> int:
    from iclr25.core.runinfo import write_run_files

    from .data import LMDataset, encode_pairs, read_pairs
    from .runtime import make_runtime
    from .scale import load_model, save_trained
    from .sft import sft

    t0 = time.perf_counter()
    out = Path(cfg.out)
    data_ps = read_pairs(cfg.data, what="--data")
    mix_ps = read_pairs(cfg.safeinstr, what="--safeinstr") if cfg.safeinstr is not None else None
    runtime = make_runtime(cfg.device)
    model, tok = load_model(cfg.model, cfg, runtime)
    data = encode_pairs(tok, data_ps, template=cfg.prompt_template, max_len=cfg.max_len, what="--data")
    if mix_ps is not None:
        data = LMDataset.concat([data, encode_pairs(tok, mix_ps, template=cfg.prompt_template, max_len=cfg.max_len,
                                                     what="--safeinstr")])
    if runtime.is_main:
        out.mkdir(parents=True, exist_ok=True)
    scfg = _sub(cfg, SFTConfig)
    steps_total = -(-len(data) // scfg.batch_size) * scfg.epochs
    model = sft(model, data, scfg, runtime=runtime, checkpoint_dir=out / "checkpoint", resume=cfg.resume,
                stop_after_steps=cfg.stop_after_steps, progress=not cfg.quiet, metrics_path=out / "metrics.jsonl")
    if cfg.stop_after_steps is not None and cfg.stop_after_steps < steps_total:
        print(f"sft: stopped after {cfg.stop_after_steps} of {steps_total} steps (checkpoint in {out / 'checkpoint'}); "
              "continue with --resume")
        return 0
    path = save_trained(model, tok, out / "model", runtime)
    if runtime.is_main:
        write_run_files(out, cfg, {"n_train": len(data), "n_safeinstr": len(mix_ps) if mix_ps else 0,
                                   "steps": steps_total, "model": str(path)}, started=t0)
    print(f"sft: {len(data)} samples × {cfg.epochs} epochs ({steps_total} steps), {time.perf_counter() - t0:.0f} s "
          f"-> {path}")
    return 0


def _read_eval(path: Path) -> list[dict[str, Any]]:
    from iclr25.core.jsonl import read_jsonl

    recs = read_jsonl(path, required=("prompt",), nonempty=("prompt",))
    if not recs:
        raise ValueError(f"--prompts {path} has no records")
    for i, r in enumerate(recs, 1):
        kind = r.get("kind", "benign")
        if kind not in ("benign", "harmful"):
            raise ValueError(f"{path}:{i}: kind={kind!r} must be 'benign' or 'harmful'")
        if ("refusal" in r) != ("compliance" in r):
            raise ValueError(f"{path}:{i}: the safety margin needs both 'refusal' and 'compliance'")
    return recs


def _read_responses(path: Path, n: int, what: str) -> list[str]:
    from iclr25.core.jsonl import read_jsonl

    recs = read_jsonl(path, required=("response",))
    if len(recs) != n:
        raise ValueError(f"{what} {path} has {len(recs)} responses but --prompts has {n}; they must align line by line")
    return [str(r["response"]) for r in recs]


def cmd_evaluate(cfg: EvaluateConfig) -> int:
    from iclr25.core.jsonl import write_jsonl
    from iclr25.core.runinfo import write_run_files

    from .metrics import (
        ProgrammaticJudge,
        exact_match,
        generate_responses,
        refusal_rate,
        safety_margin,
        win_rate,
    )

    t0 = time.perf_counter()
    out = Path(cfg.out)
    recs = _read_eval(cfg.prompts)
    prompts = [str(r["prompt"]) for r in recs]
    model = tok = None
    needs_model = cfg.responses is None and cfg.generator == "transformers" or any("refusal" in r for r in recs)
    if needs_model and cfg.model is not None:
        from iclr25.core.seed import choose_device

        from .runtime import PlainRuntime
        from .scale import load_model

        model, tok = load_model(cfg.model, cfg, PlainRuntime(choose_device(cfg.device)), adapter=cfg.adapter,
                                trainable=False)
        model.eval()
    if cfg.responses is not None:
        responses = _read_responses(cfg.responses, len(recs), "--responses")
    elif cfg.generator in ("openai", "openai-chat"):
        from iclr25.core.lm.generation import OpenAIChatGenerator, OpenAICompletionGenerator

        name = cfg.generator_model or cfg.model
        if not name:
            raise ValueError(f"--generator {cfg.generator} needs --generator-model (or --model) naming the served model")
        chat = cfg.generator == "openai-chat"
        gen = (OpenAIChatGenerator if chat else OpenAICompletionGenerator)(name, base_url=cfg.generator_base_url)
        try:
            responses = generate_responses(None, None, prompts, template=cfg.prompt_template,
                                           max_new_tokens=cfg.max_new_tokens, generator=gen)
        except Exception as e:  # noqa: BLE001 - an HTTP client error becomes one line; anything else propagates
            raise _server_error(e, cfg.generator, name, gen.base_url) from None
    else:
        if model is None:
            raise ValueError("generating answers needs --model")
        responses = generate_responses(model, tok, prompts, template=cfg.prompt_template,
                                       max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size)
    judge = ProgrammaticJudge(tuple(cfg.refusal_prefixes), tuple(cfg.compliance_markers))
    kinds = [r.get("kind", "benign") for r in recs]
    terms = [list(r.get("terms", [])) for r in recs]
    res: dict[str, Any] = {"n": len(recs)}
    with_ref = [i for i, r in enumerate(recs) if "reference" in r]
    if with_ref:
        res["exact_match"] = exact_match([responses[i] for i in with_ref], [str(recs[i]["reference"]) for i in with_ref])
    harmful = [i for i, k in enumerate(kinds) if k == "harmful"]
    if harmful:
        res["refusal_rate"] = refusal_rate([responses[i] for i in harmful], cfg.refusal_prefixes)
    margin_rows = [i for i, r in enumerate(recs) if "refusal" in r]
    if margin_rows:
        if model is None:
            raise ValueError("the safety margin (records with refusal/compliance) needs --model to score likelihoods")
        res["safety_margin"], _ = safety_margin(model, tok, [prompts[i] for i in margin_rows],
                                                [str(recs[i]["refusal"]) for i in margin_rows],
                                                [recs[i]["compliance"] for i in margin_rows],
                                                template=cfg.prompt_template, batch_size=cfg.batch_size)
    scorable = [i for i in range(len(recs)) if kinds[i] == "harmful" or "reference" in recs[i]]
    scores = [judge.score(kinds[i], responses[i], recs[i].get("reference"), terms[i]) if i in set(scorable) else None
              for i in range(len(recs))]
    if cfg.baseline is not None:
        base = _read_responses(cfg.baseline, len(recs), "--baseline")
        if cfg.judge == "openai":
            from iclr25.core.lm.generation import OpenAIChatGenerator

            from .metrics import judged_win_rate

            jgen = OpenAIChatGenerator(cfg.judge_model, base_url=cfg.judge_base_url)
            try:
                jr = judged_win_rate(jgen, prompts, responses, base)
            except ValueError:
                raise
            except Exception as e:  # noqa: BLE001 - an HTTP client error becomes one line
                raise _server_error(e, "judge", cfg.judge_model, jgen.base_url) from None
            res["win_rate"] = jr["win_rate"]
            res["judge"] = {k: v for k, v in jr.items() if k != "verdicts"} | {"model": cfg.judge_model}
        else:
            if not scorable:
                raise ValueError("the programmatic win rate needs harmful prompts or references; use --judge openai")
            b_scores = [judge.score(kinds[i], base[i], recs[i].get("reference"), terms[i]) for i in scorable]
            res["win_rate"] = win_rate([scores[i] for i in scorable], b_scores)
            res["judge"] = {"kind": "programmatic", "n": len(scorable)}
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "responses.jsonl", ({"prompt": p, "response": r, "kind": k, "judge_score": s}
                                          for p, r, k, s in zip(prompts, responses, kinds, scores)))
    write_run_files(out, cfg, res, started=t0)
    parts = [f"{k} {v:.3f}" for k, v in res.items() if isinstance(v, float)]
    print(f"evaluate: {len(recs)} prompts; " + ", ".join(parts) + f" -> {out / 'results.json'}")
    return 0


def _server_error(e: BaseException, what: str, model: str, base_url: str | None) -> BaseException:
    """A one-line ValueError for an HTTP client error of the generation or judge server; ``e`` itself otherwise."""
    code = getattr(e, "status_code", None)
    if not isinstance(code, int) or not 400 <= code < 500:
        return e
    msg = str(getattr(e, "message", "") or e).splitlines()[0][:160]
    where = base_url or "$OPENAI_BASE_URL / api.openai.com"
    if what == "openai" and code in (404, 405):
        return ValueError(f"--generator openai: {where} answered HTTP {code} on /v1/completions for model {model!r} "
                          f"({msg}); a chat-only server needs --generator openai-chat (/v1/chat/completions), or "
                          "check --generator-model")
    endpoint = "/v1/completions" if what == "openai" else "/v1/chat/completions"
    flag = "--judge-model" if what == "judge" else "--generator-model"
    if code in (408, 409, 429):  # transient: the client retried it already; the model and key are not the problem
        return ValueError(f"{'--judge openai' if what == 'judge' else '--generator ' + what}: {where} still answered "
                          f"HTTP {code} on {endpoint} for model {model!r} after the client's retries ({msg}); the "
                          "server is rate-limiting or busy: rerun later")
    return ValueError(f"{'--judge openai' if what == 'judge' else '--generator ' + what}: {where} answered HTTP {code} "
                      f"on {endpoint} for model {model!r} ({msg}); check {flag}, the URL and the API key")


def cmd_demo(cfg: DemoConfig) -> int:
    from iclr25.core.jsonl import write_jsonl

    from .config import CPU_SELECTOR, CPU_SFT
    from .tasks import TINY_TEMPLATE, aligned_base, make_synthetic_safety_task

    t0 = time.perf_counter()
    out = Path(cfg.out)
    task = make_synthetic_safety_task(cfg.n, seed=cfg.seed)
    base, tok, _ = aligned_base(task, cfg.seed, progress=not cfg.quiet)
    model_dir = out / "base_model"
    base.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    d = out / "data"
    write_jsonl(d / "safe.jsonl", ({"prompt": p, "response": r} for p, r in zip(task.safe.prompts, task.safe.responses)))
    write_jsonl(d / "ft.jsonl", ({"prompt": p, "response": r, "label": lab}
                                 for p, r, lab in zip(task.ft.prompts, task.ft.responses, task.ft.labels)))
    ev = []
    for name, e in task.evals.items():
        if name == "harmful":
            ev += [{"prompt": p, "kind": "harmful", "refusal": r, "compliance": c, "terms": t}
                   for p, r, c, t in zip(e["prompts"], e["refusals"], e["compliances"], e["terms"])]
        else:
            ev += [{"prompt": p, "kind": "benign", "reference": r} for p, r in zip(e["prompts"], e["references"])]
    write_jsonl(d / "eval.jsonl", ev)
    common = {"device": "cpu", "quiet": cfg.quiet, "threads": cfg.threads}
    steps = [
        ("train-selector", cmd_train_selector, TrainSelectorConfig(
            model=str(model_dir), safe=d / "safe.jsonl", ft=d / "ft.jsonl", prompt_template=TINY_TEMPLATE,
            out=out / "selector", seed=cfg.seed, **CPU_SELECTOR, **common)),
        ("select", cmd_select, SelectConfig(selector=out / "selector" / "selector.safetensors", ft=d / "ft.jsonl",
                                            keep=cfg.keep, out=out / "select", **common)),
        ("sft (SEAL subset)", cmd_sft, SFTCommandConfig(model=str(model_dir), data=out / "select" / "kept.jsonl",
                                                        prompt_template=TINY_TEMPLATE, out=out / "sft_seal",
                                                        **{**CPU_SFT, "seed": cfg.seed}, **common)),
        ("sft (standard: all of D_ft)", cmd_sft, SFTCommandConfig(model=str(model_dir), data=d / "ft.jsonl",
                                                                  prompt_template=TINY_TEMPLATE, out=out / "sft_standard",
                                                                  **{**CPU_SFT, "seed": cfg.seed}, **common)),
        ("evaluate standard", cmd_evaluate, EvaluateConfig(model=str(out / "sft_standard" / "model"),
                                                           prompts=d / "eval.jsonl", prompt_template=TINY_TEMPLATE,
                                                           max_new_tokens=16, refusal_prefixes=task.refusal_prefixes,
                                                           compliance_markers=task.compliance_markers,
                                                           out=out / "eval_standard", **common)),
        ("evaluate SEAL", cmd_evaluate, EvaluateConfig(model=str(out / "sft_seal" / "model"), prompts=d / "eval.jsonl",
                                                       baseline=out / "eval_standard" / "responses.jsonl",
                                                       prompt_template=TINY_TEMPLATE, max_new_tokens=16,
                                                       refusal_prefixes=task.refusal_prefixes,
                                                       compliance_markers=task.compliance_markers,
                                                       out=out / "eval_seal", **common)),
    ]
    for name, fn, c in steps:
        print(f"demo: {name}")
        fn(c)
    seal = json.loads((out / "eval_seal" / "results.json").read_text())
    std = json.loads((out / "eval_standard" / "results.json").read_text())
    sel = json.loads((out / "selector" / "results.json").read_text())
    print(f"demo: AUROC(unsafe) {sel.get('auroc_unsafe', float('nan')):.3f}; safety margin SEAL "
          f"{seal['safety_margin']:.2f} vs standard {std['safety_margin']:.2f}; win rate vs standard "
          f"{seal['win_rate']:.1f} ({time.perf_counter() - t0:.0f} s) -> {out}")
    return 0


COMMANDS = {
    "train-selector": Command(TrainSelectorConfig, cmd_train_selector,
                              "learn one score per fine-tuning sample against a safety set (--resume)",
                              deprecated={"--save-every": "--checkpoint-every"}),
    "select": Command(SelectConfig, cmd_select, "keep the top-ranked fraction of the fine-tuning file (lines unchanged)"),
    "sft": Command(SFTCommandConfig, cmd_sft, "fine-tune the aligned model on the kept data (LoRA, --resume)",
                   deprecated={"--save-every": "--checkpoint-every"}),
    "evaluate": Command(EvaluateConfig, cmd_evaluate,
                        "answers + exact match, refusal rate, safety margin, win rate (programmatic or LLM judge)"),
    "reproduce": reproduce_command("seal", "iclr25.seal.reproduce:reproduce", __version__, config=ReproduceConfig,
                                   help="reproduce the paper's claims at CPU scale (--quick: ~2 min on 2 cores)"),
    "demo": Command(DemoConfig, cmd_demo, "the whole pipeline on files: tiny aligned model, synthetic JSONL, all commands"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(PROG, DESCRIPTION, COMMANDS, argv, version=__version__)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
