"""CPU-scale reproduction of SEAL's claims: a declaration of jobs for the core's runner and the claims.

One job per (task, seed) (:func:`iclr25.seal.experiment.task_seed_job`: every method on the same base, data
and seed), run by :func:`iclr25.core.runner.run_jobs` (spawned single-thread workers, one record per job
under ``out_dir/records/``, ``--resume``); the claims are a pure function of the records
(:func:`iclr25.seal.claims.claims_from_runs`), the figures come from :mod:`iclr25.seal.plots`. Claims:

* ``selection/auroc_unsafe``, ``selection/auroc_low_quality`` — AUROC of −ω (SEAL-SGD) vs random;
* ``selection/unsafe_share_lt_random`` — unsafe share of the kept subset, SEAL vs random;
* ``selection/seal_gt_loss_filter`` — low-quality AUROC, SEAL vs the base-loss filter (on the unsafe split the
  base loss already separates: AUROC ≈ 1 leaves nothing to win);
* ``mechanism/safe_loss_lt_random`` — f(θ) on D_safe after SFT, SEAL vs random;
* ``safety/margin_gt_random``, ``safety/seal_safeinstr_gt_safeinstr`` — the likelihood safety margin;
* ``utility/task_b_ge_standard`` — task-B exact match, SEAL vs standard SFT;
* ``winrate/seal_gt_random`` — programmatic-judge win rate against standard SFT, SEAL vs random;
* ``mechanism/margin_tracks_kept_unsafe`` — Spearman(kept unsafe samples, margin) over the equal-size subsets
  of a seed (mean over seeds);

and, in the full run, ``robustness/margin_gt_random_every_keep`` and the real-text ``real/…`` claims.
SEAL is SEAL-SGD (plain SGD on ω) at CPU scale; SEAL-Adam (the released code's optimiser) is reported beside
it in the notes and in ``details.md``. That every D_ft index gets a selector update in every epoch is a
property of the code, tested in ``tests/test_seal_kat.py`` (``details.md`` reports it).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import HEADLINE_KEEP, claims_from_runs, details_md, robustness_claim

__all__ = ["reproduce", "jobs", "claims_from_records", "QUICK", "FULL", "CLAIM_NAMES"]

log = logging.getLogger("iclr25.seal")

#: quick: every method but the oracle (a reference in the notes; within the 180 CPU-s budget), full: all of them
QUICK = dict(seeds=(0, 1), n_ft=450, keeps=(0.8,), data=("synthetic",), real_seeds=(), real_n_ft=900,
             methods=("standard", "random", "seal_sgd", "seal_adam", "loss_filter", "safeinstr", "seal_safeinstr"))
FULL = dict(seeds=(0, 1, 2, 3, 4), n_ft=900, keeps=(0.6, 0.67, 0.8), data=("synthetic", "real"), real_seeds=(0, 1),
            real_n_ft=900, methods=None)
CLAIM_NAMES = (
    "selection/auroc_unsafe",
    "selection/auroc_low_quality",
    "selection/unsafe_share_lt_random",
    "selection/seal_gt_loss_filter",
    "mechanism/safe_loss_lt_random",
    "safety/margin_gt_random",
    "safety/seal_safeinstr_gt_safeinstr",
    "utility/task_b_ge_standard",
    "winrate/seal_gt_random",
    "mechanism/margin_tracks_kept_unsafe",
)
REAL_SCALE = ("tiny GPT-2 (d=96, 96 positions, word vocabulary ≤ 5000), real-text variant: SafeInstr harmful "
              "instructions with safe answers, GSM8K benign, placeholder compliance")


def _job_name(task: str, n_ft: int, seed: int, keeps: Sequence[float]) -> str:
    return f"{task}_n{n_ft}_seed{seed}_keeps{'-'.join(f'{k:g}' for k in keeps)}"


def jobs(cfg: dict[str, Any], tasks: Sequence[str], syn_seeds: Sequence[int], real_seeds: Sequence[int]) -> list[Job]:
    """The reproduction's jobs, longest first (a real-text job costs ~2x a synthetic one)."""
    out = []
    if "real" in tasks:
        keeps = (HEADLINE_KEEP,)
        out += [Job(_job_name("real", cfg["real_n_ft"], s, keeps), "iclr25.seal.experiment:task_seed_job", seed=int(s),
                    settings={"task": "real", "n_ft": cfg["real_n_ft"], "keeps": list(keeps),
                              "methods": list(cfg["methods"]) if cfg["methods"] else None}) for s in real_seeds]
    if "synthetic" in tasks:
        keeps = tuple(cfg["keeps"])
        out += [Job(_job_name("synthetic", cfg["n_ft"], s, keeps), "iclr25.seal.experiment:task_seed_job", seed=int(s),
                    settings={"task": "synthetic", "n_ft": cfg["n_ft"], "keeps": list(keeps),
                              "methods": list(cfg["methods"]) if cfg["methods"] else None}) for s in syn_seeds]
    return out


def claims_from_records(records: dict[str, Any], keeps: Sequence[float], out: str | Path | None = None,
                        plots: bool = True) -> list[Claim]:
    """The claims from the jobs' records (no training); with ``out``, also ``details.json``, ``details.md`` and
    the plots there."""
    from iclr25.core.runner import none_to_nan

    # an undefined AUROC/Spearman was recorded as None: NaN again (a run's `keep` None means "all", kept)
    results = [{**r, "selection": none_to_nan(r["selection"])} for r in records.values()]
    syn = sorted((r for r in results if r["task"] == "synthetic"), key=lambda r: r["seed"])
    real = sorted((r for r in results if r["task"] == "real"), key=lambda r: r["seed"])
    claims: list[Claim] = []
    md = []
    if syn:
        claims += claims_from_runs(syn, plots=plots)
        if len(keeps) > 1:
            claims.append(robustness_claim(syn, keeps))
        md.append(details_md(syn, f"synthetic task, N = {syn[0]['n_ft']}"))
    if real:
        claims += claims_from_runs(real, prefix="real/", scale=REAL_SCALE, full_set=False, plots=False)
        md.append(details_md(real, f"real-text variant, N = {real[0]['n_ft']}"))
    if out is not None:
        out = Path(out)
        slim = [{**r, "runs": [{k: v for k, v in x.items() if k != "judge_scores"} for x in r["runs"]]}
                for r in syn + real]
        (out / "details.json").write_text(json.dumps(slim, indent=1, default=float) + "\n")
        (out / "details.md").write_text("# SEAL reproduction details\n\n" + "\n".join(md))
        if syn and plots:
            from .plots import plot_synthetic

            if not plot_synthetic(syn, out):
                claims = [_without_plot(c) for c in claims]
    for c in claims:
        if not math.isfinite(c.ours):
            log.warning("claim %s could not be measured", c.name)
    return claims


def _without_plot(c: Claim) -> Claim:
    from dataclasses import replace

    return replace(c, plot="")


def reproduce(quick: bool, out_dir: str | Path, *, seeds: Sequence[int] | None = None, data: str = "default",
              workers: int = 2, quiet: bool | None = None, resume: bool = False) -> list[Claim]:
    """Run the CPU-scale reproduction and return its claims (see the module docstring).

    Args:
        quick: 2 seeds, N = 450, keep 0.8, synthetic task (≈ 2 min on 2 cores); otherwise 5 seeds,
            N = 900, keep ∈ {0.6, 0.67, 0.8} plus the real-text variant (2 seeds, keep 0.8).
        out_dir: writes ``records/`` (one per (task, seed) job), ``details.json``, ``details.md`` and plots.
        seeds: override the seeds of the synthetic task (and of the real-text one).
        data: ``default`` | ``synthetic`` | ``real`` | ``all``.
        workers: worker processes (one torch thread each).
        quiet: no progress bar (``None``: the core's ``--quiet``).
        resume: keep the jobs an earlier run in ``out_dir`` finished (changed settings are refused).

    Raises:
        ValueError: an unknown ``data``; ``--resume`` with changed settings or a damaged record.
    """
    from iclr25.core.runner import run_jobs

    if data not in ("default", "synthetic", "real", "all"):
        raise ValueError(f"data={data!r} must be default, synthetic, real or all")
    cfg = dict(QUICK if quick else FULL)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = cfg["data"] if data == "default" else ({"all": ("synthetic", "real")}.get(data, (data,)))
    syn_seeds = tuple(seeds) if seeds is not None else cfg["seeds"]
    real_seeds = tuple(seeds) if seeds is not None else (cfg["real_seeds"] or (0, 1))
    if "real" in tasks:  # fail now, not after the synthetic jobs: the files exist and are large enough
        from .real_task import make_real_safety_task

        for s in real_seeds:
            make_real_safety_task(cfg["real_n_ft"], seed=s)
    res = run_jobs(jobs(cfg, tasks, syn_seeds, real_seeds), out, workers=workers, resume=resume,
                   desc="seal reproduce", quiet=quiet)
    log.info("reproduce: %d jobs, %.0f s wall, %.0f CPU-s", len(res.records), res.wall_seconds, res.cpu_seconds)
    (out / "runner.json").write_text(json.dumps(res.summary(), indent=1) + "\n")
    return claims_from_records(res.records, cfg["keeps"] if "synthetic" in tasks else (HEADLINE_KEEP,), out)
