"""``iclr25-cream``: sft / sample / reward / consistency / dpo / loop / evaluate / reproduce / demo.

Only config dataclasses are imported at module level, so ``--help`` does not load torch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import (
    ConsistencyConfig,
    CreamConfig,
    CreamReproduceOptions,
    DemoConfig,
    DpoConfig,
    EvaluateConfig,
    LoopConfig,
    RewardConfig,
    SampleConfig,
    SftConfig,
)

__all__ = ["main"]

log = logging.getLogger("iclr25.cream")


def _load(name: str, opts: Any, device: str, *, padding_side: str | None = None):
    from iclr25.core.lm import load_causal_lm

    from .rewards import check_vocab

    model, tok = load_causal_lm(name, device=device, padding_side=padding_side, **opts.load_options())
    check_vocab(model, tok, name)
    return model, tok


def _same_tokenizer(tok: Any, other: Any, flag: str, name: str, why: str) -> None:
    if other.get_vocab() != tok.get_vocab():
        raise ValueError(f"{flag} {name} has a different tokenizer from --model ({len(other)} vs {len(tok)} tokens); "
                         f"{why}")


def _train_device(device: str) -> str:
    """Under ``accelerate launch`` (WORLD_SIZE > 1) load each process's model on its own GPU (or
    the CPU), not all of them on cuda:0; the trainer then keeps it on ``accelerator.device``."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and device in ("auto", "cuda"):
        import torch

        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu"
    return device


def _finish(out: Path, cfg: Any, results: dict[str, Any], started: float, summary: str) -> int:
    import os

    from iclr25.core.runinfo import write_run_files

    if int(os.environ.get("RANK", "0")) == 0:  # one writer under `accelerate launch`
        write_run_files(out, cfg, results, started=started)
        print(summary)
    return 0


#: flags that may differ on --resume (where and how verbosely it runs, not what it computes)
_RESUME_FREE = ("out", "resume", "quiet", "threads", "device")


def _guard_resume(a: Any, out: Path) -> None:
    """Record the command's flags in ``OUT/run_settings.json``; ``--resume`` with other ones is refused,
    naming ``flag: old -> new`` (the core's guard_resume_settings), before anything is loaded."""
    import os

    from iclr25.core.config import guard_resume_settings

    settings = json.loads(json.dumps({k: v for k, v in vars(a).items() if k not in _RESUME_FREE}, default=str))
    guard_resume_settings(out, settings, resume=a.resume, write=int(os.environ.get("RANK", "0")) == 0)


# ---------------------------------------------------------------------------------------------


def _sft(a: SftConfig) -> int:
    import torch

    from .data import read_sft_data
    from .training import train_sft

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    data = read_sft_data(a.data)
    _guard_resume(a, out)
    model, tok = _load(a.model, a, _train_device(a.device))
    torch.manual_seed(a.seed)
    res = train_sft(model, tok, data, a.train_config(seed=a.seed, bf16=a.bf16, device=a.device), out_dir=out,
                    resume=a.resume, progress=not a.quiet)
    return _finish(out, a, {"stage": res.summary()}, t0,
                   f"sft: {len(data)} examples, {res.steps} steps, final loss "
                   f"{res.summary()['final_loss']} -> {out / 'model'}")


def _sample(a: SampleConfig) -> int:
    import torch

    from iclr25.core.jsonl import write_jsonl
    from iclr25.core.lm import GenerationConfig

    from .data import read_prompts
    from .generation import make_generator, sample_responses

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    pool = read_prompts(a.prompts, limit=a.limit)
    if a.backend == "transformers":
        model, tok = _load(a.model, a, a.device, padding_side="left")  # type: ignore[arg-type]
        gen = make_generator("transformers", model=model, tokenizer=tok, batch_size=a.batch_size,
                             chat_template=a.chat_template)
    else:
        gen = make_generator(a.backend, served_model=a.served_model or a.model, base_url=a.base_url,
                             concurrency=a.concurrency)
    torch.manual_seed(a.seed)
    cfg = GenerationConfig(max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_p=a.top_p, seed=a.seed)
    if a.backend == "transformers":
        from .generation import check_context

        check_context(model, tok, [p for _, p in pool], a.max_new_tokens, a.chat_template)
    samples = sample_responses(gen, [p for _, p in pool], a.n, cfg, ids=[i for i, _ in pool])
    n = write_jsonl(out / "samples.jsonl", [s.to_dict() for s in samples])
    return _finish(out, a, {"n_prompts": n, "n_responses": sum(len(s.responses) for s in samples)}, t0,
                   f"sample: {n} prompts x N={a.n} -> {out / 'samples.jsonl'}")


def _reward(a: RewardConfig) -> int:
    import torch

    from iclr25.core.jsonl import write_jsonl

    from .data import read_samples
    from .rewards import reward_vectors, score_responses

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    samples = read_samples(a.samples)
    prompts = [s.prompt for s in samples for _ in s.responses]
    responses = [r for s in samples for r in s.responses]
    kw = dict(average=a.normalize, batch_size=a.batch_size, chat_template=a.chat_template, max_length=a.max_length)
    model, tok = _load(a.model, a, a.device)
    scores = score_responses(model, tok, prompts, responses, desc="reward: policy", **kw)
    del model
    if a.ref is not None:
        ref, ref_tok = _load(a.ref, a, a.device)
        _same_tokenizer(tok, ref_tok, "--ref", a.ref, "the reward log pi - log pi_ref needs one tokenizer")
        scores = scores - score_responses(ref, tok, prompts, responses, desc="reward: reference", **kw)
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("some rewards are not finite (a model produced inf/NaN log-probabilities)")
    rv = reward_vectors(scores, [s.id for s in samples], [len(s.responses) for s in samples])
    n = write_jsonl(out / "rewards.jsonl", [{"id": k, "rewards": v} for k, v in rv.items()])
    kind = "log pi - log pi_ref" if a.ref else ("mean log pi (length-normalised)" if a.normalize else "log pi")
    return _finish(out, a, {"n_prompts": n, "reward": kind, "mean": float(scores.mean())}, t0,
                   f"reward: {n} prompts scored ({kind}) -> {out / 'rewards.jsonl'}")


def _consistency(a: ConsistencyConfig) -> int:
    from iclr25.core.jsonl import write_jsonl

    from .consistency import consistency_rates, consistency_summary
    from .data import check_rewards_match, read_rewards, read_samples
    from .pairs import build_pairs

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    samples = read_samples(a.samples)
    cur = read_rewards(a.cur)
    check_rewards_match(samples, cur, str(a.cur))
    rates = summary = None
    if a.prev is not None:
        prev = read_rewards(a.prev)
        check_rewards_match(samples, prev, str(a.prev))
        rates = consistency_rates(cur, prev, a.method)
        summary = consistency_summary(rates)
        write_jsonl(out / "consistency.jsonl", [{"id": k, "c": v} for k, v in rates.items()])
    stats: dict[str, Any] = {}
    pairs = build_pairs(samples, cur, rates, a.mode, stats=stats)
    write_jsonl(out / "pairs.jsonl", [p.to_dict() for p in pairs])
    c = f"C {summary['mean']:.3f} ± {summary['std']:.3f}" if summary else "no --prev: c = 1 (SRLM)"
    return _finish(out, a, {"consistency": summary, "pairs": stats}, t0,
                   f"consistency: {c}; {stats['n_pairs']} pairs ({stats['n_tied']} tied prompts, "
                   f"{stats['n_identical']} identical pairs dropped) -> {out / 'pairs.jsonl'}")


def _dpo(a: DpoConfig) -> int:
    import torch

    from .data import read_pairs
    from .pairs import pair_c_values
    from .training import train_dpo

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    pairs = read_pairs(a.pairs)
    c = pair_c_values(pairs, a.mode)
    _guard_resume(a, out)
    model, tok = _load(a.model, a, _train_device(a.device))
    torch.manual_seed(a.seed)
    res = train_dpo(model, tok, pairs, a.train_config(beta=a.beta, seed=a.seed, bf16=a.bf16, device=a.device), c=c,
                    out_dir=out, resume=a.resume, progress=not a.quiet)
    s = res.summary()
    margin = f"{s['final_margin_mean']:.4f}" if s.get("final_margin_mean") is not None else "n/a"
    return _finish(out, a, {"stage": s, "mode": a.mode, "c_mean": sum(c) / len(c)}, t0,
                   f"dpo[{a.mode}]: {s['n_examples']} pairs ({s['n_dropped']} identical dropped), {s['steps']} steps, "
                   f"mean c {sum(c) / len(c):.3f}, final margin {margin} -> {out / 'model'}")


def _cream_config(a: LoopConfig) -> CreamConfig:
    from dataclasses import fields

    names = {f.name for f in fields(CreamConfig)}
    return CreamConfig(**{k: getattr(a, k) for k in names})


def _loop(a: LoopConfig) -> int:
    import torch

    from .loop import self_rewarding_loop

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    _guard_resume(a, out)
    torch.manual_seed(a.seed)
    kw: dict[str, Any] = {}
    if a.task == "addition":
        from dataclasses import replace

        from .evaluate import ToyEvaluator
        from .toy import AdditionTask, toy_models

        cfg = replace(CreamConfig.toy(), **{k: v for k, v in vars(_cream_config(a)).items()
                                           if v != getattr(CreamConfig(), k)})
        task = AdditionTask(seed=a.seed, iterations=cfg.iterations)
        ms = toy_models(task, progress=not a.quiet)
        base, tok, m1 = ms["m0"], ms["tokenizer"], ms["m1"]
        splits = task.unlabeled_splits()
        kw.update(sft_model=m1, evaluator=ToyEvaluator(task, tok, n_samples=cfg.n_samples,
                                                       temperature=cfg.temperature, top_p=cfg.top_p),
                  utility=task.utility)
        ids = None
    else:
        import numpy as np

        from .data import read_eval_data, read_prompts, read_sft_data

        cfg = _cream_config(a)
        base, tok = _load(a.model, a, a.device)  # type: ignore[arg-type]
        pool = read_prompts(a.prompts)  # type: ignore[arg-type]
        if len(pool) < 2 * cfg.iterations:
            raise ValueError(f"{a.prompts}: {len(pool)} prompts for {cfg.iterations} rounds; need at least 2 per round")
        parts = np.array_split(np.arange(len(pool)), cfg.iterations)
        splits = [[pool[i][1] for i in part] for part in parts]
        ids = [[pool[i][0] for i in part] for part in parts]
        if a.sft_model is not None:
            kw["sft_model"], sft_tok = _load(a.sft_model, a, a.device)
            _same_tokenizer(tok, sft_tok, "--sft-model", a.sft_model, "the loop scores every model with one tokenizer")
        else:
            kw["sft_data"] = read_sft_data(a.sft_data)  # type: ignore[arg-type]
        if a.eval_data is not None:
            from .evaluate import evaluate_items
            from .generation import make_generator

            items = read_eval_data(a.eval_data, a.eval_task, limit=a.eval_limit)

            def evaluator(model: Any, reference: Any) -> dict[str, float]:
                gen = make_generator("transformers", model=model, tokenizer=tok, batch_size=a.generate_batch_size,
                                     chat_template=cfg.chat_template)
                return evaluate_items(gen, items, a.eval_task, max_new_tokens=cfg.max_new_tokens)[0]

            kw["evaluator"] = evaluator
        if a.backend != "transformers":
            from .generation import make_generator

            served = a.model
            kw["generator_factory"] = lambda model: make_generator(a.backend, served_model=served, base_url=a.base_url)
            log.warning("loop: sampling from %s at %s; the server must serve the current policy of each round",
                        a.backend, a.base_url)
        else:
            from .generation import make_generator

            kw["generator_factory"] = lambda model: make_generator(
                "transformers", model=model, tokenizer=tok, batch_size=a.generate_batch_size,
                chat_template=cfg.chat_template)
    reports = self_rewarding_loop(base, tok, splits, cfg, prompt_ids=ids, out_dir=out, resume=a.resume,
                                  progress=not a.quiet, device=a.device, **kw)
    rows = [r.to_dict() for r in reports]
    (out / "reports.json").write_text(json.dumps(rows, indent=2) + "\n")
    acc = [r.metrics.get("accuracy") for r in reports]
    line = ", ".join(f"M{r.iteration + 1} {x:.3f}" for r, x in zip(reports, acc) if x is not None)
    start = reports[0].start_metrics.get("accuracy") if reports else None
    return _finish(out, {"loop": a, "cream": cfg}, {"reports": rows}, t0,
                   f"loop[{cfg.method}]: {len(reports)} rounds"
                   + (f"; accuracy M1 {start:.3f}, {line}" if start is not None else "") + f" -> {out}")


def _evaluate(a: EvaluateConfig) -> int:
    from iclr25.core.jsonl import write_jsonl

    from .evaluate import evaluate_items
    from .generation import make_generator

    t0 = time.perf_counter()
    out = Path(a.out)  # type: ignore[arg-type]
    if a.task == "addition":
        from .evaluate import ToyEvaluator
        from .toy import AdditionTask, digit_only

        model, tok = _load(a.model, a, a.device, padding_side="left")
        digit_only(model, tok)
        task = AdditionTask(seed=a.seed)
        m = ToyEvaluator(task, tok)(model, None)
        return _finish(out, a, {"metrics": m}, t0, f"evaluate[addition]: accuracy {m['accuracy']:.3f} on "
                       f"{len(task.test_prompts)} test prompts (seed {a.seed})")
    from .data import gsm8k_path, read_eval_data

    path = a.data if a.data is not None else (gsm8k_path("test") if a.task == "gsm8k" else None)
    if path is None:
        raise ValueError("evaluate --task choice needs --data FILE.jsonl (question, choices, answer)")
    items = read_eval_data(path, a.task, limit=a.limit)
    if a.backend == "transformers":
        model, tok = _load(a.model, a, a.device, padding_side="left")
        gen = make_generator("transformers", model=model, tokenizer=tok, batch_size=a.batch_size,
                             chat_template=a.chat_template)
        from .evaluate import format_question
        from .generation import check_context

        check_context(model, tok, [format_question(it, a.task) for it in items], a.max_new_tokens, a.chat_template)
    else:
        gen = make_generator(a.backend, served_model=a.model, base_url=a.base_url)
    metrics, rows = evaluate_items(gen, items, a.task, max_new_tokens=a.max_new_tokens)
    write_jsonl(out / "predictions.jsonl", rows)
    return _finish(out, a, {"metrics": metrics, "data": str(path)}, t0,
                   f"evaluate[{a.task}]: accuracy {metrics['accuracy']:.4f} on {metrics['n']} items "
                   f"({metrics['n_unparsed']} unparsed) -> {out}")


def _demo(a: DemoConfig) -> int:
    from .evaluate import ToyEvaluator
    from .loop import self_rewarding_loop
    from .toy import AdditionTask, toy_models

    task = AdditionTask(seed=a.seed, iterations=max(3, a.iterations))
    ms = toy_models(task, progress=not a.quiet)
    ev = ToyEvaluator(task, ms["tokenizer"])
    print(f"addition task, seed {a.seed}: 200 test prompts, M0 and M1 from the cache "
          f"({'cached' if ms['cached'] else 'trained now'})")
    rows = []
    for method in ("srlm", "dyn"):
        cfg = CreamConfig.toy(method=method, iterations=a.iterations, seed=a.seed)
        reps = self_rewarding_loop(ms["m0"], ms["tokenizer"], task.unlabeled_splits(), cfg, sft_model=ms["m1"], evaluator=ev,
                                   utility=task.utility, progress=not a.quiet, device="cpu")
        rows.append((method, reps))
    r0 = rows[0][1][0]
    print(f"M0 accuracy {r0.base_metrics['accuracy']:.3f}, M1 (SFT) {r0.start_metrics['accuracy']:.3f}")
    print("| method | " + " | ".join(f"M{t + 2} acc | C r{t + 1}" for t in range(a.iterations)) + " |")
    for method, reps in rows:
        cells = [f"{r.metrics['accuracy']:.3f} | {r.consistency['mean']:.3f}" for r in reps]
        print(f"| {'SRLM' if method == 'srlm' else 'CREAM-dyn'} | " + " | ".join(cells) + " |")
    last = {m: reps[-1].metrics["accuracy"] for m, reps in rows}
    print(f"demo: after {a.iterations} round(s) SRLM {last['srlm']:.3f}, CREAM-dyn {last['dyn']:.3f}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-cream``; returns the exit code."""
    return run_cli("iclr25-cream", "CREAM: consistency-regularised self-rewarding language models (ICLR 2025).", {
        "sft": Command(SftConfig, _sft, "supervised fine-tuning M0 -> M1 (--resume)",
                       deprecated={"--save-steps": "--checkpoint-every"}),
        "sample": Command(SampleConfig, _sample, "sample N responses per prompt (local, or a vLLM server)"),
        "reward": Command(RewardConfig, _reward, "DPO implicit reward log pi - log pi_ref of each sample"),
        "consistency": Command(ConsistencyConfig, _consistency, "Kendall consistency C_j and (best, worst) pairs"),
        "dpo": Command(DpoConfig, _dpo, "one CREAM/DPO stage on a pairs file (--mode avg|dyn|srlm, --resume)",
                       deprecated={"--save-steps": "--checkpoint-every"}),
        "loop": Command(LoopConfig, _loop, "SFT + T self-rewarding rounds end to end (--resume)"),
        "evaluate": Command(EvaluateConfig, _evaluate, "greedy GSM8K / multiple-choice / addition accuracy"),
        "reproduce": reproduce_command("cream", "iclr25.cream.reproduce:reproduce", __version__,
                                       config=CreamReproduceOptions,
                                       help="reproduce the paper's claims on the toy addition task"),
        "demo": Command(DemoConfig, _demo, "one-minute demo: SRLM vs CREAM-dyn on the addition task"),
    }, argv, version=__version__)
