"""CPU-scale reproduction of CREAM's claims on the addition task: a declaration of jobs for the core's runner.

Per seed (one job, :func:`iclr25.cream.seed_run.seed_job`): M0 and M1 (cached), then T = 3 rounds of each method
from the same M1 (SRLM = C ≡ 1, CREAM-dyn, oracle-reward DPO; the full run adds CREAM-avg), with the same samples
seed and data order for every method and the fixed base M0 as reward reference, and the long DPO stage on the
round-1 pairs (SRLM vs CREAM-avg). Accuracy is greedy exact match on the 200 test prompts.

The jobs run under :func:`iclr25.core.runner.run_jobs` (spawned single-thread workers, one record per job under
``out_dir/records/``, ``--resume``); the claims are a pure function of the records
(:func:`iclr25.cream.claims.claims_from`); the figure comes from :mod:`iclr25.cream.plots`.

Quick: seeds 0 and 1, the main regime without CREAM-avg (in one-epoch stages CREAM-avg takes the same Adam
steps as SRLM: see :func:`iclr25.cream.claims.claims_from`). Full: seeds 0-4 with CREAM-avg, plus T = 4, the
harder regime (N = 8 at temperature 1.2) and the ``previous``-reference ablation as tables. Writes
``metrics.json`` (everything per seed and round), ``tables.md`` and ``metrics.png`` next to ``results.json``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import PLOT, claims_from, compare, summarize, table
from .plots import plot
from .repro_settings import ACC_MARGIN, FULL, FULL_REGIMES, LABEL, METHODS, QUICK, ReproSettings
from .seed_run import job_settings, run_seed

__all__ = ["ReproSettings", "QUICK", "FULL", "FULL_REGIMES", "reproduce", "run_pipeline", "run_seed", "compare",
           "claims_from", "claims_from_records", "jobs", "select_regimes", "ACC_MARGIN", "LABEL", "METHODS"]

log = logging.getLogger(__name__)


def _regime_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "main"


def job_name(regime: str, seed: int) -> str:
    """The record name of one (regime, seed): ``records/<regime-key>_seed<k>.json``."""
    return f"{_regime_key(regime)}_seed{int(seed)}"


def select_regimes(names: tuple[str, ...] | None) -> dict[str, dict[str, Any]]:
    """The ``FULL_REGIMES`` entries named (by name or folder name) in ``names``, in their order
    (``None``: all). Raises ``ValueError`` naming an unknown regime and the known ones."""
    if names is None:
        return dict(FULL_REGIMES)
    keys = {_regime_key(n): n for n in FULL_REGIMES}
    want = set()
    for n in names:
        k = n if n in FULL_REGIMES else keys.get(_regime_key(n))
        if k is None:
            raise ValueError(f"unknown regime {n!r}; known: {', '.join(sorted(keys))}")
        want.add(k)
    return {n: o for n, o in FULL_REGIMES.items() if n in want}


def _regime_order(settings: dict[str, ReproSettings], seeds: tuple[int, ...]) -> list[tuple[str, int]]:
    """The extra regimes' (regime, seed) in run order: all seeds of the first regime (the ``previous``-reference
    ablation), then the other regimes two seeds at a time in turn, so that a run stopped early has a spread (two
    seeds) for as many regimes as possible."""
    names = list(settings)
    if not names:
        return []
    order = [(names[0], s) for s in seeds]
    for i in range(0, len(seeds), 2):
        order += [(n, s) for n in names[1:] for s in seeds[i:i + 2]]
    return order


def jobs(base: ReproSettings, regimes: dict[str, ReproSettings], device: str) -> list[Job]:
    """One job per (regime, seed): the main regime's seeds first; a seed's extra regimes depend on its main job
    (which caches that seed's M0/M1)."""
    out = [Job(job_name("main", s), "iclr25.cream.seed_run:seed_job", seed=int(s), settings=job_settings(base, device))
           for s in base.seeds]
    out += [Job(job_name(r, s), "iclr25.cream.seed_run:seed_job", seed=int(s),
                settings=job_settings(regimes[r], device), deps=(job_name("main", s),))
            for r, s in _regime_order(regimes, base.seeds)]
    return out


def _write_outputs(out: Path, metrics: dict[str, Any], tables: list[str]) -> None:
    from iclr25.core.runinfo import to_jsonable

    (out / "metrics.json").write_text(json.dumps(to_jsonable(metrics), indent=1, allow_nan=False) + "\n")
    (out / "tables.md").write_text("\n\n".join(tables) + "\n")


def claims_from_records(records: dict[str, Any], base: ReproSettings, regimes: dict[str, ReproSettings],
                        out: str | Path, runner: dict[str, Any] | None = None) -> list[Claim]:
    """The main regime's claims from the jobs' records (no training), and ``metrics.json``, ``tables.md`` and the
    plots in ``out`` (the extra regimes: their own tables, claims in ``metrics.json`` and plots)."""
    out = Path(out)
    results = [records[job_name("main", s)] for s in base.seeds]
    summary = summarize(results, base)
    png = plot(summary, base, out / PLOT, "CREAM on the addition task (main regime)")
    claims, extra = claims_from(results, base, plot=PLOT if png else "")
    tables = [table(summary, base, f"main: T={base.iterations}, N={base.n_samples}, temperature "
                                   f"{base.temperature}, fixed base reference")]
    metrics: dict[str, Any] = {"settings": asdict(base), "summary": summary, **extra, "per_seed": results,
                               "pretrain_seconds": {"m0": [r["m0_seconds"] for r in results],
                                                    "m1": [r["m1_seconds"] for r in results]},
                               "regimes": {}, "runner": runner}
    for k, (name, s) in enumerate(regimes.items()):
        res = [records[job_name(name, seed)] for seed in base.seeds]
        summ = summarize(res, s)
        fig = f"metrics_regime{k + 1}.png"
        png = plot(summ, s, out / fig, f"CREAM on the addition task: {name}")
        cl, ex = claims_from(res, s, plot=fig if png else "")
        metrics["regimes"][name] = {"settings": asdict(s), "summary": summ, **ex,
                                    "claims": [c.to_dict() for c in cl], "per_seed": res}
        tables.append(table(summ, s, name))
    _write_outputs(out, metrics, tables)
    pre = float(np.mean(np.add(metrics["pretrain_seconds"]["m0"], metrics["pretrain_seconds"]["m1"])))
    log.info("cream reproduction: one-time M0/M1 pre-training %.1f s per seed (0 when cached)", pre)
    return claims


def run_pipeline(base: ReproSettings, out_dir: str | Path, *, device: str = "cpu", regimes: bool = False,
                 progress: bool | None = None, resume: bool = False,
                 only: tuple[str, ...] | None = None) -> list[Claim]:
    """:func:`reproduce` at explicit settings (``regimes``: also the full run's extra regimes, or those named in
    ``only``); ``base.workers`` worker processes; ``progress=False``: no progress bar."""
    from iclr25.core.runner import run_jobs

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = {name: replace(base, **over) for name, over in select_regimes(only).items()} if regimes else {}
    res = run_jobs(jobs(base, settings, device), out, workers=base.workers, resume=resume, desc="cream reproduce",
                   quiet=None if progress is None else not progress)
    log.info("cream reproduction: %d jobs, %.0f s wall, %.0f CPU-s", len(res.records), res.wall_seconds,
             res.cpu_seconds)
    return claims_from_records(res.records, base, settings, out, res.summary())


def reproduce(quick: bool = True, out_dir: str | Path = "results/cream", *, seeds: list[int] | None = None,
              device: str = "auto", resume: bool = False, regimes: tuple[str, ...] | None = None,
              workers: int = 2) -> list[Claim]:
    """Run the reproduction and return the claims (``metrics.json``, ``tables.md``, ``metrics.png`` and
    ``records/`` — one per finished (regime, seed) — written to ``out_dir``).

    Args:
        quick: seeds (0, 1) and the main regime only; else seeds 0-4 plus the extra regimes.
        out_dir: output folder.
        seeds: override the seeds.
        device: ``auto`` (CPU for this toy: it is faster than a GPU at this size), ``cpu`` or ``cuda``.
        resume: keep the (regime, seed) jobs an earlier run in ``out_dir`` finished (changed settings are refused).
        regimes: the full run's extra regimes to run (names of ``FULL_REGIMES`` or their folder
            names, e.g. ``previous-reference``, ``t-4``, ``hard-n-8-temperature-1-2``; ``None``: all;
            ``()``: none).
        workers: worker processes (one thread each; 1: in this process).

    Raises:
        ValueError: fewer than 2 seeds; an unknown regime, or regimes with ``quick``; ``workers`` < 1; with
            ``resume``, a damaged record or changed settings.
    """
    base = QUICK if quick else FULL
    if seeds is not None:
        if len(seeds) < 2:
            raise ValueError("the reproduction needs at least 2 seeds (claims report a spread across seeds)")
        base = replace(base, seeds=tuple(int(s) for s in seeds))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    base = replace(base, workers=workers)
    dev = "cpu" if device == "auto" else device
    if dev.startswith("cuda"):  # one GPU: the jobs run one after the other in this process
        base = replace(base, workers=1)
    if quick and regimes:
        raise ValueError("regimes belong to the full run; drop --quick or --regimes")
    return run_pipeline(base, out_dir, device=dev, regimes=not quick, resume=resume,
                        only=None if quick else regimes)
