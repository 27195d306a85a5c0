"""The self-rewarding loop with consistency regularisation (CREAM Algorithm 1; spec §1.5).

    M1 <- SFT(M0)
    for t = 1..T:
        sample N responses per prompt of part t with M_t
        r_cur  = log pi_t     - log pi_0          (reward_reference="base"; "previous": - log pi_{t-1})
        r_prev = log pi_{t-1} - log pi_0          (t = 1: length-normalised log pi_0)
        C_j    = (KendallTau(ordinal ranks of r_cur, r_prev) + 1) / 2
        pairs  = (argmax r_cur, argmin r_cur), c = mean C (avg) | C_j (dyn) | 1 (srlm)
        M_{t+1} <- CREAM-DPO from M_t with reference M_t

With ``out_dir`` every round writes ``round_<t>/`` (samples, log-probs, rewards, consistency, pairs,
the DPO stage and ``report.json`` last); ``resume=True`` keeps finished rounds (their reports and
models are read back) and restarts at the first unfinished one, reusing whatever of it was
already written (samples, scores, a DPO checkpoint). ``cream_config.json`` records the loop's settings; a
resume with other ones (method, iterations, N, ...) is refused, naming them (the core's
:func:`~iclr25.core.config.guard_resume_settings`), never mixed with the finished rounds.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .config import CreamConfig
from .consistency import consistency_rates, consistency_summary, kendall_tau_b
from .pairs import PreferencePair, Sample, build_pairs

__all__ = ["IterationReport", "self_rewarding_loop", "round_rewards"]

log = logging.getLogger(__name__)

Evaluator = Callable[[Any, Any], dict[str, float]]
Utility = Callable[[str, Sequence[str]], np.ndarray]


@dataclass
class IterationReport:
    """What one round ``t`` did (it trains ``M_{t+1}`` from ``M_t``).

    Attributes:
        iteration: ``t`` (1-based).
        method: ``avg``, ``dyn``, ``srlm`` or ``oracle``.
        n_prompts, n_responses: prompts sampled and responses kept.
        n_pairs, n_tied, n_identical: pairs trained on; prompts dropped for all-equal rewards; pairs
            dropped for identical chosen/rejected texts.
        consistency: ``{"mean", "std", "min", "max", "n"}`` of ``C_j`` (``None`` when not measured).
        c_train_mean: mean weight ``c`` the DPO stage used.
        dpo: the stage summary (steps, seconds, final loss, ``final_margin_mean``, first/last step margin).
        train_gt_tau: mean Kendall tau-b between ``r_cur`` and the true utility over the round's
            samples (``None`` without a utility).
        pair_accuracy: share of pairs whose chosen response has the higher true utility.
        start_metrics: evaluator output for ``M_t``; ``metrics``: for ``M_{t+1}``.
        base_metrics: round 1 only: evaluator output for M0.
        seconds: wall seconds per stage (sample, score, consistency, dpo, evaluate).
        model_dir: where ``M_{t+1}`` was saved (with ``out_dir``).
    """

    iteration: int
    method: str
    n_prompts: int = 0
    n_responses: int = 0
    n_pairs: int = 0
    n_tied: int = 0
    n_identical: int = 0
    consistency: dict[str, float] | None = None
    c_train_mean: float | None = None
    dpo: dict[str, Any] = field(default_factory=dict)
    train_gt_tau: float | None = None
    pair_accuracy: float | None = None
    start_metrics: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    base_metrics: dict[str, float] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    model_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IterationReport:
        return cls(**d)


def round_rewards(logps: dict[int, np.ndarray], t: int, reference: str, avg_m0: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(r_cur, r_prev)`` of round ``t`` from summed log-probs of the round's samples.

    Args:
        logps: ``{k: (R,) log pi_k}`` for the models the round needs (``0``, ``t``, ``t-1``, and
            ``t-2`` with ``reference="previous"``).
        t: the round (1-based; the policy is ``M_t``).
        reference: ``"base"`` (fixed M0) or ``"previous"``.
        avg_m0: ``(R,)`` length-normalised ``log pi_0`` (the previous reward of round 1).
    """
    if reference == "base":
        cur = logps[t] - logps[0]
        prev = avg_m0 if t == 1 else logps[t - 1] - logps[0]
    elif reference == "previous":
        cur = logps[t] - logps[t - 1]
        prev = avg_m0 if t == 1 else logps[t - 1] - logps[t - 2]
    else:
        raise ValueError(f"reward_reference must be 'base' or 'previous', got {reference!r}")
    return cur, prev


def _split(flat: np.ndarray, samples: Sequence[Sample]) -> dict[str, np.ndarray]:
    out, k = {}, 0
    for s in samples:
        out[s.id] = flat[k:k + len(s.responses)]
        k += len(s.responses)
    return out


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    from iclr25.core.jsonl import write_jsonl

    write_jsonl(path, rows)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    from iclr25.core.jsonl import read_jsonl

    return read_jsonl(path)


def _load_model(path: str | Path, like: Any) -> Any:
    """A model a finished stage of this loop saved (a clean error when it is missing or torn)."""
    from transformers import AutoModelForCausalLM

    p = next(like.parameters())
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=p.dtype)
    except Exception as e:  # OSError (missing files), safetensors' error (torn file), a bad config.json
        raise ValueError(f"{path}: a finished stage's model cannot be loaded on resume ({type(e).__name__}: "
                         f"{str(e)[:200]}); delete its round folder to redo that round") from None
    return model.to(p.device).eval()


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: corrupt or torn {what} ({e}); delete it and loop --resume recomputes it") from None


def _write_json(path: Path, obj: Any, indent: int | None = None) -> None:
    """Atomic (the core's atomic_write_text): a crash leaves the old file or none, never a torn one."""
    from iclr25.core.checkpoint import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=indent) + ("\n" if indent else ""))


def self_rewarding_loop(base_model: Any, tokenizer: Any, prompt_splits: Sequence[Sequence[str]],
                        cfg: CreamConfig, *, sft_data: Sequence[tuple[str, str]] | None = None,
                        sft_model: Any = None, generator_factory: Callable[[Any], Any] | None = None,
                        evaluator: Evaluator | None = None, utility: Utility | None = None,
                        prompt_ids: Sequence[Sequence[str]] | None = None, out_dir: str | Path | None = None,
                        resume: bool = False, progress: bool = True, device: str = "auto",
                        on_round: Callable[[IterationReport, Any, list[PreferencePair]], None] | None = None) -> list[IterationReport]:
    """Run SFT (unless ``sft_model`` is given), then ``cfg.iterations`` self-rewarding rounds.

    Args:
        base_model: M0, the SFT starting point and (``reward_reference="base"``) the fixed reward
            reference. It is never modified.
        tokenizer: the tokenizer shared by all models.
        prompt_splits: ``T`` lists of unlabeled prompts, one per round (``len >= cfg.iterations``).
        cfg: :class:`~iclr25.cream.config.CreamConfig` (method, N, sampling, beta, lr, ...).
        sft_data: ``(prompt, response)`` seed data for SFT (required unless ``sft_model``).
        sft_model: an existing M1 (then no SFT is run).
        generator_factory: ``model -> TextGenerator`` for sampling (default: the core
            ``TransformersGenerator`` on the model).
        evaluator: ``(model, reward_reference_model_or_None) -> {metric: value}``, run on M0, M1 and
            after every round; an ``"accuracy"`` key enables the M1-vs-M0 precondition warning.
        utility: ``(prompt, responses) -> (N,) true utility``; required for ``method="oracle"``,
            otherwise used only for diagnostics (``train_gt_tau``, ``pair_accuracy``).
        prompt_ids: ids per split (default ``"r<t>-<i>"``).
        out_dir: folder for the round files (needed for ``resume``).
        resume: keep finished rounds of ``out_dir`` and restart at the first unfinished one.
        progress: progress bars.
        device: ``auto|cpu|cuda`` for training.
        on_round: called with ``(report, new_model, pairs)`` after each round.

    Returns:
        One :class:`IterationReport` per round.

    Raises:
        ValueError: too few prompt splits, no SFT data, oracle without a utility, a round with fewer
            than 2 prompts, ``resume`` without ``out_dir``.
    """
    from iclr25.core.config import guard_resume_settings
    from iclr25.core.progress import progress as bar_of

    from .rewards import check_vocab, score_responses
    from .training import has_checkpoint, train_dpo, train_sft

    check_vocab(base_model, tokenizer, "base_model")
    if sft_model is not None:
        check_vocab(sft_model, tokenizer, "sft_model")
    T = cfg.iterations
    if len(prompt_splits) < T:
        raise ValueError(f"{len(prompt_splits)} prompt splits for {T} iterations; give one split per round")
    if cfg.method == "oracle" and utility is None:
        raise ValueError("method='oracle' needs a utility(prompt, responses) function")
    if sft_model is None and not sft_data:
        raise ValueError("give sft_data (to run SFT) or sft_model (an existing M1)")
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        guard_resume_settings(out, asdict(cfg), resume=resume, filename="cream_config.json")
    if prompt_ids is None:
        prompt_ids = [[f"r{t + 1}-{i}" for i in range(len(split))] for t, split in enumerate(prompt_splits)]

    def gen(model: Any) -> Any:
        if generator_factory is not None:
            return generator_factory(model)
        from iclr25.core.lm import TransformersGenerator

        return TransformersGenerator(model, tokenizer, batch_size=1024, chat_template=cfg.chat_template)

    def score(model: Any, samples: Sequence[Sample], average: bool = False) -> np.ndarray:
        prompts = [s.prompt for s in samples for _ in s.responses]
        responses = [r for s in samples for r in s.responses]
        return score_responses(model, tokenizer, prompts, responses, average=average,
                               batch_size=cfg.reward_batch_size, chat_template=cfg.chat_template,
                               max_length=cfg.reward_max_length).numpy()

    # ---- M1 -------------------------------------------------------------------------------
    models: dict[int, Any] = {0: base_model}
    m1_dir = out / "m1" if out is not None else None
    if sft_model is not None:
        models[1] = sft_model
    elif resume and m1_dir is not None and (m1_dir / "stage.json").is_file():
        models[1] = _load_model(m1_dir / "model", base_model)
    else:
        m1 = copy.deepcopy(base_model)
        res = train_sft(m1, tokenizer, list(sft_data or []), cfg.sft_train(device=device), out_dir=m1_dir,
                        resume=resume and has_checkpoint(m1_dir),
                        progress=progress)
        models[1] = res.model
    base_metrics = start_metrics = None
    if evaluator is not None:
        base_metrics = evaluator(base_model, None)
        start_metrics = evaluator(models[1], base_model)  # r_1 = log pi_1 - log pi_0 in both modes
        gain = start_metrics.get("accuracy", np.nan) - base_metrics.get("accuracy", np.nan)
        if np.isfinite(gain) and gain < cfg.min_sft_gain:
            log.warning("M1 (SFT) accuracy %.3f is only %+.3f over M0's %.3f (< %.2f): SFT learnt little that "
                        "self-rewarding could amplify; the rounds below say little about CREAM",
                        start_metrics["accuracy"], gain, base_metrics["accuracy"], cfg.min_sft_gain)

    reports: list[IterationReport] = []
    rounds = bar_of(range(1, T + 1), desc=f"cream[{cfg.method}]", unit="round", quiet=None if progress else True)
    for t in rounds:
        rdir = out / f"round_{t}" if out is not None else None
        if resume and rdir is not None and (rdir / "report.json").is_file():
            try:
                rep = IterationReport.from_dict(_read_json(rdir / "report.json", "round report"))
            except (KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{rdir / 'report.json'}: not a round report ({type(e).__name__}: {e}); delete it "
                                 "and loop --resume redoes the round") from None
            reports.append(rep)
            models[t + 1] = _load_model(rdir / "dpo" / "model", base_model)
            start_metrics = rep.metrics
            log.info("round %d: finished earlier; reusing %s", t, rdir)
            continue
        times: dict[str, float] = {}
        policy = models[t]
        # ---- sample ---------------------------------------------------------------------
        t0 = time.perf_counter()
        samples: list[Sample] | None = None
        if resume and rdir is not None and (rdir / "samples.jsonl").is_file():
            samples = [Sample(str(r["id"]), r["prompt"], tuple(r["responses"]))
                       for r in _read_jsonl(rdir / "samples.jsonl")]
        if samples is None:
            from .generation import sample_responses

            samples = sample_responses(gen(policy), list(prompt_splits[t - 1]), cfg.n_samples,
                                       cfg.generation(seed=cfg.seed * 1000 + t), ids=list(prompt_ids[t - 1]))
            if rdir is not None:
                rdir.mkdir(parents=True, exist_ok=True)
                _write_jsonl(rdir / "samples.jsonl", [s.to_dict() for s in samples])
        if len(samples) < 2:
            raise ValueError(f"round {t}: {len(samples)} prompt(s) with at least 2 responses; need 2 or more")
        times["sample"] = time.perf_counter() - t0
        # ---- score ----------------------------------------------------------------------
        t0 = time.perf_counter()
        use_c = cfg.method in ("avg", "dyn") or cfg.measure_consistency
        prevmode = cfg.reward_reference == "previous"
        need = {0, t}
        if prevmode or (use_c and t >= 2):
            need.add(t - 1)
        if prevmode and use_c and t >= 2:
            need.add(t - 2)
        logps: dict[int, np.ndarray] = {}
        for k in sorted(need):
            f = rdir / f"logps_m{k}.json" if rdir is not None else None
            if resume and f is not None and f.is_file():
                n_resp = sum(len(s.responses) for s in samples)
                raw = _read_json(f, "log-probability file")
                try:
                    logps[k] = np.asarray(raw, dtype=np.float64)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{f}: not a list of numbers ({e}); delete it and loop --resume recomputes "
                                     "it") from None
                if logps[k].shape != (n_resp,) or not np.isfinite(logps[k]).all():
                    raise ValueError(f"{f}: expected {n_resp} finite log-probabilities (one per sampled response), "
                                     f"got shape {logps[k].shape}; delete it and loop --resume recomputes it")
                continue
            if k not in models:
                models[k] = _load_model(out / f"round_{k - 1}" / "dpo" / "model", base_model)  # type: ignore[operator]
            logps[k] = score(models[k], samples)
            if f is not None:
                _write_json(f, logps[k].tolist())
        if use_c:
            avg0 = score(models[0], samples, average=True) if t == 1 else np.zeros(0)
            cur, prev = round_rewards(logps, t, cfg.reward_reference, avg0)
        else:
            cur, prev = logps[t] - logps[t - 1 if prevmode else 0], None
        r_cur = _split(cur, samples)
        times["score"] = time.perf_counter() - t0
        # ---- consistency and pairs ------------------------------------------------------
        t0 = time.perf_counter()
        rates = summary = None
        if prev is not None:
            rates = consistency_rates(r_cur, _split(prev, samples), cfg.consistency_method)
            summary = consistency_summary(rates)
        stats: dict[str, Any] = {}
        u = {s.id: utility(s.prompt, s.responses) for s in samples} if utility is not None else None
        if cfg.method == "oracle":
            pairs = build_pairs(samples, u, None, stats=stats)  # type: ignore[arg-type]
        else:
            pairs = build_pairs(samples, r_cur, rates if cfg.method in ("avg", "dyn") else None,
                                mode="avg" if cfg.method == "avg" else "dyn", stats=stats)
        gt_tau = pair_acc = None
        if u is not None:
            taus = [kendall_tau_b(r_cur[s.id], u[s.id]) for s in samples]
            gt_tau = float(np.nanmean(taus)) if np.isfinite(taus).any() else None
            if pairs:
                pair_acc = float(np.mean([u[p.id][p.chosen_index] > u[p.id][p.rejected_index] for p in pairs]))
        if rdir is not None:
            rdir.mkdir(parents=True, exist_ok=True)
            _write_jsonl(rdir / "rewards_cur.jsonl", [{"id": k, "rewards": v.tolist()} for k, v in r_cur.items()])
            if prev is not None:
                _write_jsonl(rdir / "rewards_prev.jsonl",
                             [{"id": k, "rewards": v.tolist()} for k, v in _split(prev, samples).items()])
            if rates is not None:
                _write_jsonl(rdir / "consistency.jsonl", [{"id": k, "c": v} for k, v in rates.items()])
            _write_jsonl(rdir / "pairs.jsonl", [p.to_dict() for p in pairs])
        times["consistency"] = time.perf_counter() - t0
        # ---- DPO ------------------------------------------------------------------------
        t0 = time.perf_counter()
        rep = IterationReport(iteration=t, method=cfg.method, n_prompts=len(samples),
                              n_responses=sum(len(s.responses) for s in samples), n_pairs=len(pairs),
                              n_tied=stats["n_tied"], n_identical=stats["n_identical"], consistency=summary,
                              train_gt_tau=gt_tau, pair_accuracy=pair_acc,
                              start_metrics=dict(start_metrics or {}),
                              base_metrics=dict(base_metrics) if (t == 1 and base_metrics) else None)
        new = copy.deepcopy(policy)
        if pairs:
            dcfg = cfg.dpo_train(round_index=t, device=device)
            ddir = rdir / "dpo" if rdir is not None else None
            res = train_dpo(new, tokenizer, pairs, dcfg, out_dir=ddir,
                            resume=resume and has_checkpoint(ddir),
                            progress=progress)
            new = res.model
            rep.c_train_mean = float(np.mean([p.c for p in pairs]))
            rep.dpo = {**res.summary(), "first_step_margin": res.history[0].get("margin") if res.history else None,
                       "last_step_margin": res.history[-1].get("margin") if res.history else None}
        else:
            log.warning("round %d: no preference pairs (every prompt's rewards are tied); the model is unchanged", t)
            if rdir is not None:
                new.save_pretrained(rdir / "dpo" / "model")
        times["dpo"] = time.perf_counter() - t0
        # ---- evaluate -------------------------------------------------------------------
        t0 = time.perf_counter()
        models[t + 1] = new
        if evaluator is not None:
            ref = models[0] if cfg.reward_reference == "base" else policy
            rep.metrics = evaluator(new, ref)
            start_metrics = rep.metrics
        times["evaluate"] = time.perf_counter() - t0
        rep.seconds = times
        if rdir is not None:
            rep.model_dir = str(rdir / "dpo" / "model")
            _write_json(rdir / "report.json", rep.to_dict(), indent=2)
        log.info("round %d [%s]: %d pairs, C %s, margin %s, metrics %s", t, cfg.method, rep.n_pairs,
                 f"{summary['mean']:.3f}" if summary else "-", rep.dpo.get("final_margin_mean"),
                 {k: round(v, 4) for k, v in rep.metrics.items() if isinstance(v, float)})
        reports.append(rep)
        if on_round is not None:
            on_round(rep, new, pairs)
        # free models no round needs any more
        keep = {0, t + 1, t}
        if cfg.reward_reference == "previous":
            keep.add(t - 1)
        for k in [k for k in models if k not in keep]:
            del models[k]
    if out is not None:
        (out / "loop.json").write_text(json.dumps({"config": asdict(cfg), "reports": [r.to_dict() for r in reports]},
                                                  indent=2) + "\n")
    return reports
