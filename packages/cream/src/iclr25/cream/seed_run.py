"""One seed of CREAM's reproduction (a job of the core's runner): M0 and M1 (cached), then T rounds of every
method from the same M1, and the long DPO stage on the round-1 pairs (SRLM vs CREAM-avg)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from .repro_settings import ReproSettings, logit

__all__ = ["run_seed", "seed_job", "job_settings"]

log = logging.getLogger(__name__)


def run_seed(seed: int, settings: ReproSettings, device: str = "cpu", cache: str | None = None,
             progress: bool = False) -> dict[str, Any]:
    """Everything of one seed: M0/M1 metrics, each method's per-round reports, the long-stage
    margins. JSON-ready."""
    import copy

    import torch

    from iclr25.core.seed import seed_everything

    from .config import CreamConfig
    from .evaluate import ToyEvaluator
    from .loop import self_rewarding_loop
    from .toy import AdditionTask, toy_models
    from .training import train_dpo

    torch.set_num_threads(1)
    import logging as _logging

    if not _logging.getLogger().handlers:  # a spawned worker: same log format as the parent
        from iclr25.core.progress import configure_logging

        configure_logging(os.environ.get("ICLR25_QUIET") == "1")
    seed_everything(seed)
    t0 = time.perf_counter()
    task = AdditionTask(seed=seed, iterations=settings.iterations, n_operand=settings.n_operand,
                        n_test=settings.n_test, n_seed=settings.n_seed)
    ms = toy_models(task, cache=cache, m0_steps=settings.m0_steps, sft_epochs=settings.sft_epochs,
                    progress=progress)
    tok = ms["tokenizer"]
    m0, m1 = ms["m0"].to(device), ms["m1"].to(device)
    ev = ToyEvaluator(task, tok, n_samples=settings.n_samples, temperature=settings.temperature)
    out: dict[str, Any] = {"seed": seed, "m0_seconds": ms["m0_seconds"], "m1_seconds": ms["m1_seconds"],
                           "methods": {}}
    t_setup = time.perf_counter() - t0
    captured: dict[str, Any] = {}
    for method in settings.methods:
        t1 = time.perf_counter()
        cfg = CreamConfig.toy(method=method, seed=seed, iterations=settings.iterations,
                              n_samples=settings.n_samples, temperature=settings.temperature,
                              reward_reference=settings.reward_reference)

        def grab(rep, model, pairs, method=method):
            if rep.iteration == 1 and method == "srlm":
                captured["pairs"] = pairs
                captured["c_avg"] = rep.consistency["mean"] if rep.consistency else None

        reps = self_rewarding_loop(m0, tok, task.unlabeled_splits(), cfg, sft_model=m1, evaluator=ev,
                                   utility=task.utility, progress=progress, device=device, on_round=grab)
        out["m0"] = reps[0].base_metrics
        out["m1"] = reps[0].start_metrics
        out["methods"][method] = {"reports": [r.to_dict() for r in reps], "seconds": time.perf_counter() - t1}
    if settings.long_stage_epochs and "pairs" in captured and captured["c_avg"] is not None:
        t1 = time.perf_counter()
        c = captured["c_avg"]
        long: dict[str, Any] = {"epochs": settings.long_stage_epochs, "c_avg": c, "logit_c": logit(c)}
        cfg = CreamConfig.toy(seed=seed, epochs=float(settings.long_stage_epochs), lr=settings.long_stage_lr
                              ).dpo_train(round_index=1, device=device)
        for name, w in (("srlm", 1.0), ("avg", c)):
            res = train_dpo(copy.deepcopy(m1), tok, captured["pairs"], cfg, c=[w] * len(captured["pairs"]),
                            progress=progress)
            long[name] = {"final_margin_mean": res.final_margin_mean,
                          "margin_by_epoch": _margin_by_epoch(res.history)}
        long["seconds"] = time.perf_counter() - t1
        out["long_stage"] = long
    out["seconds"] = time.perf_counter() - t0
    out["setup_seconds"] = t_setup
    return out


def _margin_by_epoch(history: list[dict[str, float]]) -> list[float]:
    by: dict[int, list[float]] = {}
    for h in history:
        by.setdefault(int(h["epoch"]), []).append(h["margin"])
    return [float(np.mean(by[e])) for e in sorted(by)]


def job_settings(settings: ReproSettings, device: str) -> dict[str, Any]:
    """The JSON-ready settings of one seed's job: what its result depends on (not the seed list, not the
    number of workers)."""
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(settings).items() if k not in ("seeds", "workers")}
    return {**d, "device": device}


def seed_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job (:mod:`iclr25.core.runner`): :func:`run_seed` at ``settings`` (:func:`job_settings`)."""
    from iclr25.core.runinfo import to_jsonable

    kw = {k: v for k, v in settings.items() if k != "device"}
    kw["methods"] = tuple(kw["methods"])
    s = ReproSettings(**kw, seeds=(seed,))
    return to_jsonable(run_seed(seed, s, settings["device"]))
