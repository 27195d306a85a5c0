"""CPU-scale reproduction of AIHF's claims, as jobs of the core's runner (:mod:`iclr25.core.runner`).

Jobs (bodies in :mod:`iclr25.aihf.experiments`): the bandit's validation split (every arm x the same grid) then
its test seeds; the single loop's convergence; the gridworld; the tiny LM's ``pi_ref``, its validation split, then
one job per test seed. Claims and tables are a pure function of the records (:mod:`iclr25.aihf.claims`), plots in
:mod:`iclr25.aihf.plots`. Quick: bandit 5 test + 3 validation seeds (N_P in {10, 1000}, biased N_P = 1000),
gridworld 2 seeds, tiny LM 2 test + 2 validation seeds (32 pairs); full: 10 + 5 bandit seeds with
N_P in {10, 30, 100, 1000} and the w sweep, 4 gridworld seeds, 5 + 2 tiny-LM seeds at 32, 128 and 2048 pairs with
Self-Play-AIHF. The HH plumbing (formerly section D) is a test (``tests/test_aihf_repro.py``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import claims_from_records, tables

__all__ = ["reproduce", "settings", "jobs"]

log = logging.getLogger("iclr25.aihf")
_E = "iclr25.aihf.experiments:"  # job bodies, imported by name in the workers


def settings(quick: bool) -> dict:
    """Seeds and sizes of the quick and full runs (validation seeds never overlap the test seeds)."""
    if quick:
        return dict(bandit_seeds=[0, 1, 2, 3, 4], bandit_val_seeds=[100, 101, 102], bandit_np=[10, 1000],
                    biased_np=[1000], w_sweep=[], grid_seeds=[0, 1], grid_np=[5], lm_seeds=[0, 1], lm_val_seeds=[100, 101],
                    lm_np=[32], lm_methods=["dpo", "sft", "sft-dpo", "aihf"], converge_iters=2000)
    return dict(bandit_seeds=list(range(10)), bandit_val_seeds=list(range(100, 105)), bandit_np=[10, 30, 100, 1000],
                biased_np=[10, 100, 1000], w_sweep=[0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0], grid_seeds=[0, 1, 2, 3],
                grid_np=[5, 20, 100], lm_seeds=[0, 1, 2, 3, 4], lm_val_seeds=[100, 101], lm_np=[32, 128, 2048],
                lm_methods=["dpo", "sft", "sft-dpo", "aihf", "self-play"], converge_iters=20_000)


def jobs(st: dict) -> list[Job]:
    """The reproduction's jobs (see the module docstring)."""
    cells = [f"perfect/{n}" for n in st["bandit_np"]] + [f"biased/{n}" for n in st["biased_np"]]
    lm = {"n_prefs": st["lm_np"], "methods": st["lm_methods"]}
    return [
        Job("tinylm_ref", _E + "tinylm_ref_job", seed=0),
        Job("tinylm_tune", _E + "tinylm_tune_job", seed=0, settings={**lm, "val_seeds": st["lm_val_seeds"]},
            deps=("tinylm_ref",)),
        *(Job(f"tinylm_seed{s}", _E + "tinylm_seed_job", seed=s, settings=lm, deps=("tinylm_tune",))
          for s in st["lm_seeds"]),
        Job("bandit_tune", _E + "bandit_tune_job", seed=0, settings={"cells": cells, "val_seeds": st["bandit_val_seeds"]}),
        Job("bandit_test", _E + "bandit_test_job", seed=0, settings={"cells": cells, "seeds": st["bandit_seeds"],
                                                                 "w_sweep": st["w_sweep"]}, deps=("bandit_tune",)),
        Job("gridworld", _E + "gridworld_job", seed=0, settings={"seeds": st["grid_seeds"], "n_prefs": st["grid_np"]}),
        Job("converge", _E + "converge_job", seed=0, settings={"iters": st["converge_iters"]}),
    ]


def reproduce(quick: bool = True, out_dir: str | Path = "results/aihf", *, seeds=None, device: str = "auto",
              resume: bool = False, workers: int | None = None, quiet: bool | None = None) -> list[Claim]:
    """Run the CPU-scale reproduction and return its claims (see the module docstring).

    Args:
        quick: the quick run instead of the full one.
        out_dir: where ``records/``, ``details.json``, ``tables.md`` and the plots go.
        seeds: override the test seeds of every experiment (at least 2; validation seeds stay apart).
        device: accepted for the shared CLI; the CPU-scale tasks run on CPU with one torch thread.
        resume: keep the jobs an earlier run into ``out_dir`` finished (changed settings are refused).
        workers: worker processes (default: the CPUs, at most the number of jobs).
        quiet: no progress bar.

    Raises:
        ValueError: fewer than 2 seeds, or a seed among the validation seeds.
    """
    from iclr25.core.runner import run_jobs

    from .plots import write_plots

    st = settings(quick)
    if seeds is not None:
        seeds = [int(s) for s in seeds]
        if len(seeds) < 2:
            raise ValueError("the margin claims need at least 2 seeds (--seeds)")
        val = set(st["bandit_val_seeds"]) | set(st["lm_val_seeds"])
        if val & set(seeds):
            raise ValueError(f"--seeds {sorted(val & set(seeds))} are validation seeds; pick test seeds outside "
                             f"{sorted(val)}")
        st.update(bandit_seeds=seeds, grid_seeds=seeds, lm_seeds=seeds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = run_jobs(jobs(st), out, workers=workers, resume=resume, threads=1, run_settings={"settings": st},
                   desc="aihf reproduce", quiet=quiet)
    claims = claims_from_records(res.records, st)
    (out / "details.json").write_text(json.dumps({"settings": st, "runner": res.summary(), "records": res.records},
                                                 indent=1) + "\n")
    (out / "tables.md").write_text(tables(res.records, st))
    write_plots(res.records, st, out)
    return claims
