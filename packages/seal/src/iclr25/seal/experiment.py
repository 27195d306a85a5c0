"""One seed of the CPU-scale experiment: every method on the same base, data and seed (spec §4.3-4.4).

Methods (each ends with the same SFT of θ₀ on its kept set): ``standard`` (all of D_ft), ``random``,
``seal_sgd`` (SEAL with plain SGD on ω, the CPU-scale default), ``seal_adam`` (the released code's
Adam on ω), ``loss_filter`` (keep the lowest loss under θ₀), ``oracle`` (drop every unsafe and
low-quality sample), ``safeinstr`` (all of D_ft + D_safe) and ``seal_safeinstr`` (SEAL's subset + D_safe).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from .bilevel import epoch_plan, train_selector
from .config import CPU_SELECTOR, CPU_SELECTOR_ADAM, CPU_SFT, BilevelConfig, SFTConfig
from .data import LMDataset, encode_pairs
from .losses import fuse_gelu
from .metrics import ProgrammaticJudge, auroc, exact_match, generate_responses, refusal_rate, safety_margin
from .selection import loss_filter_subset, oracle_subset, random_subset, select_top
from .sft import base_losses, sft
from .tasks import SafetyTask, aligned_base, make_real_safety_task, make_synthetic_safety_task

__all__ = ["METHODS", "KEEP_METHODS", "run_task_seed", "evaluate_model", "selection_metrics", "zip_coverage"]

log = logging.getLogger("iclr25.seal")

METHODS = ("standard", "random", "seal_sgd", "seal_adam", "loss_filter", "oracle", "safeinstr", "seal_safeinstr")
KEEP_METHODS = ("random", "seal_sgd", "seal_adam", "loss_filter", "seal_safeinstr")
"""Methods whose kept set depends on the keep fraction."""
SAFEINSTR_FROM = "seal_sgd"
"""The SEAL variant whose subset SEAL + SafeInstr mixes with D_safe (the CPU-scale SEAL)."""


def zip_coverage(n_ft: int, n_safe: int, cfg: BilevelConfig) -> float:
    """Share of D_ft indices that the official zipped loop would update in every epoch (same plan code)."""
    zcfg = replace(cfg, ft_coverage="zip")
    seen = torch.ones(n_ft, dtype=torch.bool)
    for e in range(cfg.epochs):
        slots, _ = epoch_plan(n_ft, n_safe, zcfg, e)
        hit = torch.zeros(n_ft, dtype=torch.bool)
        hit[slots[slots >= 0]] = True
        seen &= hit
    return float(seen.float().mean())


def selection_metrics(scores: torch.Tensor, labels: Sequence[str]) -> dict[str, float]:
    """AUROC of a keep-score (larger = keep; −ω's AUROC for the bad class is the AUROC of ω for
    benign vs bad) for unsafe vs benign and low-quality vs benign."""
    s = scores.double().numpy()
    benign = [lab.startswith("benign") for lab in labels]
    out = {}
    for bad in ("unsafe", "low_quality"):
        rows = [i for i, lab in enumerate(labels) if benign[i] or lab == bad]
        if any(labels[i] == bad for i in rows):
            out[f"auroc_{bad}"] = auroc([-s[i] for i in rows], [labels[i] == bad for i in rows])
    return out


@torch.inference_mode()
def evaluate_model(model: Any, tok: Any, task: SafetyTask, safe: LMDataset, judge: ProgrammaticJudge) -> dict[str, Any]:
    """Exact match per benign set, greedy refusal rate, safety margin, f(θ) on D_safe, and the judge's
    per-prompt scores (benign sets then harmful, in order) for the win rate."""
    out: dict[str, Any] = {}
    kinds, responses, refs, terms = [], [], [], []
    for name, ev in task.evals.items():
        resp = generate_responses(model, tok, ev["prompts"], template=task.template, max_new_tokens=16,
                                  batch_size=100)
        if name == "harmful":
            out["refusal_rate"] = refusal_rate(resp, task.refusal_prefixes)
            kinds += ["harmful"] * len(resp)
            refs += [None] * len(resp)
            terms += ev["terms"]
        else:
            out[f"em_{name}"] = exact_match(resp, ev["references"])
            kinds += ["benign"] * len(resp)
            refs += ev["references"]
            terms += [()] * len(resp)
        responses += resp
    h = task.evals["harmful"]
    out["margin"], _ = safety_margin(model, tok, h["prompts"], h["refusals"], h["compliances"], template=task.template,
                                     max_len=task.max_len, batch_size=128)
    out["safe_loss"] = float(base_losses(model, safe, batch_size=128).mean())
    out["judge_scores"] = judge.scores(kinds, responses, refs, terms)
    return out


def _subset(data: LMDataset, idx: torch.Tensor, extra: LMDataset | None) -> LMDataset:
    sub = data.subset(idx)
    return LMDataset.concat([sub, extra]) if extra is not None else sub


def run_task_seed(task_name: str, n_ft: int, seed: int, keeps: Sequence[float] = (0.8,), *,
                  methods: Sequence[str] = METHODS, cache: str | None = None, threads: int | None = 1,
                  progress: bool = False) -> dict[str, Any]:
    """Run every method for one (task, seed) and return the measurements (plain JSON values).

    Args:
        task_name: ``"synthetic"`` or ``"real"``.
        n_ft: |D_ft|.
        seed: the seed of the task, the base, selection, random subsets and SFT.
        keeps: keep fractions (methods in :data:`KEEP_METHODS` run once per keep).
        methods: a subset of :data:`METHODS` (``standard`` is always run: the win-rate reference).
        cache: cache root for the base model.
        threads: torch threads in this process.

    Returns:
        ``{"task", "seed", "n_ft", "selection": {...}, "runs": [{"method", "keep", "n_kept", "kept_unsafe",
        "kept_low_quality", metrics...}], "seconds": {...}}``.
    """
    from scipy.stats import spearmanr

    from iclr25.core.threads import limited_threads

    with limited_threads(threads):
        t0 = time.perf_counter()
        task = make_synthetic_safety_task(n_ft, seed=seed) if task_name == "synthetic" else \
            make_real_safety_task(n_ft, seed=seed)
        base, tok, _ = aligned_base(task, seed, cache=cache, progress=progress)
        fuse_gelu(base)  # the same tanh-GELU as one kernel (losses.fuse_gelu)
        t_base = time.perf_counter() - t0
        safe = encode_pairs(tok, task.safe, template=task.template, max_len=task.max_len, what="D_safe")
        ft = encode_pairs(tok, task.ft, template=task.template, max_len=task.max_len, what="D_ft")
        labels = task.labels()
        unsafe = torch.tensor([lab == "unsafe" for lab in labels])
        lowq = torch.tensor([lab == "low_quality" for lab in labels])
        judge = ProgrammaticJudge(task.refusal_prefixes, task.compliance_markers)
        sel: dict[str, Any] = {}
        scores: dict[str, torch.Tensor] = {}
        t1 = time.perf_counter()
        for name, preset in (("seal_sgd", CPU_SELECTOR), ("seal_adam", CPU_SELECTOR_ADAM)):
            if name not in methods and not (name == SAFEINSTR_FROM and "seal_safeinstr" in methods):
                continue
            cfg = BilevelConfig(**{**preset, "max_len": task.max_len}, seed=seed)
            model = copy.deepcopy(base)
            res = train_selector(model, safe, ft, cfg, progress=progress)
            scores[name] = res.logits
            sel[name] = {"fraction_updated_every_epoch": res.fraction_updated_every_epoch(),
                         "zip_fraction_updated_every_epoch": zip_coverage(len(ft), len(safe), cfg),
                         "history": res.history, "epochs": cfg.epochs,
                         **selection_metrics(res.logits, labels)}
            del model
        t_sel = time.perf_counter() - t1
        bl = base_losses(base, ft, batch_size=128)
        scores["loss_filter"] = -bl
        sel["loss_filter"] = selection_metrics(-bl, labels)
        g = torch.Generator().manual_seed(seed + 7)
        sel["random"] = selection_metrics(torch.rand(len(ft), generator=g), labels)
        for name in ("seal_sgd", "seal_adam"):
            if name in scores:
                sel[name]["spearman_vs_base_loss"] = float(spearmanr(scores[name].numpy(), -bl.numpy()).statistic)
        # kept sets
        plans: list[tuple[str, float | None, torch.Tensor, bool]] = [("standard", None, torch.arange(len(ft)), False)]
        if "oracle" in methods:
            plans.append(("oracle", None, oracle_subset(labels), False))
        if "safeinstr" in methods:
            plans.append(("safeinstr", None, torch.arange(len(ft)), True))
        for keep in keeps:
            for m in KEEP_METHODS:
                if m not in methods:
                    continue
                if m == "random":
                    idx = random_subset(len(ft), keep, seed + 1000)
                elif m == "loss_filter":
                    idx = loss_filter_subset(bl, keep)
                elif m == "seal_safeinstr":
                    idx = select_top(scores[SAFEINSTR_FROM], keep)
                else:
                    idx = select_top(scores[m], keep)
                plans.append((m, keep, idx, m == "seal_safeinstr"))
        runs = []
        t2 = time.perf_counter()
        for m, keep, idx, mix in plans:
            data = _subset(ft, idx, safe if mix else None)
            model = copy.deepcopy(base)
            sft(model, data, SFTConfig(**{**CPU_SFT, "max_len": task.max_len, "seed": seed}), progress=progress)
            ev = evaluate_model(model, tok, task, safe, judge)
            runs.append({"method": m, "keep": keep, "n_kept": int(idx.numel()),
                         "kept_unsafe": int(unsafe[idx].sum()), "kept_low_quality": int(lowq[idx].sum()),
                         "mixed_safe": bool(mix), **ev})
            del model
        base_ev = evaluate_model(base, tok, task, safe, judge)
        ref = next(r["judge_scores"] for r in runs if r["method"] == "standard")
        from .metrics import win_rate

        for r in runs:
            r["win_rate_vs_standard"] = win_rate(r["judge_scores"], ref)
        t_sft = time.perf_counter() - t2
    return {"task": task_name, "seed": seed, "n_ft": n_ft, "n_safe": len(safe), "keeps": list(keeps),
            "selection": sel, "runs": runs, "base": {k: v for k, v in base_ev.items() if k != "judge_scores"},
            "info": task.info,
            "seconds": {"base": t_base, "selection": t_sel, "sft_eval": t_sft, "total": time.perf_counter() - t0}}


def task_seed_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job (:mod:`iclr25.core.runner`): :func:`run_task_seed` of ``settings["task"]`` at
    ``settings["n_ft"]`` and ``settings["keeps"]``; an undefined number (NaN) is recorded as ``None``."""
    from iclr25.core.runner import nan_to_none

    for name in ("transformers", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return nan_to_none(run_task_seed(settings["task"], int(settings["n_ft"]), seed, tuple(settings["keeps"]),
                                     methods=tuple(settings.get("methods") or METHODS), threads=None))
