"""CPU-scale reproduction: two settings, each method's step size tuned on the same grid on validation.

Settings (:data:`~.tuning.SETTINGS`):

- ``adult``: UCI Adult, 12 clients in 3 privacy groups (ε = 1, 2, 4; δ = 1e-5), MLP (64 hidden),
  ``T = 30``, ``K = 4``, ``σ = 2.2`` — the smallest σ (rounded up) at which every client meets the
  spec's guard ``q·m_n ≥ 20`` (σ = 1.5 gives the ε = 1, ρ = 0.25 clients ``q·m ≈ 12``).
- ``digits``: scikit-learn digits (10 classes), a linear model, 3 clients with ε = 2, 4, 6,
  ``T = 20``, ``K = 2``, ``σ = 3.0``: a setting where the model is still learning in the last
  rounds (the paper's mechanism needs late rounds to matter).

Methods: DP-FedAvg (everyone at min ε), IDP-FedAvg (own ε, uniform in time), time-adaptive with the
strict-clients-save-most permutation of ρ = (0.25, 0.5, 1.0) (``ta``), its reverse (``ta-reverse``)
and TA's very rates in the opposite time order (``ta-spend-first``: the same multiset of rates, so
exactly the same ε — the order effect at equal privacy). Step size: every method gets the same grid and
budget on seed 0, chosen on validation (:mod:`.tuning`). The other seeds run at the chosen step sizes.
Reported: test accuracy, mean ± sd over seeds.

The runs are jobs of the core's runner (:func:`jobs`: grid runs, one tuning job per setting, the other seeds,
the DP-step benchmark; worker processes, records under ``out/records``, ``--resume``); the claims are a pure
function of the records (:func:`claims_from_records`), the figures are drawn by :mod:`.plots`.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .tuning import MAX_EXTEND, METHODS, SETTINGS, TUNED, final_job, grid_job, perf_job, tune_job

__all__ = ["reproduce", "jobs", "claims_from_records", "claims_from_results", "total_rates", "SETTINGS", "QUICK",
           "FULL", "TUNED", "METHODS", "MAX_EXTEND"]

#: scales; tests shrink them through ``reproduce(..., **overrides)``
#: ``noise``: ``"seeded"`` — in this simulation every party is ours, so the clients' sampling and Gaussian noise
#: derive from the run's seed (``insecure_seed``: the same mechanism and accounting, replayable, so a rerun gives
#: the same numbers); ``"secure"`` draws them from the OS CSPRNG as a deployed client does (about 5x the CPU
#: of a DP step on the Adult MLP, see ``perf.md``)
#: quick: a coarser grid (factor 4) over the same range as the full one's, extended the same way (×2 / ÷2)
QUICK = {"seeds": (0, 1), "lr_grid": (0.5, 2.0, 8.0), "settings": ("adult", "digits"), "perf_batches": (64,),
         "noise": "seeded"}
FULL = {"seeds": (0, 1, 2), "lr_grid": (0.5, 1.0, 2.0, 4.0), "settings": ("digits", "adult"),
        "perf_batches": (64, 256), "noise": "seeded"}
#: where the paper states each claim (its table values were not retrievable: directions only)
PAPER_REFS = {"accuracy": "Table 1, direction only", "mechanism": "Sec. 4 (Algorithm 1), direction only",
              "privacy": "Sec. 3, direction only"}


def _ms(a) -> str:
    a = np.asarray(a, dtype=float)
    return f"{a.mean():.4f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.4f}"


def _by(results, setting, method, key="final_accuracy") -> np.ndarray:
    rs = sorted((r for r in results if r["setting"] == setting and r["method"] == method and not r.get("tuning_only")),
                key=lambda r: r["seed"])
    return np.array([r[key] for r in rs], dtype=float)


def _pair_claim(name, setting, ours_m, base_m, results, paper, scale, extra: str = "", plot: str = "") -> Claim:
    a, b = _by(results, setting, ours_m), _by(results, setting, base_m)
    d = a - b
    sd = float(d.std(ddof=1)) if len(d) > 1 else math.nan
    inside = not (len(d) > 1 and abs(d.mean()) > sd)
    verdict = (f"the gap {d.mean():+.4f} is INSIDE the seed spread (sd {sd:.4f}): not evidence either way" if inside else f"the gap exceeds the seed spread (|{d.mean():+.4f}| > sd {sd:.4f})")
    group = name.split("/")[0]
    return Claim(name, "final global test accuracy (mean over seeds)", float(a.mean()), baseline=float(b.mean()),
                 margin=0.0, paper=paper, kind="headline" if group == "accuracy" else "mechanism",
                 paper_ref=PAPER_REFS[group], spread=float(sd) if len(d) > 1 else None, n_seeds=max(1, len(d)),
                 plot=plot,
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


def _order_claim(setting: str, results: list[dict], scale: str, plot: str = "") -> Claim:
    """Save-first (the paper's order) vs spend-first: TA's very rates in reverse time order, so exactly
    the same ε; each tuned on the same grid. Adds the per-step-size comparison of the tuning runs."""
    c = _pair_claim(f"mechanism/{setting}/save_first_gt_spend_first", setting, "ta", "ta-spend-first", results,
                    "saving early and spending late beats the reverse order at the same privacy (Sec. 4, Algorithm 1)",
                    scale, plot=plot)
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


def claims_from_results(results: list[dict], lrs: dict | None = None, grids: dict | None = None,
                        plots: dict[str, str] | None = None) -> list[Claim]:
    """Claims per setting (accuracy comparisons, the time-order mechanism at equal privacy, the total
    sampling rate TA and IDP clients get) and the privacy check.

    ``lrs``: setting -> method -> chosen step size; ``grids``: setting -> the (extended) grid searched;
    ``plots``: figure names (:func:`~.plots.write_plots`) the claims point to."""
    lrs, grids, plots = lrs or {}, grids or {}, plots or {}
    acc_png, rate_png = plots.get("accuracy", ""), plots.get("rates", "")
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
                        "IDP-FedAvg > DP-FedAvg on all 4 data sets", scale, plot=acc_png),
            _pair_claim(f"accuracy/{setting}/ta_ge_idp", setting, "ta", "idp", results,
                        "time-adaptive > IDP-FedAvg (Adult, FMNIST, MNIST, CIFAR10)", scale, " " + why, plot=acc_png),
            _pair_claim(f"accuracy/{setting}/strict_save_most_ge_reversed", setting, "ta", "ta-reverse", results,
                        "strict clients saving most beats the reverse (utility bound, Sec. 4)", scale, plot=acc_png),
            _order_claim(setting, results, scale, plot=acc_png),
        ]
        if sq:
            claims.append(Claim(
                f"mechanism/{setting}/ta_total_rate_ge_idp",
                "sum over rounds of a client's sampling rate, sum_t q_t (mean over clients; x K x m_n = expected "
                "records it trains on)", float(np.mean(sq["ta"]["sum_q"])), baseline=float(np.mean(sq["idp"]["sum_q"])),
                margin=0.0, paper="saving early and spending later moves budget in time without losing it "
                                  "(spend-as-you-go, Algorithm 1)", kind="mechanism", paper_ref=PAPER_REFS["mechanism"],
                n_seeds=1, plot=rate_png,
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
        worst, threshold=0.0, higher_is_better=False, kind="sanity", paper_ref=PAPER_REFS["privacy"],
        n_seeds=max(1, len({r["seed"] for r in results})),
        paper="every client satisfies its (eps_n, delta) (RDP accounting, Sec. 3)",
        note=f"each client's own Opacus RDP accountant, all {len(results)} runs (tuning included): max relative "
             f"overspend {over:+.2e}, min eps_spent/eps_target {util:.6f}."))
    return claims


def jobs(cfg: dict[str, Any], out_dir: Path, seeds: tuple[int, ...], rounds: int | None) -> list[Job]:
    """The reproduction's jobs: per setting, one :func:`~.tuning.grid_job` per (method, step size) on
    ``seeds[0]``, a :func:`~.tuning.tune_job` after them, one :func:`~.tuning.final_job` per (method, other
    seed) after it; and the :func:`~.tuning.perf_job` benchmark (when ``cfg["perf_batches"]``)."""
    runs = str(Path(out_dir) / "runs")
    out: list[Job] = []
    for st in cfg["settings"]:
        common = {"runs_dir": runs, "setting": st, "rounds": rounds, "noise": cfg.get("noise", "seeded")}
        grid = [Job(f"grid_{st}_{m}_lr{lr:g}", grid_job, seed=int(seeds[0]), settings=dict(common, method=m, lr=float(lr)))
                for m in TUNED for lr in cfg["lr_grid"]]
        out += grid
        out.append(Job(f"tune_{st}", tune_job, seed=int(seeds[0]), deps=tuple(j.name for j in grid),
                       settings=dict(common, lr_grid=[float(x) for x in cfg["lr_grid"]])))
        out += [Job(f"final_{st}_{m}_seed{s}", final_job, seed=int(s), deps=(f"tune_{st}",), settings=dict(common, method=m))
                for m in METHODS for s in seeds[1:]]
    if cfg.get("perf_batches"):
        out.append(Job("perf", perf_job, settings={"batches": [int(b) for b in cfg["perf_batches"]]}))
    return out


def results_from_records(records: dict[str, Any], cfg: dict[str, Any], seeds: tuple[int, ...]
                         ) -> tuple[list[dict], dict[str, dict[str, float]], dict[str, list[float]]]:
    """``(results, lrs, grids)``: every run (tuning runs that lost marked ``tuning_only``), the chosen step sizes
    and the searched grids, from the jobs' records."""
    results, lrs, grids = [], {}, {}
    for st in cfg["settings"]:
        tune = records[f"tune_{st}"]
        lrs[st], grids[st] = dict(tune["lrs"]), list(tune["grid"])
        tuned = [dict(records[f"grid_{st}_{m}_lr{lr:g}"]) for m in TUNED for lr in cfg["lr_grid"]]
        tuned += [dict(r) for r in tune["extra_runs"]]
        for r in tuned:
            r["tuning_only"] = not (r["lr"] == lrs[st][r["method"]])
        results += tuned
        results += [dict(records[f"final_{st}_{m}_seed{s}"]) for m in METHODS for s in seeds[1:]]
    return results, lrs, grids


def claims_from_records(records: dict[str, Any], cfg: dict[str, Any], out_dir: Path, seeds: tuple[int, ...],
                        runner: dict[str, Any] | None = None) -> list[Claim]:
    """The claims (and ``summary.json``, ``perf.md``, the figures) from the jobs' records: no training."""
    from .plots import write_plots

    out_dir = Path(out_dir)
    results, lrs, grids = results_from_records(records, cfg, seeds)
    perf = records.get("perf", {})
    (out_dir / "summary.json").write_text(json.dumps({
        "perf": perf, "runner": runner, "lr_chosen": lrs, "lr_grid": list(cfg["lr_grid"]), "lr_grid_final": grids,
        "runs": [{k: r[k] for k in ("setting", "method", "seed", "lr", "final_accuracy", "final_val_accuracy",
                                    "epsilon_spent", "epsilon_budget", "accuracy_per_round", "noise")}
                 | {"tuning_only": bool(r.get("tuning_only"))} for r in results]}, indent=2) + "\n")
    lines = [f"Opacus DP step / plain step (ghost clipping, Adult MLP, 1 thread), batch {b}: "
             f"{p['ratio']:.2f}x CPU ({p['dp_step_cpu_ms']:.2f} vs {p['plain_step_cpu_ms']:.2f} ms), "
             f"{p['ratio_wall']:.2f}x wall" for b, p in ((k[5:], v) for k, v in perf.items())]
    wall = (runner or {}).get("wall_seconds")
    (out_dir / "perf.md").write_text("\n".join(lines + [f"{len(results)} runs"
                                                         + (f" in {wall:.1f} s wall" if wall else "")]) + "\n")
    kept = [r for r in results if not r.get("tuning_only")]
    plots = write_plots(kept, out_dir)
    return claims_from_results(results, lrs, grids, plots)


def reproduce(quick: bool, out_dir: Path, *, seeds=None, quiet: bool = False, resume: bool = False,
              workers: int | None = None, **overrides) -> list[Claim]:
    """Run the reproduction on the core's runner and return its claims.

    Args:
        quick: 2 seeds, grid (0.5, 2, 8); full: 3 seeds, grid (0.5, 1, 2, 4); either grid is extended while a
            method's best step size lies on its edge (:func:`~.tuning.tune_step_sizes`).
        out_dir: ``records/`` (one JSON per job), ``runs/`` (each federation's folder), ``summary.json``,
            ``perf.md``, ``accuracy.png`` / ``curves.png`` / ``rates.png`` (with the ``[plot]`` extra).
        seeds: seeds (default per scale); the step size is tuned on the first.
        resume: keep the jobs an interrupted run finished (refused if settings changed) and continue an
            unfinished federation from its last round checkpoint; a fresh run deletes ``runs/``.
        workers: worker processes (one thread each; default: from the cores; 1 = in this process).
        overrides: test hooks: ``settings``, ``lr_grid``, ``rounds``, ``noise`` (``"seeded"`` | ``"secure"``),
            ``perf`` (False: skip the benchmark).
    """
    from iclr25.core.runner import run_jobs

    out_dir = Path(out_dir)
    cfg = dict(QUICK if quick else FULL)
    cfg.update({k: v for k, v in overrides.items() if k in ("settings", "lr_grid", "noise")})
    if not overrides.get("perf", True):
        cfg["perf_batches"] = ()
    seeds = tuple(int(s) for s in (seeds if seeds else cfg["seeds"]))
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise ValueError(f"seeds must be distinct integers >= 0, got {list(seeds)}")
    rounds = overrides.get("rounds")
    if not resume:  # a fresh run: no federation folder of an earlier run is read back
        shutil.rmtree(out_dir / "runs", ignore_errors=True)
    res = run_jobs(jobs(cfg, out_dir, seeds, rounds), out_dir, workers=workers, resume=resume, threads=1,
                   desc="ta-dpfl reproduce", quiet=True if quiet else None)
    return claims_from_records(res.records, cfg, out_dir, seeds, res.summary())
