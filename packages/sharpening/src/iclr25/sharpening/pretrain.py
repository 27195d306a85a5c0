"""The reproduction's ``pretrain`` jobs: one per base (task, seed), warm-started bases after their parent.

A base job trains (or finds in the user cache) a to-convergence base, or loads the shipped one
(:mod:`.shipped`), and records where it is, how it was trained (steps, validation KL, converged, CPU-s) and,
for the main task (``p_c = 0.4``), the base's own evaluation on the test prompts (trap fraction, greedy and
sampling accuracy, mode mass). The experiment jobs load the base from that record.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from .claimkit import base_conv, jsonable
from .settings import ReproSettings
from .task import TrapArithmeticTask

__all__ = ["base_job_name", "base_plan", "pretrain_job", "load_base", "base_eval"]

MAIN = TrapArithmeticTask()


def base_job_name(p_correct: float, seed: int) -> str:
    """The runner job name of the base for ``p_c`` and ``seed``."""
    return f"base_pc{p_correct:g}_s{seed}"


def _sweep_tasks(st: ReproSettings) -> list[TrapArithmeticTask]:
    extra = []
    if st.coverage:
        extra += [TrapArithmeticTask(p_correct=pc, n_distractors=nd) for pc, nd in st.coverage_tasks]
    if st.xpo:
        extra.append(TrapArithmeticTask(p_correct=0.1, n_distractors=40))
    return [t for i, t in enumerate(extra) if t != MAIN and t not in extra[:i]]


def base_plan(st: ReproSettings) -> list[dict[str, Any]]:
    """The bases a run needs: ``{"name", "p_correct", "n_distractors", "seed", "parent"}`` each, a
    warm-started base after its parent (``parent``: the parent's job name, or ``None``)."""
    seeds = sorted({st.base_seed(s) for s in st.seeds})
    sweep = _sweep_tasks(st)
    if sweep and (st.sweep_warm_start or st.base_per_seed):
        seeds = sorted(set(seeds) | {0})
    plan = [{"name": base_job_name(MAIN.p_correct, s), "p_correct": MAIN.p_correct,
             "n_distractors": MAIN.n_distractors, "seed": s, "parent": None} for s in seeds]
    for t in sweep:
        parent = base_job_name(MAIN.p_correct, 0) if st.sweep_warm_start else None
        plan.append({"name": base_job_name(t.p_correct, 0), "p_correct": t.p_correct,
                     "n_distractors": t.n_distractors, "seed": 0, "parent": parent})
    return plan


def base_eval(base, task: TrapArithmeticTask, test: np.ndarray, n_samples: int) -> dict[str, Any]:
    """The base's own numbers on ``test``: trap fraction (argmax correct and its mass < 1/2), argmax
    correctness, mean mode mass, C_cov, and greedy / sampling accuracy (``base_*``)."""
    from .evaluation import evaluate_on_trap
    from .exact import enumerate_responses

    lp = enumerate_responses(base.model, base.tokenizer, task.prompts(test), task.candidates)
    ev = evaluate_on_trap(base.model, base.model, base.tokenizer, task, test, lp, n_samples=n_samples)
    c = task.correct_index(test)
    ystar = lp.numpy().argmax(-1)
    pstar = np.exp(lp.numpy().max(-1))
    return {"trap_learned": float(np.mean((ystar == c) & (pstar < 0.5))), "mode_is_correct": float(np.mean(ystar == c)),
            "mean_pstar": float(pstar.mean()), "pstar_below_half": float(np.mean(pstar < 0.5)),
            "coverage": float(np.mean(1 / pstar)), **{f"base_{k}": v for k, v in ev.summary().items()}}


def _task(settings: dict) -> TrapArithmeticTask:
    return TrapArithmeticTask(p_correct=settings["p_correct"], n_distractors=settings["n_distractors"])


def pretrain_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: train / find / load one base and record it (and, for the main task, its evaluation).

    ``settings``: ``{"st": ReproSettings.to_dict(), "p_correct", "n_distractors", "parent"}``; ``seed`` is the
    base's seed; ``deps[parent]`` the parent's record for a warm start.
    """
    import torch

    from iclr25.core.seed import seed_everything

    from .base import cached_trap_base
    from .shipped import shipped_trap_base

    st = ReproSettings.from_dict(settings["st"])
    task = _task(settings)
    _, test = task.split(st.n_train, st.n_test, seed=0)
    torch.manual_seed(seed)
    if st.base_source == "shipped" and task == MAIN:
        b = shipped_trap_base(task, exclude=test, n_val=st.base.n_val)
    else:
        cfg = replace(st.base, seed=seed)
        if settings.get("parent"):
            cfg = replace(cfg, init_from=deps[settings["parent"]]["path"])
        b = cached_trap_base(task, cfg, progress=False, exclude=test)
    rec = {"p_correct": task.p_correct, "n_distractors": task.n_distractors, "seed": seed,
           "shipped": bool(b.info.get("shipped", False)), "cached": bool(b.info["cached"]), "path": b.info["path"],
           "recipe": b.info["recipe"], "steps": b.info["steps"], "val_kl": b.info["val_kl"],
           "converged": b.info["converged"], "stop_kl": b.info.get("stop_kl"), "final_loss": b.info.get("final_loss"),
           "pretrain_seconds": b.info["pretrain_seconds"], "pretrain_cpu_seconds": b.info["pretrain_cpu_seconds"],
           "kl_history": b.info.get("kl_history")}
    rec["conv"] = base_conv(rec)
    if task == MAIN:
        seed_everything(10_000 + seed)            # the base's evaluation samples: one RNG per base
        torch.manual_seed(10_000 + seed)
        rec["eval"] = base_eval(b, task, test, st.eval_samples)
    return jsonable(rec)


def load_base(record: dict[str, Any], st: ReproSettings, device: str = "cpu"):
    """The :class:`~iclr25.sharpening.base.TrapBase` a base job recorded (the shipped one is checked again)."""
    from transformers import AutoModelForCausalLM

    from iclr25.core.lm import byte_tokenizer

    from .base import TrapBase, use_fused_gelu
    from .shipped import shipped_trap_base

    task = TrapArithmeticTask(p_correct=record["p_correct"], n_distractors=record["n_distractors"])
    if record.get("shipped"):
        _, test = task.split(st.n_train, st.n_test, seed=0)
        b = shipped_trap_base(task, exclude=test, n_val=st.base.n_val)
    else:
        model = AutoModelForCausalLM.from_pretrained(record["path"]).eval()
        use_fused_gelu(model)
        b = TrapBase(model, byte_tokenizer(padding_side="left"), dict(record))
    b.model.to(device)
    return b
