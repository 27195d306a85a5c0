"""CPU-scale reproduction of the sharpening paper's claims on the trap-arithmetic task: a declaration of
jobs for the core's runner (:mod:`iclr25.core.runner`) and the claims from their records.

``reproduce(quick, out_dir, *, seeds=None, device="auto", settings=None, resume=False, workers=None)`` ->
list of :class:`iclr25.core.Claim`.

Jobs (:func:`jobs`): one ``pretrain`` job per base (:mod:`.pretrain`; the sweep's warm-started bases depend on
their parent), one ``seed<s>`` job per seed (:mod:`.trap_seed`: BoN, SFT-Sharpening, Eq. (8)) depending on its
base, and in the full preset ``coverage`` (:mod:`.coverage`), ``xpo`` (:mod:`.xpo`) and ``realtext``
(:mod:`.realtext`). Records land in ``OUT/records/``; the claims are a pure function of them
(:func:`~iclr25.sharpening.claims.claims_from_records`); the figures come from :mod:`.plots`.

Quick: the shipped converged base (:mod:`.shipped`) and 2 seeds. Full: 3 seeds end to end (a base per seed
trained to convergence), N up to 32, the coverage sweep ``p_c in {0.4, 0.2, 0.1}``, XPO vs offline Eq. (8)
at ``p_c = 0.1`` with 40 distractors, and the real-text likelihood-lift check.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

from iclr25.core import Claim
from iclr25.core.runner import Job

from .claims import claims_from_records
from .pretrain import base_job_name, base_plan, pretrain_job
from .settings import ReproSettings

__all__ = ["ReproSettings", "reproduce", "jobs"]

log = logging.getLogger(__name__)
SLUG = "sharpening"


def jobs(st: ReproSettings, device: str = "cpu") -> list[Job]:
    """The run's jobs: bases (parents first), then the seeds, the sweep, XPO and the real-text check."""
    from .coverage import coverage_job
    from .realtext import realtext_job
    from .trap_seed import seed_job
    from .xpo import XPO_TASK, xpo_job

    sd = st.to_dict()
    out = [Job(b["name"], pretrain_job, seed=b["seed"],
               settings={"st": sd, "p_correct": b["p_correct"], "n_distractors": b["n_distractors"],
                         "parent": b["parent"]}, deps=(b["parent"],) if b["parent"] else ())
           for b in base_plan(st)]
    for s in st.seeds:
        bname = base_job_name(0.4, st.base_seed(s))
        out.append(Job(f"seed{s}", seed_job, seed=s, settings={"st": sd, "base": bname, "device": device},
                       deps=(bname,)))
    if st.coverage:
        names = {f"{pc:g}": base_job_name(pc, 0) for pc, _ in st.coverage_tasks}
        out.append(Job("coverage", coverage_job, seed=0, settings={"st": sd, "bases": names, "device": device},
                       deps=tuple(sorted(set(names.values())))))
    if st.xpo:
        bname = base_job_name(XPO_TASK.p_correct, 0)
        out.append(Job("xpo", xpo_job, seed=0, settings={"st": sd, "base": bname, "device": device}, deps=(bname,)))
    if st.realtext:
        out.append(Job("realtext", realtext_job, seed=0, settings={"seeds": list(st.seeds), "device": device}))
    return out


def reproduce(quick: bool, out_dir: str | Path, *, seeds: tuple[int, ...] | None = None, device: str = "auto",
              settings: ReproSettings | None = None, resume: bool = False, workers: int | None = None,
              quiet: bool | None = None) -> list[Claim]:
    """Run the reproduction's jobs and return its claims (see the module docstring and the package README).

    Args:
        quick: the quick preset (shipped base, 2 seeds) instead of the full CPU run.
        out_dir: ``records/`` (one JSON per job), ``metrics.json`` (every record, the settings, CPU-seconds)
            and, with matplotlib, the figures of :mod:`.plots`.
        seeds: override the preset's seeds.
        device: ``auto|cpu|cuda|...`` for the experiment jobs.
        settings: override the preset entirely (tests use tiny settings).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused).
        workers: worker processes (default: the CPUs, at most the jobs); 1 runs the jobs in this process.
        quiet: no progress bar.
    """
    from iclr25.core.runner import run_jobs
    from iclr25.core.seed import choose_device

    from .plots import write_plots

    st = settings or ReproSettings.preset(quick)
    if seeds is not None:
        st = replace(st, seeds=tuple(int(s) for s in seeds))
    dev = choose_device(device)
    if st.base_source == "shipped":
        from .shipped import check_shipped_base

        check_shipped_base()             # a damaged install: one line here, not a worker's traceback
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = run_jobs(jobs(st, dev), out, workers=workers, resume=resume, threads=1, desc="sharpening reproduce",
                   quiet=quiet)
    claims = claims_from_records(res.records, st)
    bases = [r for k, r in res.records.items() if k.startswith("base_")]
    metrics = {"settings": st.to_dict(), "device": dev, "records": res.records, "runner": res.summary(),
               "cpu_seconds": res.cpu_seconds,
               "one_time_pretraining_cpu_s": sum(b["pretrain_cpu_seconds"] or 0.0 for b in bases
                                                 if not (b["cached"] or b["shipped"]))}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    runs = [res.records[f"seed{s}"] for s in st.seeds]
    from .claimkit import numkeys

    write_plots(numkeys(runs), st, out)
    log.info("sharpening reproduce: %d jobs (%d reused), %.1f CPU-s (parent + workers)", len(res.records),
             len(res.reused), res.cpu_seconds)
    return claims
