"""CPU-scale reproduction on UCI Adult: 12 clients in 3 privacy groups (ε = 1, 2, 4; δ = 1e-5).

Methods (one Flower simulation for all runs, so Ray starts once): DP-FedAvg (everyone at ε = 1),
IDP-FedAvg (individual ε, uniform in time), time-adaptive with the strict-clients-save-most
permutation of ρ = (0.25, 0.5, 1.0), the reversed permutation, and (full run only) ρ = 0.5 for all.
Quick: 1 seed. Full: 5 seeds.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from iclr25.core.results import Claim

from .config import FederationSpec, group_budgets

__all__ = ["reproduce", "reproduction_specs", "claims_from_results", "QUICK", "FULL"]

#: settings of the two scales; ``rounds``/``seeds`` shrink in tests through ``overrides``
QUICK = {"seeds": (0,), "methods": ("dpfedavg", "idp", "ta", "ta-reverse"), "rounds": 30}
FULL = {"seeds": (0, 1, 2, 3, 4), "methods": ("dpfedavg", "idp", "ta", "ta-reverse", "ta-uniform"), "rounds": 30}

EPSILONS = (1.0, 2.0, 4.0)
RHOS = (0.25, 0.5, 1.0)
NUM_CLIENTS = 12
LR = 2.0


def reproduction_specs(out_dir: Path, seeds, methods, rounds: int, dataset: str = "adult",
                       num_clients: int = NUM_CLIENTS, **kw) -> list[FederationSpec]:
    """The runs of the reproduction (one per seed × method)."""
    eps = group_budgets(EPSILONS, num_clients)
    specs = []
    for s in seeds:
        for m in methods:
            rhos = [0.5] * num_clients if m == "ta-uniform" else group_budgets(RHOS, num_clients)
            specs.append(FederationSpec(method=m, epsilons=eps, rhos=rhos, rounds=rounds, seed=s, dataset=dataset,
                                        lr=kw.get("lr", LR), out_dir=str(out_dir / "runs" / f"{m}-seed{s}"),
                                        run_key=f"{m}-seed{s}", progress=kw.get("progress", True),
                                        min_expected_batch=kw.get("min_expected_batch", 5.0)))
    return specs


def _acc(results, method) -> np.ndarray:
    rs = sorted((r for r in results if r["method"] == method), key=lambda r: r["seed"])
    return np.array([r["final_accuracy"] for r in rs])


def claims_from_results(results: list[dict], quick: bool, perf: dict | None = None) -> list[Claim]:
    """The issue's four claims from the runs' ``result.json`` dicts (``holds`` computed by Claim)."""
    perf = perf or {}
    dp, idp, ta, rev = (_acc(results, m) for m in ("dpfedavg", "idp", "ta", "ta-reverse"))
    n = len(ta)
    scale = (f"Adult, 12 clients (eps 1/2/4 x 4), sigma=1.5, C=1, K=4, T={results[0]['rounds']}, "
             f"lr={results[0]['lr']}, {n} seed(s)")

    def ms(a):
        return f"{a.mean():.4f} ± {a.std():.4f}" if len(a) > 1 else f"{a.mean():.4f}"

    claims = [
        Claim("accuracy/idp_gt_dpfedavg", "final global test accuracy (mean over seeds)", idp.mean(),
              baseline=dp.mean(), margin=1e-9, paper="IDP-FedAvg > DP-FedAvg on all 4 data sets",
              note=f"{scale}. IDP {ms(idp)} vs DP-FedAvg {ms(dp)}."),
    ]
    d = ta - idp
    if quick or n < 5:
        claims.append(Claim(
            "accuracy/ta_ge_idp", "final global test accuracy (mean over seeds)", ta.mean(), baseline=idp.mean(),
            margin=0.0, paper="time-adaptive > IDP-FedAvg (Adult among 4 data sets)",
            note=f"{scale}. TA {ms(ta)} vs IDP {ms(idp)}; paired differences {np.round(d, 4).tolist()}. "
                 "Quick mode has 1 seed: the difference is within seed noise (see the full run)."))
    else:
        claims.append(Claim(
            "accuracy/ta_ge_idp", "seeds (of 5) with TA − IDP accuracy > 0", float((d > 0).sum()), threshold=4.0,
            paper="time-adaptive > IDP-FedAvg (Adult among 4 data sets)",
            note=f"{scale}. Paired TA − IDP: mean {d.mean():+.4f} ± {d.std():.4f}, per seed {np.round(d, 4).tolist()}."))
    claims.append(Claim(
        "accuracy/strict_save_most_ge_reversed", "final global test accuracy (mean over seeds)", ta.mean(),
        baseline=rev.mean(), margin=0.0, paper="strict clients saving most beats the reverse (utility bound, Sec. 4)",
        note=f"{scale}. strict-save-most {ms(ta)} vs reversed {ms(rev)}; paired {np.round(ta - rev, 4).tolist()}."))
    # privacy: overspend (must be <= 0) and under-use (spent >= 99% of the planned target)
    worst, over, util = -math.inf, -math.inf, math.inf
    for r in results:
        for e, b, p in zip(r["epsilon_spent"], r["epsilon_budget"], r["epsilon_planned"]):
            over = max(over, (e - b) / b)
            util = min(util, e / p)
            worst = max(worst, (e - b) / b, (0.99 * p - e) / b)
    claims.append(Claim(
        "privacy/no_overspend", "max over clients of max((eps_spent − eps_n)/eps_n, (0.99·eps_target − eps_spent)/eps_n)",
        worst, threshold=0.0, higher_is_better=False,
        paper="every client satisfies its (eps_n, delta) (RDP accounting, Sec. 3)",
        note=f"Opacus RDP accountant on each client's booked history, all {len(results)} runs: max relative "
             f"overspend {over:+.2e}, min eps_spent/eps_target {util:.6f} (target = eps_n, or min eps for "
             "DP-FedAvg)."))
    return [_explain(c) for c in claims]


_WHY = {
    "accuracy/idp_gt_dpfedavg": " Does not hold here: all methods end near the same accuracy (the noise at eps >= 1 with "
    "~2,170 records per client is small next to the signal), so the gap is within seed noise.",
    "accuracy/ta_ge_idp": " Does not hold at this scale: the MLP converges within ~10 rounds and every method ends "
    "near ~85.5%; saving early (expected batch q*m ~ 14 for eps=1 clients at rho=0.25) slows the early rounds more "
    "than the larger late batches help. The paper's setting (and its exact rho/tau rule) could not be read [design].",
    "accuracy/strict_save_most_ge_reversed": " Does not hold at this scale: with a model that saturates early, the "
    "strict clients' extra early noise (they have the smallest batches) is not compensated later; the paper's "
    "clipping-bias argument needs a regime where late-round signal-to-noise limits accuracy.",
}


def _explain(c: Claim) -> Claim:
    if c.holds or c.name not in _WHY:
        return c
    return replace(c, note=c.note + _WHY[c.name])


def _perf_note(perf: dict) -> str:
    if not perf:
        return ""
    return (f"Perf: Opacus DP step / plain step = {perf.get('ratio', float('nan')):.2f}x in CPU time "
            f"({perf.get('dp_step_cpu_ms', float('nan')):.2f} vs {perf.get('plain_step_cpu_ms', float('nan')):.2f} ms), "
            f"{perf.get('ratio_wall', float('nan')):.2f}x in wall time "
            f"({perf.get('dp_step_ms', float('nan')):.2f} vs {perf.get('plain_step_ms', float('nan')):.2f} ms, "
            f"ghost clipping, batch 256, Adult MLP); Flower simulation {perf.get('rounds_per_second', float('nan')):.2f} "
            "rounds/s (12 clients, 2 Ray actors).")


def _plot(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in dict.fromkeys(r["method"] for r in results):
        curves = np.array([r["accuracy_per_round"] for r in results if r["method"] == m])
        ax.plot(np.arange(1, curves.shape[1] + 1), curves.mean(0), label=m)
    ax.set_xlabel("round")
    ax.set_ylabel("global test accuracy")
    ax.set_title("Adult, 12 clients, eps in {1, 2, 4}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def reproduce(quick: bool, out_dir: Path, **overrides) -> list[Claim]:
    """Run the reproduction and return the issue's claims.

    Args:
        quick: 1 seed (< 3 min target on 2 cores) instead of 5.
        out_dir: runs, ``summary.json``, ``accuracy.png``.
        overrides: test hooks: ``rounds``, ``seeds``, ``methods``, ``dataset``, ``num_clients``,
            ``min_expected_batch``, ``lr``, ``perf`` (False: skip the timing benchmark).
    """
    from .dp_sgd import per_sample_overhead
    from .flower_app import simulate

    out_dir = Path(out_dir)
    cfg = dict(QUICK if quick else FULL)
    cfg.update({k: v for k, v in overrides.items() if k in ("rounds", "seeds", "methods")})
    kw = {k: v for k, v in overrides.items() if k in ("dataset", "num_clients", "min_expected_batch", "lr")}
    specs = reproduction_specs(out_dir, cfg["seeds"], cfg["methods"], cfg["rounds"],
                               progress=not os.environ.get("ICLR25_QUIET"), **kw)
    perf = {}
    if overrides.get("perf", True):  # before Ray starts, so the timing is not disturbed by actors
        perf = per_sample_overhead()
    t0 = time.perf_counter()
    results = simulate(specs)
    sim_s = time.perf_counter() - t0
    for r, s in zip(results, specs):
        r["rounds"], r["lr"] = s.rounds, s.lr
    rps = [r["rounds_per_second"] for r in results if not math.isnan(r["rounds_per_second"])]
    perf["rounds_per_second"] = float(np.mean(rps)) if rps else float("nan")
    perf["simulation_seconds"] = sim_s
    (out_dir / "summary.json").write_text(json.dumps({"perf": perf, "runs": [
        {k: r[k] for k in ("method", "seed", "final_accuracy", "epsilon_spent", "epsilon_budget", "epsilon_planned",
                           "rounds_per_second", "accuracy_per_round")} for r in results]}, indent=2) + "\n")
    (out_dir / "perf.md").write_text(_perf_note(perf) + "\n")
    _plot(results, out_dir / "accuracy.png")
    return claims_from_results(results, quick, perf)


