"""What each CLI command does (imported only when a command runs)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .answers import answer_extractor, canonical_number
from .task import TrapArithmeticTask

__all__ = ["read_prompt_file", "run_bon", "run_sft", "run_rlhf", "run_report", "run_demo"]

log = logging.getLogger("iclr25.sharpening")

#: The trap split used by the CLI defaults (the same as the reproduction's full preset).
_TRAP_TRAIN, _TRAP_TEST = 1000, 400


def read_prompt_file(path: str | Path) -> tuple[list[str], list[str] | None, list[list[str]] | None]:
    """Read a prompts JSONL: ``prompt`` (required, non-empty string), ``answer`` (optional), ``candidates``
    (optional list of strings, for the exact report).

    Returns:
        ``(prompts, answers or None, candidates or None)``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a malformed line, a missing/empty ``prompt`` (the message names ``FILE:LINE``), answers on
            some lines only, or an empty file.
    """
    from iclr25.core.jsonl import read_jsonl

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"prompts file {p} does not exist")
    recs = read_jsonl(p, required=("prompt",), nonempty=("prompt",))
    if not recs:
        raise ValueError(f"{p}: no prompts (the file is empty)")
    for i, r in enumerate(recs, 1):
        if not isinstance(r["prompt"], str) or not r["prompt"].strip():
            raise ValueError(f"{p}:{i}: 'prompt' must be a non-empty string, got {r['prompt']!r}")
        if "candidates" in r and (not isinstance(r["candidates"], list) or not r["candidates"]
                                  or not all(isinstance(c, str) for c in r["candidates"])):
            raise ValueError(f"{p}:{i}: 'candidates' must be a non-empty list of strings")
        if "candidates" in r and len(set(r["candidates"])) != len(r["candidates"]):
            dup = sorted({c for c in r["candidates"] if r["candidates"].count(c) > 1})
            raise ValueError(f"{p}:{i}: 'candidates' repeats {dup} (its mass would be counted twice); list each "
                             "response once")
    has = [("answer" in r and r["answer"] is not None) for r in recs]
    if any(has) and not all(has):
        first = has.index(False) + 1
        raise ValueError(f"{p}:{first}: 'answer' is missing here but present on other lines; give it on every "
                         "line or on none")
    for i, r in enumerate(recs, 1):
        a = r.get("answer")
        if a is not None and (isinstance(a, bool) or not isinstance(a, (str, int, float))):
            raise ValueError(f"{p}:{i}: 'answer' must be a string or a number (the reference answer), got "
                             f"{type(a).__name__} {a!r}; put one answer per line")
    answers = [str(r["answer"]) for r in recs] if all(has) else None
    cands = [r.get("candidates") for r in recs] if all("candidates" in r for r in recs) else None
    return [r["prompt"] for r in recs], answers, cands


@dataclass
class _Setup:
    model: object
    tokenizer: object
    prompts: list[str]
    answers: list[str] | None
    extract: object
    trap: TrapArithmeticTask | None
    pairs: np.ndarray | None
    candidates: list[list[str]] | None
    source: str


def _norm(a: str | None) -> str | None:
    if a is None:
        return None
    n = canonical_number(a)
    return n if n is not None else a.strip()


def _trap_extract(text: str) -> str | None:
    v = TrapArithmeticTask.extract_answer(text)
    return None if v is None or text.strip() != f"{v:02d}" else str(v)


def _load(cfg, *, split: str = "test", model_name: str | None = None) -> _Setup:
    import torch

    from iclr25.core.seed import choose_device, seed_everything

    name = model_name if model_name is not None else cfg.model
    # Cheap input checks first: a broken prompt file or extractor is reported before the model loads (or the
    # trap base pre-trains, minutes on first use).
    file_prompts = read_prompt_file(cfg.prompts) if cfg.prompts is not None else None
    if file_prompts is None and name is not None:
        raise ValueError("--prompts FILE.jsonl is required with --model (a JSONL with a 'prompt' field per line)")
    user_extract = answer_extractor(cfg.answer_extractor) if cfg.answer_extractor is not None else None
    seed_everything(cfg.seed)
    torch.manual_seed(cfg.seed)
    dev = choose_device(cfg.device)
    trap = None
    if name is None:
        from .shipped import shipped_trap_base

        trap = TrapArithmeticTask()
        base = shipped_trap_base(trap)
        model, tok = base.model.to(dev), base.tokenizer
        source = f"trap-arithmetic base (shipped, {base.info['path']})"
    else:
        from iclr25.core.lm import load_causal_lm

        model, tok = load_causal_lm(name, device=dev, padding_side="left", **cfg.load_kwargs())
        source = name
    cands = None
    pairs = None
    if file_prompts is not None:
        prompts, answers, cands = file_prompts
    elif trap is not None:
        train, test = trap.split(_TRAP_TRAIN, _TRAP_TEST, seed=0)
        pairs = train if split == "train" else test
        prompts = trap.prompts(pairs)
        answers = [str(int(c)) for c in trap.correct_index(pairs)]
    else:
        raise ValueError("--prompts FILE.jsonl is required with --model (a JSONL with a 'prompt' field per line)")
    if cfg.num_prompts is not None:
        prompts = prompts[: cfg.num_prompts]
        answers = answers[: cfg.num_prompts] if answers else None
        cands = cands[: cfg.num_prompts] if cands else None
        pairs = pairs[: cfg.num_prompts] if pairs is not None else None
    if user_extract is not None:
        extract = user_extract
    elif trap is not None and cfg.prompts is None:
        extract = _trap_extract
    elif answers is not None:
        extract = answer_extractor("last-number")
    else:
        extract = None
    if cfg.chat_template:
        if not getattr(tok, "chat_template", None):
            raise ValueError("--chat-template: this tokenizer has no chat template")
        prompts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True) for p in prompts]
    return _Setup(model, tok, prompts, [_norm(a) for a in answers] if answers else None, extract, trap,
                  pairs, cands, source)


def _correct(setup: _Setup, texts: list[str]) -> np.ndarray | None:
    if setup.answers is None or setup.extract is None:
        return None
    return np.array([_norm(setup.extract(t)) == a for t, a in zip(texts, setup.answers)])


def _finish(out: Path, cfg, results: dict, summary: str) -> int:
    from iclr25.core.runinfo import write_run_files

    write_run_files(out, cfg, results)
    print(summary)
    return 0


# ----------------------------------------------------------------------------------------------
def run_bon(cfg) -> int:
    from iclr25.core.jsonl import write_jsonl

    from .bon import best_of_n
    from .rewards import LengthNormalizedLogLikelihood, LogLikelihood, MajorityVote
    from .sampling import sample_responses

    s = _load(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.reward == "majority-vote":
        reward = MajorityVote(cfg.answer_extractor if cfg.answer_extractor is not None else
                              (s.extract if s.trap is not None and cfg.prompts is None else None))
    elif cfg.reward == "length-normalized":
        reward = LengthNormalizedLogLikelihood(s.model, batch_size=cfg.batch_size)
    else:
        reward = LogLikelihood(s.model, batch_size=cfg.batch_size)
    sampler = s.model
    if cfg.server_url:
        from iclr25.core.lm import OpenAIChatGenerator, OpenAICompletionGenerator

        name = cfg.server_model or cfg.model
        if not name:
            raise ValueError("--server-url needs --server-model (or --model) to name the served model")
        gen_cls = OpenAICompletionGenerator if cfg.completions else OpenAIChatGenerator
        sampler = gen_cls(name, base_url=cfg.server_url)
    t0 = time.perf_counter()
    res = best_of_n(sampler, s.tokenizer, s.prompts, cfg.n, reward, temperature=cfg.temperature, top_p=cfg.top_p,
                    max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, progress=not cfg.quiet,
                    chat_template=bool(cfg.server_url) and not cfg.completions and not cfg.chat_template)
    ll = LogLikelihood(s.model, batch_size=cfg.batch_size)(res.samples).numpy() if cfg.reward != "log-likelihood" \
        else res.scores.numpy()
    greedy = sample_responses(s.model, s.tokenizer, s.prompts, 1, temperature=0.0, max_new_tokens=cfg.max_new_tokens,
                              batch_size=cfg.batch_size)
    g_ll = LogLikelihood(s.model, batch_size=cfg.batch_size)(greedy).numpy()[:, 0]
    secs = time.perf_counter() - t0
    B = len(s.prompts)
    rows = np.arange(B)
    best_texts = res.best
    acc_bon = _correct(s, best_texts)
    acc_greedy = _correct(s, [r[0] for r in greedy.responses])
    acc_sample = _correct(s, [r[0] for r in res.samples.responses])
    recs = []
    for b in range(B):
        rec = {"prompt": s.prompts[b], "best": best_texts[b], "best_index": int(res.best_index[b]),
               "best_score": float(res.best_scores[b]), "best_logp": float(ll[b, res.best_index[b]]),
               "best_length": int(res.best_lengths[b]), "responses": res.samples.responses[b],
               "scores": res.scores[b].tolist(), "logp": ll[b].tolist(), "lengths": res.samples.lengths[b].tolist(),
               "greedy": greedy.responses[b][0], "greedy_logp": float(g_ll[b])}
        if s.answers is not None:
            rec.update(answer=s.answers[b], correct=bool(acc_bon[b]), greedy_correct=bool(acc_greedy[b]))
        recs.append(rec)
    write_jsonl(out / "bon.jsonl", recs)
    results = {"n": cfg.n, "reward": cfg.reward, "prompts": B, "model": s.source, "seconds": secs,
               "mean_best_logp": float(ll[rows, res.best_index].mean()),
               "mean_best_length": float(res.best_lengths.mean()),
               "mean_sample_logp": float(ll.mean()), "mean_sample_length": float(res.samples.lengths.double().mean()),
               "mean_greedy_logp": float(g_ll.mean()), "mean_greedy_length": float(greedy.lengths.double().mean()),
               "unfinished_share": float((~res.samples.finished).double().mean())}
    summary = (f"bon: N={cfg.n} ({cfg.reward}) on {B} prompts: best log pi {results['mean_best_logp']:.3f} nats "
               f"(length {results['mean_best_length']:.1f}) vs sample {results['mean_sample_logp']:.3f} "
               f"(length {results['mean_sample_length']:.1f}), greedy {results['mean_greedy_logp']:.3f} "
               f"(length {results['mean_greedy_length']:.1f})")
    if acc_bon is not None:
        results.update(accuracy_bon=float(acc_bon.mean()), accuracy_greedy=float(acc_greedy.mean()),
                       accuracy_sample=float(acc_sample.mean()))
        summary += (f"; accuracy BoN {results['accuracy_bon']:.3f}, greedy {results['accuracy_greedy']:.3f}, "
                    f"one sample {results['accuracy_sample']:.3f}")
    return _finish(out, cfg, results, summary + f" -> {out / 'bon.jsonl'}")


#: Flags that may change across ``--resume``: where output goes, how it is shown, the hardware, the size of the
#: final evaluation, and batching of the sampler (none of them changes what is trained).
_RESUME_FREE = frozenset({"out", "resume", "quiet", "threads", "device", "checkpoint_every", "eval_samples",
                          "sample_batch_size"})


def _run_settings(cfg) -> dict:
    """The settings of a training run that ``--resume`` must not change (JSON types), with the prompt file's
    resolved path and SHA-256 (a replaced file is a different run)."""
    import hashlib
    from dataclasses import asdict

    d = {k: v for k, v in asdict(cfg).items() if k not in _RESUME_FREE}
    if cfg.prompts is not None:
        p = Path(cfg.prompts)
        d["prompts"] = str(p.resolve())
        d["prompts_sha256"] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    if cfg.model is not None and Path(cfg.model).exists():
        d["model"] = str(Path(cfg.model).resolve())
    return json.loads(json.dumps(d, default=str))


def _resume_guard(cfg, out: Path) -> None:
    """Record a fresh run's settings in ``OUT/run_settings.json``; on ``--resume``, refuse (before any model is
    loaded) a missing checkpoint or any changed setting, naming each as ``old -> new``.

    The trainer's own check covers the optimiser settings only; this one also covers what built the saved
    corpus/pairs and the loss (``--n``, ``--adaptive-delta``, ``--beta``, ``--xpo``, ``--alpha``, the model,
    the prompt file and its content, ``--num-prompts``, ...), which ``--resume`` would otherwise ignore or mix.

    Raises:
        FileNotFoundError: ``--resume`` but ``OUT/checkpoint`` does not exist.
        ValueError: ``--resume`` with changed settings, or a damaged ``run_settings.json``.
    """
    from iclr25.core.checkpoint import recover_folder
    from iclr25.core.config import guard_resume_settings

    if cfg.resume and recover_folder(out / "checkpoint") is None:
        raise FileNotFoundError(f"--resume: no checkpoint in {out / 'checkpoint'}; run without --resume first, or "
                                "give the --out of the run to continue")
    guard_resume_settings(out, _run_settings(cfg), resume=cfg.resume,
                          missing="the corpus/pair settings cannot be checked, only the optimiser settings")


def _evaluate(s: _Setup, policy, cfg, eval_samples: int) -> dict:
    """Sampling accuracy / likelihood lift (and, on the trap task, the exact sharpness) of ``policy``."""
    from .rewards import LogLikelihood
    from .sampling import sample_responses

    out: dict = {}
    if s.trap is not None and s.pairs is not None:
        from .evaluation import evaluate_on_trap
        from .exact import enumerate_responses

        _, test = s.trap.split(_TRAP_TRAIN, _TRAP_TEST, seed=0)
        base_lp = enumerate_responses(s.model, s.tokenizer, s.trap.prompts(test), s.trap.candidates)
        for name, m in (("base", s.model), ("sharpened", policy)):
            out[name] = evaluate_on_trap(m, s.model, s.tokenizer, s.trap, test, base_lp,
                                         n_samples=eval_samples).summary()
        return out
    for name, m in (("base", s.model), ("sharpened", policy)):
        smp = sample_responses(m, s.tokenizer, s.prompts, eval_samples, max_new_tokens=cfg.max_new_tokens,
                               batch_size=cfg.sample_batch_size)
        g = sample_responses(m, s.tokenizer, s.prompts, 1, temperature=0.0, max_new_tokens=cfg.max_new_tokens,
                             batch_size=cfg.sample_batch_size)
        ll = LogLikelihood(s.model)
        r = {"sample_logp_base": float(ll(smp).mean()), "sample_length": float(smp.lengths.double().mean()),
             "greedy_logp_base": float(ll(g).mean()), "greedy_length": float(g.lengths.double().mean())}
        if s.answers is not None and s.extract is not None:
            flat = [t for row in smp.responses for t in row]
            ok = np.array([_norm(s.extract(t)) == s.answers[i // eval_samples] for i, t in enumerate(flat)])
            r["sample_accuracy"] = float(ok.mean())
            r["greedy_accuracy"] = float(_correct(s, [row[0] for row in g.responses]).mean())
        out[name] = r
    return out


def _train_summary(kind: str, ev: dict) -> str:
    b, sh = ev["base"], ev["sharpened"]
    parts = [f"log pi_base of T=1 samples {b['sample_logp_base']:.3f} -> {sh['sample_logp_base']:.3f} nats "
             f"(length {b['sample_length']:.1f} -> {sh['sample_length']:.1f})"]
    if "sample_accuracy" in sh:
        parts.append(f"sampling accuracy {b['sample_accuracy']:.3f} -> {sh['sample_accuracy']:.3f}, greedy "
                     f"{b['greedy_accuracy']:.3f} -> {sh['greedy_accuracy']:.3f}")
    if "sharpened_fraction" in sh:
        parts.append(f"pi(y*|x) > 1/2 on {b['sharpened_fraction']:.3f} -> {sh['sharpened_fraction']:.3f} of prompts")
    return f"{kind}: " + "; ".join(parts)


def run_sft(cfg) -> int:
    from .sft import SFTConfig, sft_sharpen
    from .training import save_policy

    out = Path(cfg.out)
    _resume_guard(cfg, out)
    s = _load(cfg, split="train")
    scfg = SFTConfig(n=cfg.n, adaptive_delta=cfg.adaptive_delta, max_n=cfg.max_n,
                     max_new_tokens=cfg.max_new_tokens, sample_batch_size=cfg.sample_batch_size,
                     train=cfg.train_config())
    t0 = time.perf_counter()
    res = sft_sharpen(s.model, s.tokenizer, s.prompts, scfg, out_dir=out, resume=cfg.resume, progress=not cfg.quiet)
    secs = time.perf_counter() - t0
    save_policy(res.model, s.tokenizer, out / "model")
    ev = _evaluate(s, res.model, cfg, cfg.eval_samples)
    results = {"corpus": res.stats, "steps": res.stats.get("steps"), "seconds": secs, "evaluation": ev,
               "model": s.source, "evaluated_on": "trap test prompts" if s.trap is not None and s.pairs is not None
               else "the training prompts (pass held-out prompts to measure generalisation)"}
    return _finish(out, cfg, results, _train_summary("sft", ev) + f" -> {out / 'model'}")


def run_rlhf(cfg) -> int:
    from .rlhf import RLHFConfig, rlhf_sharpen
    from .training import save_policy

    out = Path(cfg.out)
    _resume_guard(cfg, out)
    s = _load(cfg, split="train")
    rcfg = RLHFConfig(beta=cfg.beta, algo="xpo" if cfg.xpo else "offline", alpha=cfg.alpha,
                      pairs_per_prompt=cfg.pairs_per_prompt, iterations=cfg.iterations,
                      prompts_per_iteration=cfg.prompts_per_iteration, steps_per_iteration=cfg.steps_per_iteration,
                      max_new_tokens=cfg.max_new_tokens, sample_batch_size=cfg.sample_batch_size,
                      train=cfg.train_config())
    t0 = time.perf_counter()
    res = rlhf_sharpen(s.model, s.tokenizer, s.prompts, rcfg, out_dir=out, resume=cfg.resume, progress=not cfg.quiet)
    secs = time.perf_counter() - t0
    save_policy(res.model, s.tokenizer, out / "model")
    ev = _evaluate(s, res.model, cfg, 4)
    results = {"stats": res.stats, "seconds": secs, "evaluation": ev, "model": s.source}
    if s.trap is not None and s.pairs is not None:
        ev["tilted_optimum_data"] = s.trap.tilted_optimum_correct(cfg.beta)
    summary = _train_summary("rlhf" + (" (XPO)" if cfg.xpo else " (Eq. 8)"), ev)
    summary += f"; identical pairs {100 * res.stats['identical_pair_share']:.1f}%"
    return _finish(out, cfg, results, summary + f" -> {out / 'model'}")


# ----------------------------------------------------------------------------------------------
def _load_policy(cfg, s: _Setup):
    if cfg.policy is None:
        return s.model
    p = Path(cfg.policy)
    if (p / "adapter_config.json").is_file():
        import copy

        try:
            from peft import PeftModel
        except ImportError as e:
            raise ImportError("a LoRA adapter needs peft: pip install 'iclr25-sharpening[full]'") from e
        return PeftModel.from_pretrained(copy.deepcopy(s.model), p).eval()
    from iclr25.core.lm import load_causal_lm
    from iclr25.core.seed import choose_device

    m, _ = load_causal_lm(cfg.policy, device=choose_device(cfg.device), padding_side="left", **cfg.load_kwargs())
    from .base import use_fused_gelu

    use_fused_gelu(m)
    return m


def run_report(cfg) -> int:
    from .exact import enumerate_responses, sharpness_report
    from .rewards import LogLikelihood
    from .sampling import sample_responses

    s = _load(cfg)
    policy = _load_policy(cfg, s)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"model": s.source, "policy": cfg.policy or s.source, "prompts": len(s.prompts), "delta": cfg.delta}
    greedy = sample_responses(policy, s.tokenizer, s.prompts, 1, temperature=0.0, max_new_tokens=cfg.max_new_tokens,
                              batch_size=cfg.batch_size)
    g_pol = LogLikelihood(policy)(greedy).numpy()[:, 0]
    res.update(greedy_logp=float(g_pol.mean()), greedy_length=float(greedy.lengths.double().mean()),
               greedy_is_majority_mode=float(np.mean(np.exp(g_pol) > 0.5)))
    acc = _correct(s, [r[0] for r in greedy.responses])
    if acc is not None:
        res["greedy_accuracy"] = float(acc.mean())
    if s.trap is not None and cfg.prompts is None or s.candidates is not None:
        cands = [list(s.trap.candidates)] * len(s.prompts) if s.candidates is None else s.candidates
        same = all(c == cands[0] for c in cands)
        if same:
            lp_pol = enumerate_responses(policy, s.tokenizer, s.prompts, cands[0])
            lp_base = enumerate_responses(s.model, s.tokenizer, s.prompts, cands[0])
        else:
            import torch

            width = max(map(len, cands))
            lp_pol = torch.full((len(s.prompts), width), float("-inf"), dtype=torch.float64)
            lp_base = lp_pol.clone()
            for i, (p, c) in enumerate(zip(s.prompts, cands)):
                lp_pol[i, :len(c)] = enumerate_responses(policy, s.tokenizer, [p], c)[0]
                lp_base[i, :len(c)] = enumerate_responses(s.model, s.tokenizer, [p], c)[0]
        correct = None
        if s.answers is not None and s.extract is not None:
            idx = []
            for a, c in zip(s.answers, cands):
                hits = [k for k, t in enumerate(c) if _norm(s.extract(t)) == a]
                idx.append(hits[0] if hits else -1)
            missing = [k for k, i in enumerate(idx) if i < 0]
            if missing:
                k = missing[0]
                raise ValueError(f"{cfg.prompts}:{k + 1}: answer {s.answers[k]!r} is none of its candidates (as read "
                                 f"by the answer extractor; {len(missing)} line(s) like this): the exact report needs "
                                 "y* among the candidates; add it, or drop 'answer' for a report on the mode")
            correct = idx
        rep = sharpness_report(lp_pol, lp_base, delta=cfg.delta, correct=correct)
        res["exact"] = rep.to_dict()
        summary = (f"report (exact, {len(s.prompts)} prompts): mean pi(y*|x) {rep.mean_mode_mass:.3f}, "
                   f"(eps, delta={cfg.delta:g})-sharpened with eps = {rep.epsilon:.3f}, pi(y*|x) > 1/2 on "
                   f"{rep.sharpened_fraction:.3f}, C_cov(base) {rep.coverage:.2f}")
    else:
        smp = sample_responses(policy, s.tokenizer, s.prompts, cfg.n, max_new_tokens=cfg.max_new_tokens,
                               batch_size=cfg.batch_size, progress=not cfg.quiet)
        lp = LogLikelihood(policy)(smp).numpy()
        lb = LogLikelihood(s.model)(smp).numpy() if policy is not s.model else lp
        best = lp.max(1)
        distinct = np.mean([len(set(r)) / cfg.n for r in smp.responses])
        res["sampled"] = {"n": cfg.n, "mode_mass_lower_bound": float(np.exp(best).mean()),
                          "coverage_upper_estimate": float(np.exp(-lb.max(1)).mean()),
                          "mean_sample_logp": float(lp.mean()), "mean_sample_length": float(smp.lengths.double().mean()),
                          "distinct_share": float(distinct),
                          "sharpened_fraction_lower_bound": float(np.mean(np.exp(best) > 1 - cfg.delta))}
        if s.extract is not None:
            answers = [[_norm(s.extract(t)) for t in row] for row in smp.responses]
            share = [max((row.count(a) for a in set(row) if a is not None), default=0) / cfg.n for row in answers]
            res["sampled"]["majority_answer_share"] = float(np.mean(share))
        summary = (f"report (sampled, {len(s.prompts)} prompts, N={cfg.n}): max sampled pi {res['sampled']['mode_mass_lower_bound']:.3f} "
                   f"(a lower bound on pi(y*|x)), {100 * distinct:.0f}% distinct samples, mean log pi "
                   f"{res['sampled']['mean_sample_logp']:.2f} at length {res['sampled']['mean_sample_length']:.1f}; greedy "
                   f"log pi {res['greedy_logp']:.2f} at length {res['greedy_length']:.1f}")
    if "greedy_accuracy" in res:
        summary += f"; greedy accuracy {res['greedy_accuracy']:.3f}"
    (out / "report.md").write_text("# Sharpness report\n\n```json\n" + json.dumps(res, indent=2) + "\n```\n")
    return _finish(out, cfg, res, summary + f" -> {out / 'results.json'}")


# ----------------------------------------------------------------------------------------------
def run_demo(cfg) -> int:
    import torch

    from iclr25.core.seed import choose_device, seed_everything

    from .bon import best_of_n
    from .evaluation import evaluate_on_trap
    from .exact import enumerate_responses
    from .sft import SFTConfig, sft_sharpen
    from .training import TrainConfig

    seed_everything(cfg.seed)
    task = TrapArithmeticTask()
    print("Trap arithmetic: 'a+b=' answered correctly with p=0.4, else one of 10 strings whose first digit is "
          "c1+1 (0.06 each). The correct sum is the sequence mode, but greedy decoding takes the wrong first digit.")
    from .shipped import shipped_trap_base

    base = shipped_trap_base(task)
    base.model.to(choose_device(cfg.device))
    tok = base.tokenizer
    train, test = task.split(300, 200, seed=0)
    show = test[: cfg.prompts]
    lp = enumerate_responses(base.model, tok, task.prompts(test), task.candidates)
    torch.manual_seed(cfg.seed)
    bon = best_of_n(base.model, tok, task.prompts(show), cfg.n, max_new_tokens=4)
    from .sampling import sample_responses

    greedy = sample_responses(base.model, tok, task.prompts(show), 1, temperature=0.0, max_new_tokens=4)
    print(f"\n{'prompt':<8} {'pi(a+b)':>8} {'greedy':>7} {'BoN@' + str(cfg.n):>7}")
    for i, (a, b) in enumerate(show):
        print(f"{task.prompt(a, b):<8} {float(lp[i, a + b].exp()):8.3f} {greedy.responses[i][0]:>7} {bon.best[i]:>7}")
    cfg_sft = SFTConfig(n=cfg.n, max_new_tokens=4, sample_batch_size=1024,
                        train=TrainConfig(epochs=4, lr=1e-3, batch_size=32, lora_r=0, max_grad_norm=1.0, seed=cfg.seed))
    res = sft_sharpen(base.model, tok, task.prompts(train), cfg_sft)
    before = evaluate_on_trap(base.model, base.model, tok, task, test, lp)
    after = evaluate_on_trap(res.model, base.model, tok, task, test, lp)
    print(f"\nSFT-Sharpening on 300 prompts (BoN@{cfg.n} winners), measured on 200 held-out prompts:")
    print(f"  mass on the correct answer  {before.expected_accuracy:.3f} -> {after.expected_accuracy:.3f}")
    print(f"  greedy accuracy             {before.greedy_accuracy:.3f} -> {after.greedy_accuracy:.3f}")
    print(f"  prompts with pi(y*|x) > 1/2 {before.sharpened_fraction:.3f} -> {after.sharpened_fraction:.3f}")
    print(f"demo: greedy accuracy {before.greedy_accuracy:.2f} -> {after.greedy_accuracy:.2f} after SFT-Sharpening "
          f"(no verifier, no labels)")
    return 0
