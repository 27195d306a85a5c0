"""Job bodies of vBoN's CPU-scale reproduction (spec §4), run by :mod:`iclr25.core.runner`.

Two jobs (:mod:`iclr25.vbon.reproduce` declares them): ``kl_enumeration`` (exact KL of BoN on a discrete space, its
own generator) and ``pipeline`` — TF-IDF sentiment reward + tiny reference LM (both cached, trained on the mirrored
polarity snippets) → per-prompt reward CDF from ``M`` reference samples → inference-time BoN, vBoN (exact bound,
``N`` in a grid) and RLHF (``beta`` grid) with the same trainer → win rate / reward / KL on held-out prompts, the
log-ratio mechanism and the inference-cost timings. ``pipeline`` is one job because its stages draw from one torch
generator in sequence (CDF, BoN, opponents, each training run, mechanism): splitting it would change the numbers.
Each job returns a JSON-ready record (dict keys are strings: ``N`` values as ``"2"``, ``"4"``, ...); the claims are
a pure function of the records (:mod:`iclr25.vbon.claims`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from .bon import bon_distribution, bon_kl, bon_win_rate, kl_divergence
from .cdf import RewardCDFCache
from .config import VBoNConfig
from .rewards import call_reward
from .runtime import clone_policy, default_prompts
from .sampling import best_of_n, sample_texts
from .trainer import VBoNTrainer, evaluate_policy, win_rate

__all__ = ["ReproSettings", "QUICK", "FULL", "pipeline_job", "kl_job", "rlhf_frontier", "ols_slope",
           "policy_log_ratio_vs_log_cdf", "bon_n_at_win_rate", "matched_cost", "settings_from_json"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReproSettings:
    """Scale of a reproduction run (spec §4.2)."""

    lm_size: str = "quick"
    n_train_prompts: int = 32
    n_eval_prompts: int = 32
    m: int = 64
    ns: tuple[int, ...] = (2, 4, 8)
    betas: tuple[float, ...] = (0.1, 0.3, 1.0)
    bounds: tuple[str, ...] = ("exact",)
    steps: int = 40
    prompts_per_step: int = 16
    samples_per_prompt: int = 4
    lr: float = 3e-4
    eval_samples_per_prompt: int = 8
    bon_repeats: int = 6
    bon_ns: tuple[int, ...] = (2, 4, 8)
    throughput_prompts: int = 64
    batch_size: int = 256
    max_new_tokens: int = 24
    seed: int = 0


QUICK = ReproSettings()
# Larger CPU setting (spec §4.2 "full", shrunk to about 30 CPU-minutes: 4-layer d=128 LM instead of d=256,
# 60 steps instead of 200). Not run in CI; see the README.
FULL = ReproSettings(lm_size="full", n_train_prompts=128, n_eval_prompts=64, m=128, ns=(2, 4, 8, 16),
                     betas=(0.05, 0.1, 0.3, 0.5, 1.0), bounds=("exact", "l1"), steps=60, prompts_per_step=16,
                     lr=3e-4, bon_repeats=8)


def rlhf_frontier(kls, wrs, at) -> np.ndarray:
    """Upper envelope of RLHF (KL, win rate) points (with the reference point (0, 0.5)), linearly
    interpolated at the KLs ``at`` (clamped to the end points outside the measured range)."""
    k = np.concatenate([[0.0], np.asarray(kls, float)])
    w = np.concatenate([[0.5], np.asarray(wrs, float)])
    o = np.argsort(k)
    k, w = k[o], np.maximum.accumulate(w[o])
    return np.interp(np.asarray(at, float), k, w)


def ols_slope(x, y) -> tuple[float, float, float]:
    """Least-squares slope of ``y`` on ``x`` (with intercept), its standard error and Pearson's r.

    Args:
        x, y: ``(B,)`` arrays, ``B >= 3``, finite.

    Returns:
        ``(slope, se, r)``; ``se`` is the usual OLS standard error ``sqrt(SSR / (B - 2) / Sxx)``.

    Raises:
        ValueError: fewer than 3 points, non-finite values, or constant ``x``.
    """
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if x.shape != y.shape or x.size < 3:
        raise ValueError(f"ols_slope needs two arrays of >= 3 equal-length values, got {x.size} and {y.size}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("ols_slope: non-finite values")
    dx, dy = x - x.mean(), y - y.mean()
    sxx = float(dx @ dx)
    if sxx == 0.0:
        raise ValueError("ols_slope: x is constant")
    b = float(dx @ dy) / sxx
    resid = dy - b * dx
    se = float(np.sqrt(resid @ resid / (x.size - 2) / sxx))
    syy = float(dy @ dy)
    r = float(dx @ dy) / np.sqrt(sxx * syy) if syy > 0 else 0.0
    return b, se, r


def policy_log_ratio_vs_log_cdf(policy, ref, tok, reward, cdf: RewardCDFCache, prompts, n: int,
                                samples_per_prompt: int, max_new_tokens: int) -> dict[str, float]:
    """The quantity vBoN's argument rests on (spec §1.2-1.3): its optimum is ``pi_BoN`` whose log-ratio to
    ``pi_ref`` is ``log N + (N-1) log F(x, y)`` (continuous rewards; the bound's optimum ``pi_ref F^(N-1) / Z``
    has the same tilt). On policy samples of the CDF-cache prompts, regress the sequence log-ratio
    ``l = sum_t log pi_theta - log pi_ref`` on ``(N-1) log F̂(x, y)``: slope 1 at the optimum, 0 for an
    unchanged policy.

    Returns:
        ``{"slope", "slope_se", "r", "n_samples", "mean_log_ratio", "mean_log_cdf"}``.
    """
    from .sampling import response_logprobs, sample

    was = policy.training
    policy.eval()
    try:
        with torch.no_grad():
            smp = sample(policy, tok, prompts, samples_per_prompt, max_new_tokens)
            r = call_reward(reward, smp.prompts, smp.continuations)
            log_f = cdf.log_cdf(smp.prompts, r).double().cpu().numpy()
            mask = smp.response_mask.to(torch.float32)
            ell = ((response_logprobs(policy, smp) - response_logprobs(ref, smp)) * mask).sum(1)
    finally:
        policy.train(was)
    ell = ell.double().cpu().numpy()
    b, se, rho = ols_slope((n - 1) * log_f, ell)
    return {"slope": b, "slope_se": se, "r": rho, "n_samples": int(ell.size), "mean_log_ratio": float(ell.mean()),
            "mean_log_cdf": float(log_f.mean())}


def bon_n_at_win_rate(w: float, ns, rates) -> float:
    """The BoN sample count whose win rate equals ``w``: BoN's measured win rates ``rates`` at ``ns`` plus the
    exact anchor N = 1 (one reference sample wins 1/2), made non-decreasing in N and interpolated linearly in
    ``log N``. ``w <= 1/2`` gives 1; ``w`` above the largest measured rate gives the largest ``N`` (a lower
    bound: the cost is then understated for BoN, i.e. conservative for vBoN).

    Raises:
        ValueError: ``ns`` and ``rates`` of different lengths, empty, or ``N < 2``.
    """
    ns, rates = np.asarray(ns, float), np.asarray(rates, float)
    if ns.size == 0 or ns.shape != rates.shape or (ns < 2).any():
        raise ValueError(f"bon_n_at_win_rate needs BoN win rates at N >= 2, got N={ns.tolist()}, "
                         f"rates={rates.tolist()}")
    o = np.argsort(ns)
    logn = np.log(np.concatenate([[1.0], ns[o]]))
    wr = np.maximum.accumulate(np.concatenate([[0.5], rates[o]]))
    if w <= wr[0]:
        return 1.0
    if w >= wr[-1]:
        return float(ns.max())
    i = int(np.searchsorted(wr, w, side="left"))  # wr[i-1] < w <= wr[i]
    f = (w - wr[i - 1]) / (wr[i] - wr[i - 1])
    return float(np.exp(logn[i - 1] + f * (logn[i] - logn[i - 1])))


def matched_cost(w: float, w_se: float, bon_rows: dict, t_vbon: float, t_bon: dict, *, draws: int = 2000,
                 seed: int = 0) -> dict:
    """vBoN's inference cost advantage at matched win rate.

    ``n_match`` = :func:`bon_n_at_win_rate` of vBoN's win rate ``w`` on BoN's measured win rates
    ``bon_rows[N]["win_rate"]``; BoN's time at ``n_match`` is interpolated linearly in N between its timings
    ``t_bon[N]`` (N = 1 and the measured N); the ratio is that time over vBoN's ``t_vbon`` (one sample per
    prompt). Its uncertainty: a parametric bootstrap that redraws vBoN's win rate (s.e. ``w_se``) and each
    BoN win rate (its s.e.), ``draws`` times.

    Returns:
        ``{"n_match", "ratio", "ratio_se", "n_match_lo", "n_match_hi"}`` (``lo``/``hi``: 16th/84th percentiles).
    """
    ns = sorted(bon_rows)
    rates = np.array([bon_rows[n]["win_rate"] for n in ns])
    ses = np.array([bon_rows[n]["se"] for n in ns])
    tn = sorted(t_bon)
    tt = [t_bon[n] for n in tn]

    def ratio(n_eff: float) -> float:
        return float(np.interp(n_eff, tn, tt)) / t_vbon

    n0 = bon_n_at_win_rate(w, ns, rates)
    rng = np.random.default_rng(seed)
    boot = np.array([bon_n_at_win_rate(w + w_se * rng.standard_normal(), ns, rates + ses * rng.standard_normal(len(ns)))
                     for _ in range(draws)])
    ratios = np.array([ratio(x) for x in boot])
    return {"n_match": n0, "ratio": ratio(n0), "ratio_se": float(ratios.std(ddof=1)),
            "n_match_lo": float(np.percentile(boot, 16)), "n_match_hi": float(np.percentile(boot, 84))}


def settings_from_json(d: dict) -> ReproSettings:
    """:class:`ReproSettings` from its JSON form (lists back to tuples)."""
    return ReproSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def _bon_rows(ref, tok, reward, prompts, s: ReproSettings) -> dict:
    """Inference-time BoN vs one fresh reference sample per trial, for every N in ``s.bon_ns``."""
    nmax = max(s.bon_ns)
    reps = [p for p in prompts for _ in range(s.bon_repeats)]
    res = best_of_n(ref, tok, reward, reps, nmax, s.max_new_tokens, s.batch_size)
    opp_txt = sample_texts(ref, tok, reps, 1, s.max_new_tokens, s.batch_size)
    opp = call_reward(reward, reps, [row[0] for row in opp_txt])
    rows = {}
    for n in s.bon_ns:
        best = res.rewards[:, :n].max(1).values  # BoN with N = the first n of the nmax draws
        wr, se = win_rate(best, opp)
        # z is undefined (None) when every trial has the same outcome (s.e. 0); the claim then reads it as infinite
        z = (wr - bon_win_rate(n)) / se if se > 0 else None
        rows[str(n)] = {"win_rate": wr, "se": se, "expected": bon_win_rate(n), "z": z, "trials": len(reps)}
    return rows


def kl_job(settings: dict, seed: int, deps: dict) -> dict:
    """Exact enumeration of KL(pi_BoN || pi_ref) on a discrete space (K = 1000) vs log N - (N-1)/N.

    Returns:
        ``{"2": {"kl_enumerated", "kl_analytic", "abs_diff"}, "4": ..., "8": ..., "16": ...}``.
    """
    g = torch.Generator().manual_seed(seed)
    k = int(settings["k"])
    e = -torch.log(torch.rand(k, generator=g, dtype=torch.float64))  # Dirichlet(1) via normalised exponentials
    p = e / e.sum()
    r = torch.randn(k, generator=g, dtype=torch.float64)
    rows = {}
    for n in settings["ns"]:
        kl = float(kl_divergence(bon_distribution(p, r, n), p))
        rows[str(n)] = {"kl_enumerated": kl, "kl_analytic": bon_kl(n), "abs_diff": abs(kl - bon_kl(n))}
    return rows


def _timings(policy, ref, tok, reward, prompts, s: ReproSettings, vb_top: dict, bon_rows: dict) -> dict:
    """Inference cost of vBoN (1 sample) vs BoN (N samples + scoring): time both on the same prompts (one
    batch), BoN at N = 1 and every measured N, and locate BoN's N at vBoN's win rate (:func:`matched_cost`)."""
    bs = max(1, len(prompts))  # one batch of P sequences: vBoN needs 1 call, BoN N calls

    def t_vbon():
        t = time.perf_counter()
        sample_texts(policy, tok, prompts, 1, s.max_new_tokens, bs)
        return time.perf_counter() - t

    def t_bon(n):
        t = time.perf_counter()
        best_of_n(ref, tok, reward, prompts, n, s.max_new_tokens, bs)
        return time.perf_counter() - t

    rows = {int(n): r for n, r in bon_rows.items()}
    tv = min(t_vbon() for _ in range(3))
    tb = {n: min(t_bon(n) for _ in range(2)) for n in sorted({1, *rows})}
    mc = matched_cost(vb_top["win_rate"], vb_top["win_rate_se"], rows, tv, tb, seed=s.seed)
    return {"vbon_s": tv, "bon_s": {str(n): t for n, t in tb.items()}, "prompts": len(prompts), "batch": bs,
            "matched": mc, "equal_n_ratio": tb[max(rows)] / tv}


def pipeline_job(settings: dict, seed: int, deps: dict) -> dict:
    """Everything but the KL enumeration at scale ``settings["repro"]`` (see the module docstring).

    Args:
        settings: ``{"repro": ReproSettings as JSON, "lm": the reference LM's TinyLMSpec as JSON,
            "out": folder for reward_cdf.jsonl, "progress": bool}``.
        seed: ``repro["seed"]``.

    Returns:
        The record: ``settings``, ``reward_accuracy``, ``bon`` (per N), ``runs`` (per vBoN / RLHF run: win rate,
        reward, KL and their s.e., config), ``mechanism`` (``log_ratio_vs_log_cdf`` per N), ``throughput``,
        ``timings``, ``cdf_m``, ``n_train_prompts``, ``n_eval_prompts``.
    """
    from iclr25.core.lm import TinyLMSpec
    from iclr25.core.seed import seed_everything

    from .data import load_polarity
    from .reflm import load_reference_lm
    from .rewards import TfidfSentimentReward

    s = settings_from_json(settings["repro"])
    if seed != s.seed:
        raise ValueError(f"pipeline_job: seed {seed} differs from the settings' seed {s.seed}")
    progress = bool(settings.get("progress", False))
    out_dir = Path(settings["out"])
    out_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(s.seed)
    timings: dict[str, float] = {}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    t = time.perf_counter()
    data = load_polarity()
    reward = TfidfSentimentReward.cached(data)
    acc = reward.accuracy(data.test_texts, data.test_labels)
    spec = TinyLMSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings["lm"].items()})
    ref, tok = load_reference_lm(spec, data=data, progress=progress)
    timings["setup_s"] = time.perf_counter() - t
    train_p = default_prompts(s.n_train_prompts, "train", data)
    eval_p = default_prompts(s.n_eval_prompts, "eval", data)

    t = time.perf_counter()
    torch.manual_seed(s.seed)
    cdf = RewardCDFCache.build(lambda p, m: sample_texts(ref, tok, p, m, s.max_new_tokens, s.batch_size, progress=progress,
                                                         desc="reference samples for F"), reward, train_p, s.m)
    cdf.to_jsonl(out_dir / "reward_cdf.jsonl")
    timings["cdf_s"] = time.perf_counter() - t

    t = time.perf_counter()
    torch.manual_seed(s.seed + 1)
    bon_rows = _bon_rows(ref, tok, reward, eval_p, s)
    timings["bon_s"] = time.perf_counter() - t

    # one shared pool of fresh reference samples as opponents for every fine-tuned policy
    torch.manual_seed(s.seed + 2)
    opp_txt = sample_texts(ref, tok, eval_p, s.eval_samples_per_prompt, s.max_new_tokens, s.batch_size)
    opp_r = call_reward(reward, [p for p in eval_p for _ in range(s.eval_samples_per_prompt)],
                        [x for row in opp_txt for x in row])

    base = VBoNConfig(m=s.m, steps=s.steps, prompts_per_step=s.prompts_per_step, samples_per_prompt=s.samples_per_prompt,
                      lr=s.lr, max_new_tokens=s.max_new_tokens, seed=s.seed)
    runs: list[tuple[str, VBoNConfig]] = [(f"vbon-{b}-N{n}", replace(base, method="vbon", n=n, bound=b))
                                          for b in s.bounds for n in s.ns]
    runs += [(f"rlhf-beta{beta:g}", replace(base, method="rlhf", beta=beta)) for beta in s.betas]
    results: dict[str, dict] = {}
    t = time.perf_counter()
    policies = {}
    for name, cfg in runs:
        t1 = time.perf_counter()
        policy = clone_policy(ref)
        tr = VBoNTrainer(policy, ref, tok, reward, train_p, cfg, cdf=cdf if cfg.method == "vbon" else None)
        hist = tr.train(progress=progress)
        torch.manual_seed(s.seed + 3)
        ev = evaluate_policy(tr.unwrapped, ref, tok, reward, eval_p, s.eval_samples_per_prompt, s.max_new_tokens,
                             ref_rewards=opp_r)
        ev.update({"config": asdict(cfg), "kl_coef": cfg.kl_coef, "train_seconds": time.perf_counter() - t1,
                   "final_train_reward": hist[-1]["reward"]})
        results[name] = ev
        policies[name] = tr.unwrapped
        log.info("%s: win %.3f reward %.3f kl %.3f", name, ev["win_rate"], ev["reward"], ev["kl"])
    timings["train_s"] = time.perf_counter() - t

    names = {n: f"vbon-exact-N{n}" if f"vbon-exact-N{n}" in results else f"vbon-{s.bounds[0]}-N{n}" for n in s.ns}
    t = time.perf_counter()
    torch.manual_seed(s.seed + 5)
    tilt = {str(n): policy_log_ratio_vs_log_cdf(policies[names[n]], ref, tok, reward, cdf, train_p, n,
                                                s.eval_samples_per_prompt, s.max_new_tokens) for n in s.ns}
    timings["mechanism_s"] = time.perf_counter() - t

    torch.manual_seed(s.seed + 4)
    tp_prompts = default_prompts(s.throughput_prompts, "eval", data)
    tp = _timings(policies[f"vbon-{s.bounds[0]}-N{max(s.ns)}"], ref, tok, reward, tp_prompts, s,
                  results[names[max(s.ns)]], bon_rows)
    timings["total_wall_s"] = time.perf_counter() - wall0
    timings["total_cpu_s"] = time.process_time() - cpu0  # CPU time of this job (1 torch thread)
    rec = {"settings": settings["repro"], "reward_accuracy": acc, "bon": bon_rows, "runs": results,
            "mechanism": {"log_ratio_vs_log_cdf": tilt}, "throughput": tp, "timings": timings, "cdf_m": cdf.m,
            "n_train_prompts": len(train_p), "n_eval_prompts": len(eval_p)}
    return json.loads(json.dumps(rec, default=float))  # NumPy scalars -> float; NaN stays (the runner refuses it)
