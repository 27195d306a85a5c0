"""The reproduction's experiments: the two settings, one federation per (setting, method, step size, seed),
and the step-size tuning on validation (every method on the same grid, extended alike).

Runner jobs (:mod:`iclr25.core.runner`; declared by :mod:`.reproduce`):

- :func:`grid_job` — one tuning run: a method at one step size of the initial grid, on the first seed;
- :func:`tune_job` — after every grid run of a setting: while the best step size of *any* method lies on an
  edge of the grid, extend the grid for *all* methods (double the largest / halve the smallest value, at most
  :data:`MAX_EXTEND` times per edge; those runs happen inside this job), then pick each method's step size by
  the best final *validation* accuracy (server-side split, never trained on; ties: the smaller step size);
- :func:`final_job` — a method on another seed at the step size :func:`tune_job` chose;
- :func:`perf_job` — the Opacus DP-step overhead benchmark.

Runs go through :func:`~iclr25.ta_dpfl.federation.run_inprocess` (the Flower apps' client and server logic,
without Ray). A run folder ``<runs>/<key>`` with a finished ``result.json`` is read back; one with a round
checkpoint continues from it (the reproduction deletes ``runs/`` on a fresh run, so only ``--resume`` finds
either).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .config import ADULT_SIGMA, FederationSpec, group_budgets

__all__ = ["SETTINGS", "RHOS", "TUNED", "METHODS", "MAX_EXTEND", "federation_spec", "reproduction_specs",
           "run_federation", "tune_step_sizes", "best_run", "grid_job", "tune_job", "final_job", "perf_job",
           "RECORD_KEYS"]

RHOS = (0.25, 0.5, 1.0)
SETTINGS = {
    "adult": {"dataset": "adult", "epsilons": (1.0, 2.0, 4.0), "num_clients": 12, "sigma": ADULT_SIGMA, "rounds": 30,
              "local_steps": 4, "hidden": 64},
    "digits": {"dataset": "digits", "epsilons": (2.0, 4.0, 6.0), "num_clients": 3, "sigma": 3.0, "rounds": 20,
               "local_steps": 2, "hidden": 0},
}
TUNED = ("dpfedavg", "idp", "ta", "ta-reverse", "ta-spend-first")
#: how often the step-size grid may be extended at each edge (see :func:`tune_step_sizes`)
MAX_EXTEND = 3
METHODS = TUNED
#: what a run's record keeps of ``result.json`` (and ``lr``, ``setting``, ``transition_round``)
RECORD_KEYS = ("method", "seed", "final_accuracy", "final_val_accuracy", "accuracy_per_round", "epsilon_spent",
               "epsilon_budget", "epsilon_planned", "rates", "noise", "rounds")


def federation_spec(runs_dir: str | Path, setting: str, method: str, seed: int, lr: float, *,
                    rounds: int | None = None, tag: str = "", seeded_noise: bool = False) -> FederationSpec:
    """The :class:`FederationSpec` of one reproduction run (its folder: ``runs_dir/<setting>-<method>-lr<lr>-seed<s>``).

    ``seeded_noise``: the clients' sampling and noise derive from the seed (``insecure_seed``: replayable, for a
    simulation where every party is ours; the same Gaussian mechanism and accounting) instead of the OS CSPRNG."""
    st = SETTINGS[setting]
    n = st["num_clients"]
    key = f"{setting}-{method}-lr{lr:g}-seed{seed}{tag}"
    return FederationSpec(method=method, epsilons=group_budgets(st["epsilons"], n), rhos=group_budgets(RHOS, n),
                          sigma=st["sigma"], rounds=rounds or st["rounds"], local_steps=st["local_steps"], lr=lr,
                          hidden=st["hidden"], dataset=st["dataset"], seed=seed, min_expected_batch=20.0,
                          out_dir=str(Path(runs_dir) / key), run_key=key, progress=False, insecure_seed=seeded_noise)


def reproduction_specs(runs_dir: str | Path, setting: str, seeds: Sequence[int], lr_grid: Sequence[float], *,
                       rounds: int | None = None, seeded_noise: bool = False) -> list[FederationSpec]:
    """The tuning runs: every tuned method × every step size of the grid, on ``seeds[0]``."""
    return [federation_spec(runs_dir, setting, m, seeds[0], lr, rounds=rounds, seeded_noise=seeded_noise)
            for m in TUNED for lr in lr_grid]


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


def run_federation(spec: FederationSpec) -> dict[str, Any]:
    """One federation, in this process: a finished one is read back, an unfinished one continues from its last
    round checkpoint, otherwise the folder is cleared and the run starts (the simulated nodes' accountants live
    there, and a node refuses rounds it has already booked). Returns the record (:data:`RECORD_KEYS`)."""
    from iclr25.core.runner import nan_to_none

    from .federation import latest_checkpoint, run_inprocess

    out = Path(spec.out_dir)
    r = _finished(spec)
    if r is None:
        if latest_checkpoint(out) is None:
            shutil.rmtree(out, ignore_errors=True)
            r = run_inprocess(replace(spec, resume=False))
        else:
            r = run_inprocess(replace(spec, resume=True))
    rec = {k: r.get(k) for k in RECORD_KEYS}
    rec.update(lr=spec.lr, setting=spec.run_key.split("-")[0], transition_round=spec.rounds // 2)
    return nan_to_none(rec)


def _run_all(specs: Sequence[FederationSpec]) -> list[dict[str, Any]]:
    return [run_federation(s) for s in specs]


def best_run(cand: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run with the best final validation accuracy (ties: the smaller step size)."""
    return max(cand, key=lambda r: (r["final_val_accuracy"], -r["lr"]))


def tune_step_sizes(runs_dir: str | Path, setting: str, seeds: Sequence[int], lr_grid: Sequence[float], *,
                    rounds: int | None = None, tuned: list[dict[str, Any]] | None = None,
                    max_extend: int = MAX_EXTEND, seeded_noise: bool = False,
                    run: Callable[[Sequence[FederationSpec]], list[dict[str, Any]]] | None = None,
                    ) -> tuple[list[dict[str, Any]], list[float]]:
    """Every tuned method at every step size of the grid on ``seeds[0]`` (``tuned``: those runs, when already
    done); while the best step size of *any* method lies on an edge of the grid, extend the grid for *all*
    methods (double the largest / halve the smallest value), at most ``max_extend`` times per edge.

    Returns:
        ``(tuning results, final grid)`` (sorted): the results hold ``tuned`` followed by the extension's runs.
    """
    run = run or _run_all
    grid = sorted(float(x) for x in lr_grid)
    tuned = list(tuned) if tuned is not None else run(reproduction_specs(runs_dir, setting, seeds, grid, rounds=rounds,
                                                                         seeded_noise=seeded_noise))
    ext = {"up": 0, "down": 0}
    while True:
        best = {m: best_run([r for r in tuned if r["method"] == m])["lr"] for m in TUNED}
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
        tuned += run([federation_spec(runs_dir, setting, m, seeds[0], lr, rounds=rounds, seeded_noise=seeded_noise)
                      for m in TUNED for lr in add])


def grid_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: one tuning run (``settings``: ``runs_dir``, ``setting``, ``method``, ``lr``, ``rounds``,
    ``noise``: ``"seeded"`` or ``"secure"``)."""
    return run_federation(federation_spec(settings["runs_dir"], settings["setting"], settings["method"], seed,
                                          settings["lr"], rounds=settings["rounds"],
                                          seeded_noise=settings.get("noise") == "seeded"))


def tune_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: extend the grid from the grid runs in ``deps`` (:func:`tune_step_sizes`) and choose each
    method's step size. Returns ``{"lrs": {method: lr}, "grid": [...], "extra_runs": [records]}``."""
    base = list(deps.values())
    tuned, grid = tune_step_sizes(settings["runs_dir"], settings["setting"], (seed,), settings["lr_grid"],
                                  rounds=settings["rounds"], tuned=base,
                                  seeded_noise=settings.get("noise") == "seeded")
    lrs = {m: best_run([r for r in tuned if r["method"] == m])["lr"] for m in TUNED}
    return {"lrs": lrs, "grid": grid, "extra_runs": tuned[len(base):]}


def final_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: ``settings["method"]`` on seed ``seed`` at the step size the setting's tuning chose."""
    (tune,) = deps.values()
    lr = tune["lrs"][settings["method"]]
    return run_federation(federation_spec(settings["runs_dir"], settings["setting"], settings["method"], seed, lr,
                                          rounds=settings["rounds"], seeded_noise=settings.get("noise") == "seeded"))


def perf_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: Opacus DP step vs plain step (:func:`~.dp_sgd.per_sample_overhead`) per batch size."""
    from .dp_sgd import per_sample_overhead

    return {f"batch{b}": per_sample_overhead(batch=int(b)) for b in settings["batches"]}
