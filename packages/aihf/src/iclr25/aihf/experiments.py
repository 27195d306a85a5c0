"""The reproduction's experiments as runner jobs (:mod:`iclr25.core.runner`): ``fn(settings, seed, deps) -> record``.

Every arm of a comparison gets the same tuning grid and the same budget, chosen on a *validation split* — task
instances (bandit) or data draws (tiny LM) of their own seeds, never the test seeds — by the arm's mean true metric
there; the test seeds then run each arm once at its chosen value (issue 45 §4):

* bandit: every arm's L2 coefficient ``lambda`` in :data:`L2_GRID` (the table SFT's add-``s`` smoothing in
  :data:`SMOOTH_GRID`, the same number of values); arms RLHF (w = 0), AIHF (w = 0.5), IRL (w = 1), SFT (a
  log-linear policy ``softmax(phi^T psi)`` fitted to the demonstrations: the same features as the reward, no
  ``pi_ref``), SFT->RLHF (RLHF's reward, KL-regularised toward that SFT policy) and the feature-free table SFT;
* tiny LM: every arm's training length in :data:`LM_GRID` passes over the data (8, 16 or 48 optimiser steps with the
  quick run's 512 demonstrations and batch 64; for SFT->DPO the DPO stage, after the fixed 3-epoch SFT stage);
* gridworld: no tuning; every arm runs the same fixed configuration (README).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict

import numpy as np

__all__ = ["L2_GRID", "SMOOTH_GRID", "LM_GRID", "BANDIT_ARMS", "bandit_cells", "bandit_arm", "bandit_tune_job",
           "bandit_test_job", "converge_job", "gridworld_job", "tinylm_ref_job", "tinylm_tune_job", "tinylm_seed_job",
           "lm_config_for", "select"]

#: L2 coefficients every reward-learning arm (and the feature SFT) is tuned over.
L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
#: add-s smoothing of the table SFT (as many values as :data:`L2_GRID`).
SMOOTH_GRID = (0.03, 0.1, 0.3, 1.0, 3.0)
#: passes over the data of the tiny-LM arms (rounds x epochs for DPO / AIHF-DPO, epochs for SFT).
LM_GRID = (1, 2, 6)
_LM_ROUNDS = {1: (1, 1), 2: (2, 1), 6: (3, 2)}
BANDIT_ARMS = ("rlhf", "aihf", "irl", "sft", "sft-rlhf", "sft-table")


# ------------------------------------------------------------------------------------------------------ bandit
def _bandit_data(seed: int, n_p: int, regime: str):
    from .tasks import BanditTask

    task = BanditTask.random(seed=seed)
    if regime == "perfect":
        demos = task.sample_demos(400, np.random.default_rng([seed, 1]))
    else:
        g_b = np.random.default_rng([seed, 9])
        demos = task.sample_demos(400, g_b, log_pi=task.biased_demo_policy(0.7, g_b))
    prefs = task.sample_prefs(n_p, np.random.default_rng([seed, 2, n_p]))
    return task, demos, prefs


def _sft_linear(task, demos, l2: float):
    """Log-linear SFT on a bandit: ``log softmax(phi^T psi)`` with ``psi`` the L2-regularised demonstration MLE."""
    import torch

    from .soft import soft_policy
    from .tabular import fit_aihf_exact

    flat = copy.copy(task)
    flat.log_pi_ref = torch.full_like(task.log_pi_ref, -math.log(task.Y))  # no pi_ref: a plain softmax policy
    psi = fit_aihf_exact(flat, demos, None, 1.0, l2)
    return soft_policy(flat.log_pi_ref, flat.reward(psi), task.beta), psi


def bandit_arm(arm: str, task, demos, prefs, h: float, w: float = 0.5, weighting: str = "mean") -> dict:
    """One bandit arm at hyperparameter ``h`` (``lambda``, or the smoothing of ``sft-table``): regret and cosine
    distance of its reward (``None`` for the SFT arms)."""
    from .config import AIHFConfig
    from .soft import soft_policy
    from .tabular import cosine_distance, run_baseline, sft_policy

    theta = None
    if arm == "sft-table":
        log_pi = sft_policy(task, demos, smoothing=h)
    elif arm == "sft":
        log_pi, _ = _sft_linear(task, demos, h)
    else:
        method = "rlhf" if arm == "sft-rlhf" else arm
        r = run_baseline(method, task, demos, prefs, AIHFConfig(w=w, l2=h, weighting=weighting))
        theta, log_pi = r["theta"], r["log_pi"]
        if arm == "sft-rlhf":
            ref, _ = _sft_linear(task, demos, h)
            log_pi = soft_policy(ref, task.reward(theta), task.beta)
    return {"regret": task.regret(log_pi),
            "cos": None if theta is None else cosine_distance(theta, task.theta_star)}


def bandit_cells(perfect_np, biased_np) -> list[str]:
    """The ``regime/N_P`` settings every arm is tuned and tested in."""
    return [f"perfect/{n}" for n in perfect_np] + [f"biased/{n}" for n in biased_np]


def _grid(arm: str) -> tuple[float, ...]:
    return SMOOTH_GRID if arm == "sft-table" else L2_GRID


def select(values: dict[str, list[float]], higher_is_better: bool) -> str:
    """The grid value (a key) with the best mean over the validation seeds (ties: the first)."""
    keys = list(values)
    means = [float(np.mean(values[k])) for k in keys]
    i = int(np.argmax(means) if higher_is_better else np.argmin(means))
    return keys[i]


def bandit_tune_job(settings: dict, seed, deps: dict) -> dict:
    """Validation split of the bandit: every arm x grid value x cell on the validation task seeds.

    Record: ``{cell: {arm: {"regret": {h: [per seed]}, "chosen": h}}}`` (``h`` as text, JSON keys).
    """
    out: dict = {}
    for cell in settings["cells"]:
        regime, n_p = cell.split("/")
        for s in settings["val_seeds"]:
            task, demos, prefs = _bandit_data(int(s), int(n_p), regime)
            for arm in BANDIT_ARMS:
                for h in _grid(arm):
                    r = bandit_arm(arm, task, demos, prefs, h)
                    out.setdefault(cell, {}).setdefault(arm, {"regret": {}})["regret"].setdefault(
                        repr(h), []).append(r["regret"])
        for rec in out[cell].values():
            rec["chosen"] = select(rec["regret"], higher_is_better=False)
    return out


def bandit_test_job(settings: dict, seed, deps: dict) -> dict:
    """Test seeds of the bandit: each arm at its validated hyperparameter (and, for the record, at the untuned
    default ``lambda = 1e-4`` / smoothing 1), AIHF's per-pair weighting, and the w sweep (full run).

    Record: ``{"tuned": {cell: {arm: [regret per seed]}}, "untuned": ..., "cos": {cell: {arm: [...]}},
    "per_pair": {cell: [...]}, "w_sweep": {cell: {w: [...]}}, "chosen": {cell: {arm: h}}}``.
    """
    tune = deps["bandit_tune"]
    out: dict = {"tuned": {}, "untuned": {}, "cos": {}, "per_pair": {}, "w_sweep": {},
                 "chosen": {c: {a: tune[c][a]["chosen"] for a in tune[c]} for c in tune}}
    for cell in settings["cells"]:
        regime, n_p = cell.split("/")
        for s in settings["seeds"]:
            task, demos, prefs = _bandit_data(int(s), int(n_p), regime)
            for arm in BANDIT_ARMS:
                h = float(out["chosen"][cell][arm])
                r = bandit_arm(arm, task, demos, prefs, h)
                out["tuned"].setdefault(cell, {}).setdefault(arm, []).append(r["regret"])
                if r["cos"] is not None:
                    out["cos"].setdefault(cell, {}).setdefault(arm, []).append(r["cos"])
                default = 1.0 if arm == "sft-table" else 1e-4
                ru = r if h == default else bandit_arm(arm, task, demos, prefs, default)
                out["untuned"].setdefault(cell, {}).setdefault(arm, []).append(ru["regret"])
            h = float(out["chosen"][cell]["aihf"])
            out["per_pair"].setdefault(cell, []).append(
                bandit_arm("aihf", task, demos, prefs, h, weighting="per_pair")["regret"])
            if int(n_p) in (10, 1000):
                for w in settings["w_sweep"]:
                    out["w_sweep"].setdefault(cell, {}).setdefault(repr(float(w)), []).append(
                        bandit_arm("aihf", task, demos, prefs, h, w=float(w))["regret"])
    return out


def converge_job(settings: dict, seed, deps: dict) -> dict:
    """The single loop on the spec's convergence bandit (X = 20, Y = 6, d = 4, w = 0.5) against the L-BFGS optimum."""
    from .config import AIHFConfig
    from .tabular import fit_aihf_exact, train_aihf
    from .tasks import BanditTask

    iters = int(settings["iters"])
    task = BanditTask.random(20, 6, 4, seed=0)
    g = np.random.default_rng(1)
    demos, prefs = task.sample_demos(300, g), task.sample_prefs(50, g)
    opt = fit_aihf_exact(task, demos, prefs, 0.5, 1e-3)
    errors = {}
    for n in sorted({max(1, iters // 10), iters}):
        res = train_aihf(task, demos, prefs, AIHFConfig(w=0.5, l2=1e-3, iters=n, policy_lr=0.5, reward_lr=0.2))
        errors[str(n)] = float((res.theta - opt).norm())
    return {"error": errors[str(iters)], "errors": errors, "theta_opt_norm": float(opt.norm()), "iters": iters}


# --------------------------------------------------------------------------------------------------- gridworld
def gridworld_job(settings: dict, seed, deps: dict) -> dict:
    """Gridworld (single loop, warm-started soft value iteration), every arm with the same fixed configuration."""
    from .config import AIHFConfig
    from .tabular import cosine_distance, run_baseline
    from .tasks import GridworldMDP

    cfg = AIHFConfig(iters=150, policy_steps=20, reward_lr=0.2)
    out: dict = {"return": {}, "cos": {}}
    for s in settings["seeds"]:
        s = int(s)
        task = GridworldMDP.grid(seed=s)
        demos = task.sample_demos(20, np.random.default_rng([s, 2]))
        for n_p in settings["n_prefs"]:
            prefs = task.sample_prefs(n_p, np.random.default_rng([s, 3, n_p]))
            for m in ("rlhf", "aihf", "irl", "sft", "sft-rlhf"):
                r = run_baseline(m, task, demos, prefs, cfg, seed=s)
                out["return"].setdefault(str(n_p), {}).setdefault(m, []).append(task.normalized_return(r["log_pi"]))
                if r["theta"] is not None and m in ("rlhf", "aihf", "irl"):
                    out["cos"].setdefault(str(n_p), {}).setdefault(m, []).append(
                        cosine_distance(r["theta"], task.theta_star))
    return out


# ------------------------------------------------------------------------------------------------------ tiny LM
def lm_config_for(arm: str, passes: int, base=None):
    """The :class:`TinyLMConfig` of a tiny-LM arm trained for ``passes`` passes (:data:`LM_GRID`)."""
    from .config import TinyLMConfig

    base = base or TinyLMConfig()
    if passes not in _LM_ROUNDS:
        raise ValueError(f"passes must be one of {tuple(_LM_ROUNDS)}, got {passes}")
    if arm == "sft":
        return TinyLMConfig(**{**asdict(base), "sft_epochs": passes})
    rounds, epochs = _LM_ROUNDS[passes]
    return TinyLMConfig(**{**asdict(base), "rounds": rounds, "epochs": epochs})


def _implicit_accuracy(task, model, seed: int, n: int = 512) -> float:
    """Share of held-out pi_ref pairs (true rewards not tied) ordered correctly by beta log(pi / pi_ref)."""
    import torch

    from .implicit import batched_logprobs

    g = torch.Generator().manual_seed(seed * 31 + 7)
    p = task.random_prompts(n, g)
    y1, y2 = task.sample(task.reference, p, g), task.sample(task.reference, p, g)
    r1, r2 = task.true_reward(y1), task.true_reward(y2)
    e1, e2 = task.encode(p, y1), task.encode(p, y2)
    h1 = batched_logprobs(model, e1) - batched_logprobs(task.reference, e1)
    h2 = batched_logprobs(model, e2) - batched_logprobs(task.reference, e2)
    keep = r1 != r2
    return float(((h1 > h2) == (r1 > r2))[keep].float().mean())


def _lm_run(task, arm: str, passes: int, data, seed: int, eval_seed: int, implicit: bool) -> dict:
    import torch

    from .config import AIHFConfig
    from .tinylm import run_lm_method

    torch.manual_seed(seed)
    t = time.perf_counter()
    r = run_lm_method("aihf" if arm == "aihf" else arm, task, data, AIHFConfig(w=0.5), lm_config_for(arm, passes),
                      seed=seed)
    rec = dict(task.evaluate(r.model, task.cfg.n_eval, seed=eval_seed), seconds=time.perf_counter() - t)
    if implicit and arm != "sft":
        rec["implicit_accuracy"] = _implicit_accuracy(task, r.model, seed)
    return rec


def tinylm_ref_job(settings: dict, seed, deps: dict) -> dict:
    """Pre-train (or reload from the cache) the tiny LM's ``pi_ref`` once, before the jobs that use it."""
    from .config import TinyLMConfig
    from .tinylm import TinyLMTask

    t = time.perf_counter()
    lm = TinyLMConfig()
    task = TinyLMTask(lm)
    return {"seconds": time.perf_counter() - t, "reference": task.evaluate(task.reference, lm.n_eval)}


def tinylm_tune_job(settings: dict, seed, deps: dict) -> dict:
    """Validation split of the tiny LM: every arm x :data:`LM_GRID` on data drawn with the validation seeds
    (evaluated on their own samples); ``chosen`` = the best mean true reward."""
    from .tinylm import TinyLMTask

    task = TinyLMTask()
    out: dict = {}
    for n_p in settings["n_prefs"]:
        cell = out.setdefault(str(n_p), {})
        for s in settings["val_seeds"]:
            data = task.make_data(512, int(n_p), int(s))
            for arm in settings["methods"]:
                for passes in LM_GRID:
                    r = _lm_run(task, arm, passes, data, int(s), eval_seed=int(s) + 777, implicit=False)
                    cell.setdefault(arm, {"reward": {}, "kl": {}})
                    cell[arm]["reward"].setdefault(str(passes), []).append(r["reward"])
                    cell[arm]["kl"].setdefault(str(passes), []).append(r["kl"])
        for arm in cell:
            cell[arm]["chosen"] = select(cell[arm]["reward"], higher_is_better=True)
    return out


def tinylm_seed_job(settings: dict, seed: int, deps: dict) -> dict:
    """One test seed of the tiny LM: every arm at its validated length."""
    from .tinylm import TinyLMTask

    task = TinyLMTask()
    tune = deps["tinylm_tune"]
    out: dict = {}
    for n_p in settings["n_prefs"]:
        data = task.make_data(512, int(n_p), seed)
        cell = out.setdefault(str(n_p), {"demo_reward": float(task.true_reward(data.demos).mean())})
        for arm in settings["methods"]:
            passes = int(tune[str(n_p)][arm]["chosen"])
            cell[arm] = dict(_lm_run(task, arm, passes, data, seed, eval_seed=12345, implicit=True), passes=passes)
    return out
