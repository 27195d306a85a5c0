"""CPU-scale reproduction: two settings, each method's step size tuned on the same grid on validation.

Settings (:data:`SETTINGS`):

- ``adult``: UCI Adult, 12 clients in 3 privacy groups (ε = 1, 2, 4; δ = 1e-5), MLP (64 hidden),
  ``T = 30``, ``K = 4``, ``σ = 2.2`` — the smallest σ (rounded up) at which every client meets the
  spec's guard ``q·m_n ≥ 20`` (σ = 1.5 gives the ε = 1, ρ = 0.25 clients ``q·m ≈ 12``).
- ``digits``: scikit-learn digits (10 classes), a linear model, 3 clients with ε = 2, 4, 6,
  ``T = 20``, ``K = 2``, ``σ = 3.0``: a setting where the model is still learning in the last
  rounds (the paper's mechanism needs late rounds to matter).

Methods: DP-FedAvg (everyone at min ε), IDP-FedAvg (own ε, uniform in time), time-adaptive with the
strict-clients-save-most permutation of ρ = (0.25, 0.5, 1.0) (``ta``), its reverse (``ta-reverse``)
and TA's very rates in the opposite time order (``ta-spend-first``: the same multiset of rates, so
exactly the same ε — the order effect at equal privacy). Step size: for every method, every value of
the same grid is run on seed 0 and the one with the best final *validation* accuracy (server-side
split, never trained on) is kept; while any method's best value lies on an edge of the grid, the grid
is extended for all methods alike (doubling / halving, at most :data:`MAX_EXTEND` times per edge).
The other seeds run at the chosen step sizes. Reported: test accuracy, mean ± sd over seeds.

Runs go through :func:`~iclr25.ta_dpfl.federation.run_inprocess` (the Flower apps' client and server
logic, without Ray), two processes at a time.
"""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

from .config import FederationSpec, group_budgets

__all__ = ["reproduce", "reproduction_specs", "claims_from_results", "total_rates", "SETTINGS", "QUICK", "FULL"]

RHOS = (0.25, 0.5, 1.0)
SETTINGS = {
    "adult": {"dataset": "adult", "epsilons": (1.0, 2.0, 4.0), "num_clients": 12, "sigma": 2.2, "rounds": 30,
              "local_steps": 4, "hidden": 64},
    "digits": {"dataset": "digits", "epsilons": (2.0, 4.0, 6.0), "num_clients": 3, "sigma": 3.0, "rounds": 20,
               "local_steps": 2, "hidden": 0},
}
#: scales; tests shrink them through ``reproduce(..., **overrides)``
QUICK = {"seeds": (0, 1), "lr_grid": (1.0, 2.0, 4.0), "settings": ("adult", "digits")}
FULL = {"seeds": (0, 1, 2), "lr_grid": (0.5, 1.0, 2.0, 4.0), "settings": ("digits", "adult")}  # cheap one first
TUNED = ("dpfedavg", "idp", "ta", "ta-reverse", "ta-spend-first")
#: how often the step-size grid may be extended at each edge (see :func:`tune_step_sizes`)
MAX_EXTEND = 3
METHODS = TUNED


def _spec(out_dir: Path, setting: str, method: str, seed: int, lr: float, *, rounds: int | None = None,
          progress: bool = False, tag: str = "") -> FederationSpec:
    st = SETTINGS[setting]
    n = st["num_clients"]
    key = f"{setting}-{method}-lr{lr:g}-seed{seed}{tag}"
    return FederationSpec(method=method, epsilons=group_budgets(st["epsilons"], n), rhos=group_budgets(RHOS, n),
                          sigma=st["sigma"], rounds=rounds or st["rounds"], local_steps=st["local_steps"], lr=lr,
                          hidden=st["hidden"], dataset=st["dataset"], seed=seed, min_expected_batch=20.0,
                          out_dir=str(out_dir / "runs" / key), run_key=key, progress=progress)


def reproduction_specs(out_dir: Path, setting: str, seeds, lr_grid, *, rounds: int | None = None
                       ) -> list[FederationSpec]:
    """The tuning runs: every tuned method × every step size of the grid, on ``seeds[0]``."""
    return [_spec(out_dir, setting, m, seeds[0], lr, rounds=rounds) for m in TUNED for lr in lr_grid]


def _finished(spec: FederationSpec) -> dict | None:
    """``result.json`` of a run that went through all its rounds (None otherwise)."""
    p = Path(spec.out_dir) / "result.json"
    if not p.is_file():
        return None
    try:
        r = json.loads(p.read_text())
    except json.JSONDecodeError:
        return None
    return r if r.get("rounds") == spec.rounds and len(r.get("accuracy_per_round", [])) == spec.rounds else None


def _run(spec: FederationSpec) -> dict:
    """One federation; with ``spec.resume`` a finished one is read back and an unfinished one continues
    from its last round checkpoint; without it the run folder is deleted first (the simulated nodes'
    accountants live there, and a node refuses rounds it has already booked)."""
    import shutil

    import torch

    torch.set_num_threads(1)
    from .federation import latest_checkpoint, run_inprocess

    out = Path(spec.out_dir)
    r = _finished(spec) if spec.resume else None
    if r is None:
        if not spec.resume or latest_checkpoint(out) is None:
            shutil.rmtree(out, ignore_errors=True)
        r = run_inprocess(spec)
    r["lr"], r["setting"], r["transition_round"] = spec.lr, spec.run_key.split("-")[0], spec.rounds // 2
    return r


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing as mp

    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))


def _run_all(specs: list[FederationSpec], workers: int | Executor) -> list[dict]:
    """Run ``specs``: in this process (``workers <= 1``), in a fresh pool of ``workers`` processes, or in
    the given executor (:func:`reproduce` keeps one pool for the whole run: every fresh ``spawn``
    worker pays ~15 CPU s of imports (torch, Opacus, torch._dynamo) and re-solves the schedules)."""
    if isinstance(workers, Executor):
        return list(workers.map(_run, specs)) if len(specs) > 1 else [_run(s) for s in specs]
    if workers <= 1 or len(specs) <= 1:
        return [_run(s) for s in specs]
    with _pool(workers) as ex:
        return list(ex.map(_run, specs))


def _best(cand: list[dict]) -> dict:
    """The run with the best final validation accuracy (ties: the smaller step size)."""
    return max(cand, key=lambda r: (r["final_val_accuracy"], -r["lr"]))


def tune_step_sizes(out_dir: Path, setting: str, seeds, lr_grid, *, rounds: int | None = None,
                    workers: int | Executor = 1,
                    resume: bool = False, max_extend: int = MAX_EXTEND) -> tuple[list[dict], list[float]]:
    """Run every tuned method at every step size of the grid on ``seeds[0]``; while the best step
    size of *any* method lies on an edge of the grid, extend the grid for *all* methods (double the
    largest / halve the smallest value), at most ``max_extend`` times per edge.

    Returns:
        ``(tuning results, final grid)`` (sorted).
    """
    grid = sorted(float(x) for x in lr_grid)
    specs = [replace(s, resume=resume) for s in reproduction_specs(out_dir, setting, seeds, grid, rounds=rounds)]
    tuned = _run_all(specs, workers)
    ext = {"up": 0, "down": 0}
    while True:
        best = {m: _best([r for r in tuned if r["method"] == m])["lr"] for m in TUNED}
        add = []
        if any(b == grid[-1] for b in best.values()) and ext["up"] < max_extend:
            add.append(grid[-1] * 2)
            ext["up"] += 1
        if any(b == grid[0] for b in best.values()) and ext["down"] < max_extend and len(grid) > 1:
            add.append(grid[0] / 2)
            ext["down"] += 1
        if not add:
            return tuned, grid
        grid = sorted(grid + add)
        tuned += _run_all([replace(_spec(out_dir, setting, m, seeds[0], lr, rounds=rounds), resume=resume)
                           for m in TUNED for lr in add], workers)


def _ms(a) -> str:
    a = np.asarray(a, dtype=float)
    return f"{a.mean():.4f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.4f}"


def _by(results, setting, method, key="final_accuracy") -> np.ndarray:
    rs = sorted((r for r in results if r["setting"] == setting and r["method"] == method and not r.get("tuning_only")),
                key=lambda r: r["seed"])
    return np.array([r[key] for r in rs], dtype=float)


def _pair_claim(name, setting, ours_m, base_m, results, paper, scale, extra: str = "") -> Claim:
    a, b = _by(results, setting, ours_m), _by(results, setting, base_m)
    d = a - b
    sd = float(d.std(ddof=1)) if len(d) > 1 else math.nan
    inside = not (len(d) > 1 and abs(d.mean()) > sd)
    verdict = (f"the gap {d.mean():+.4f} is INSIDE the seed spread (sd {sd:.4f}): not evidence either way" if inside else f"the gap exceeds the seed spread (|{d.mean():+.4f}| > sd {sd:.4f})")
    return Claim(name, "final global test accuracy (mean over seeds)", float(a.mean()), baseline=float(b.mean()),
                 margin=0.0, paper=paper,
                 note=f"{scale}. {ours_m} {_ms(a)} vs {base_m} {_ms(b)}; paired difference {d.mean():+.4f} "
                      f"(per seed {np.round(d, 4).tolist()}); {verdict}.{extra}")


def total_rates(results: list[dict], setting: str) -> dict:
    """``Σ_t q_t`` of every client under TA and IDP (from the rates the clients ran, first seed kept),
    with the clients' budgets, ``q_uni`` (IDP) and ``q_spe`` (TA's largest rate). Empty when a run is missing."""
    out: dict = {}
    for m in ("ta", "idp"):
        rs = sorted((r for r in results if r["setting"] == setting and r["method"] == m and not r.get("tuning_only")),
                    key=lambda r: r["seed"])
        if not rs or not rs[0].get("rates"):
            return {}
        r = rs[0]
        out["seed"] = r["seed"]
        out[m] = {"eps": [float(e) for e in r["epsilon_budget"]], "sum_q": [float(np.sum(q)) for q in r["rates"]],
                  "q_max": [float(np.max(q)) for q in r["rates"]]}
    return out


def _doubling_cost(sigma: float, q: float, steps: int, delta: float = 1e-5) -> float:
    """``RDP_α*(σ, 2q) / RDP_α*(σ, q)`` at the order ``α*`` that sets the ε of ``steps`` steps at ``q``."""
    from opacus.accountants.analysis.rdp import get_privacy_spent

    from .accounting import DEFAULT_ORDERS, rdp_per_step

    r1 = rdp_per_step(sigma, q)
    _, alpha = get_privacy_spent(orders=list(DEFAULT_ORDERS), rdp=steps * r1, delta=delta)
    i = list(DEFAULT_ORDERS).index(float(alpha))
    return float(rdp_per_step(sigma, min(2 * q, 1.0))[i] / r1[i])


def _why_ta_below_idp(sq: dict, sigma: float | None, steps: int) -> str:
    """Why TA trails IDP here, from the numbers: RDP per step grows ~q² (doubling q costs ~4x), so a
    saved budget buys a much smaller rise of the spending rate, and TA clients sample less in total."""
    if not sq or sigma is None:
        return ""
    groups = sorted(set(sq["idp"]["eps"]))
    parts = []
    for e in groups:
        it = [i for i, x in enumerate(sq["ta"]["eps"]) if x == e]
        ii = [i for i, x in enumerate(sq["idp"]["eps"]) if x == e]
        if not it or not ii:
            continue
        ratio = np.mean([sq["ta"]["sum_q"][i] for i in it]) / np.mean([sq["idp"]["sum_q"][i] for i in ii])
        q_uni = float(np.mean([sq["idp"]["q_max"][i] for i in ii]))
        spe = np.mean([sq["ta"]["q_max"][i] for i in it]) / q_uni
        parts.append(f"eps={e:g}: q_spe/q_uni={spe:.2f}, sum_q TA/IDP={ratio:.2f}")
    costs = [_doubling_cost(float(sigma), q, steps) for q in sorted(set(sq["idp"]["q_max"]))]
    return (f"Why TA trails IDP here: RDP per step grows about as q^2 (doubling q costs {min(costs):.2f}-"
            f"{max(costs):.2f}x at the order that sets eps), so the budget saved at rate rho*q_uni buys only a small "
            f"rise of the spending rate, and TA clients sample less over the run than IDP's: " + "; ".join(parts)
            + f" (mean sum_q TA {np.mean(sq['ta']['sum_q']):.3f} vs IDP {np.mean(sq['idp']['sum_q']):.3f}).")


def _order_claim(setting: str, results: list[dict], scale: str) -> Claim:
    """Save-first (the paper's order) vs spend-first: TA's very rates in reverse time order, so exactly
    the same ε; each tuned on the same grid. Adds the per-step-size comparison of the tuning runs."""
    c = _pair_claim(f"mechanism/{setting}/save_first_gt_spend_first", setting, "ta", "ta-spend-first", results,
                    "saving early and spending late beats the reverse order at the same privacy (Sec. 4, Algorithm 1)",
                    scale)
    seed0 = {}
    for r in results:
        if r["setting"] == setting and r["method"] in ("ta", "ta-spend-first"):
            seed0.setdefault((r["seed"], r["lr"]), {})[r["method"]] = r
    pairs = [v for v in seed0.values() if len(v) == 2]
    wins = sum(v["ta"]["final_accuracy"] > v["ta-spend-first"]["final_accuracy"] for v in pairs)
    d_eps = max((abs(a - b) for v in pairs for a, b in zip(v["ta"]["epsilon_spent"], v["ta-spend-first"]["epsilon_spent"])),
                default=math.nan)
    return replace(c, note=c.note + f" Over every (seed, step size) run with both orders: save-first ahead in {wins} of "
                               f"{len(pairs)}. Equal privacy: max |eps_spent(save-first) - eps_spent(spend-first)| over "
                               f"clients {d_eps:.2e}.")


def claims_from_results(results: list[dict], lrs: dict | None = None, grids: dict | None = None) -> list[Claim]:
    """Claims per setting (accuracy comparisons, the time-order mechanism at equal privacy, the total
    sampling rate TA and IDP clients get) and the privacy check.

    ``lrs``: setting -> method -> chosen step size; ``grids``: setting -> the (extended) grid searched."""
    lrs, grids = lrs or {}, grids or {}
    claims = []
    for setting in dict.fromkeys(r["setting"] for r in results):
        st = SETTINGS.get(setting, {})
        n_seeds = len(_by(results, setting, "ta"))
        chosen = ", ".join(f"{m} {lrs.get(setting, {}).get(m, '?')}" for m in TUNED)
        g = grids.get(setting)
        if g:
            edge = [m for m in TUNED if lrs.get(setting, {}).get(m) in (g[0], g[-1])]
            chosen += f" (grid {[float(x) for x in g]}" + (f"; still on the grid edge after extension: {edge})"
                                                            if edge else "; none on the edge)")
        scale = (f"{setting}: {st.get('num_clients')} clients, eps {st.get('epsilons')}, sigma={st.get('sigma')}, "
                 f"T={st.get('rounds')}, K={st.get('local_steps')}, {n_seeds} seed(s); step sizes chosen on "
                 f"validation: {chosen}")
        sq = total_rates(results, setting)
        why = _why_ta_below_idp(sq, st.get("sigma"), int(st.get("rounds", 1)) * int(st.get("local_steps", 1)))
        claims += [
            _pair_claim(f"accuracy/{setting}/idp_gt_dpfedavg", setting, "idp", "dpfedavg", results,
                        "IDP-FedAvg > DP-FedAvg on all 4 data sets", scale),
            _pair_claim(f"accuracy/{setting}/ta_ge_idp", setting, "ta", "idp", results,
                        "time-adaptive > IDP-FedAvg (Adult, FMNIST, MNIST, CIFAR10)", scale, " " + why),
            _pair_claim(f"accuracy/{setting}/strict_save_most_ge_reversed", setting, "ta", "ta-reverse", results,
                        "strict clients saving most beats the reverse (utility bound, Sec. 4)", scale),
            _order_claim(setting, results, scale),
        ]
        if sq:
            claims.append(Claim(
                f"mechanism/{setting}/ta_total_rate_ge_idp",
                "sum over rounds of a client's sampling rate, sum_t q_t (mean over clients; x K x m_n = expected "
                "records it trains on)", float(np.mean(sq["ta"]["sum_q"])), baseline=float(np.mean(sq["idp"]["sum_q"])),
                margin=0.0, paper="saving early and spending later moves budget in time without losing it "
                                  "(spend-as-you-go, Algorithm 1)",
                note=f"{scale}. Computed from the rates the clients ran (seed {sq['seed']}). {why}"))
    worst, over, util = -math.inf, -math.inf, math.inf
    for r in results:
        for e, b, p in zip(r["epsilon_spent"], r["epsilon_budget"], r["epsilon_planned"]):
            over = max(over, (e - b) / b)
            util = min(util, e / p)
            worst = max(worst, (e - b) / b, (0.99 * p - e) / b)
    claims.append(Claim(
        "privacy/no_overspend",
        "max over clients of max((eps_spent − eps_n)/eps_n, (0.99·eps_target − eps_spent)/eps_n)",
        worst, threshold=0.0, higher_is_better=False,
        paper="every client satisfies its (eps_n, delta) (RDP accounting, Sec. 3)",
        note=f"each client's own Opacus RDP accountant, all {len(results)} runs (tuning included): max relative "
             f"overspend {over:+.2e}, min eps_spent/eps_target {util:.6f}."))
    return claims


def _plot(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    settings = list(dict.fromkeys(r["setting"] for r in results))
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4), squeeze=False)
    for ax, s in zip(axes[0], settings):
        for m in METHODS:
            curves = [r["accuracy_per_round"] for r in results if r["setting"] == s and r["method"] == m
                      and not r.get("tuning_only")]
            if curves:
                c = np.array(curves)
                ax.plot(np.arange(1, c.shape[1] + 1), c.mean(0), label=m)
        ax.set_xlabel("round")
        ax.set_ylabel("global test accuracy")
        ax.set_title(s)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _reproduce_runs(out_dir: Path, cfg: dict, seeds, rounds, workers: int | Executor, resume: bool,
                    lrs: dict, grids: dict) -> list[dict]:
    """Tuning per setting, then every method at its chosen step size on the other seeds (fills
    ``lrs`` and ``grids``)."""
    results = []
    for st in cfg["settings"]:
        tuned, grids[st] = tune_step_sizes(out_dir, st, seeds, cfg["lr_grid"], rounds=rounds, workers=workers,
                                           resume=resume)
        lrs[st] = {}
        for m in TUNED:
            cand = [r for r in tuned if r["method"] == m]
            best = _best(cand)
            lrs[st][m] = best["lr"]
            for r in cand:
                r["tuning_only"] = r is not best
            results += cand
    rest = [replace(_spec(out_dir, st, m, s, lrs[st][m], rounds=rounds), resume=resume)
            for st in cfg["settings"] for m in METHODS for s in seeds if s != seeds[0]]
    return results + _run_all(rest, workers)


def reproduce(quick: bool, out_dir: Path, *, seeds=None, quiet: bool = False, resume: bool = False,
              workers: int | None = None, **overrides) -> list[Claim]:
    """Run the reproduction and return its claims.

    Args:
        quick: 2 seeds, grid (1, 2, 4); full: 3 seeds, grid (0.5, 1, 2, 4); either grid is extended while a
            method's best step size lies on its edge (:func:`tune_step_sizes`).
        out_dir: runs, ``summary.json``, ``perf.md``, ``accuracy.png``.
        seeds: seeds (default per scale); the step size is tuned on the first.
        resume: reuse finished federations under ``out_dir/runs``, continue unfinished ones.
        workers: federations run side by side (default 2; 1 = in this process).
        overrides: test hooks: ``settings``, ``lr_grid``, ``rounds``, ``workers``, ``perf`` (False: skip
            the timing benchmark).
    """
    out_dir = Path(out_dir)
    cfg = dict(QUICK if quick else FULL)
    cfg.update({k: v for k, v in overrides.items() if k in ("settings", "lr_grid")})
    seeds = tuple(seeds) if seeds else cfg["seeds"]
    rounds = overrides.get("rounds")
    workers = int(workers if workers is not None else overrides.get("workers", min(2, os.cpu_count() or 1)))
    perf = {}
    if overrides.get("perf", True):
        from .dp_sgd import per_sample_overhead

        for b in (64, 256):  # the expected batches training uses are ~25-400
            p = per_sample_overhead(batch=b)
            perf[f"batch{b}"] = p
    t0 = time.perf_counter()
    lrs: dict[str, dict[str, float]] = {}
    grids: dict[str, list[float]] = {}
    results = []
    pool = _pool(workers) if workers > 1 else None  # one pool for the whole run (imports paid once per worker)
    try:
        results = _reproduce_runs(out_dir, cfg, seeds, rounds, pool or workers, resume, lrs, grids)
    finally:
        if pool is not None:
            pool.shutdown()
    sim_s = time.perf_counter() - t0
    kept = [r for r in results if not r.get("tuning_only")]
    (out_dir / "summary.json").write_text(json.dumps({"perf": perf, "simulation_seconds": sim_s, "lr_chosen": lrs,
        "lr_grid": list(cfg["lr_grid"]), "lr_grid_final": grids, "runs": [
            {k: r[k] for k in ("setting", "method", "seed", "lr", "final_accuracy", "final_val_accuracy",
                               "epsilon_spent", "epsilon_budget", "accuracy_per_round", "noise")}
            | {"tuning_only": bool(r.get("tuning_only"))} for r in results]}, indent=2) + "\n")
    lines = [f"Opacus DP step / plain step (ghost clipping, Adult MLP, 1 thread), batch {b}: "
             f"{p['ratio']:.2f}x CPU ({p['dp_step_cpu_ms']:.2f} vs {p['plain_step_cpu_ms']:.2f} ms), "
             f"{p['ratio_wall']:.2f}x wall" for b, p in ((k[5:], v) for k, v in perf.items())]
    (out_dir / "perf.md").write_text("\n".join(lines + [f"{len(results)} runs in {sim_s:.1f} s wall"]) + "\n")
    _plot(kept, out_dir / "accuracy.png")
    return [replace(c) for c in claims_from_results(results, lrs, grids)]
