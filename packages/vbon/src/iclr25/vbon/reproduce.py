"""CPU-scale reproduction of vBoN's claims (spec §4) on real movie-review data, as jobs of the core's runner
(:mod:`iclr25.core.runner`).

Jobs: ``kl_enumeration`` (exact KL of BoN, no model) and ``pipeline`` (reward, reference LM, CDF, BoN, the
vBoN/RLHF training runs, mechanism and timings; one job because its stages share one torch generator in sequence).
Job bodies: :mod:`iclr25.vbon.experiments`; claims: :mod:`iclr25.vbon.claims`; plots: :mod:`iclr25.vbon.plots`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .experiments import (
    FULL,
    QUICK,
    ReproSettings,
    bon_n_at_win_rate,
    matched_cost,
    ols_slope,
    policy_log_ratio_vs_log_cdf,
    rlhf_frontier,
)
from .runtime import LM_SIZES

__all__ = ["ReproSettings", "QUICK", "FULL", "reproduce", "jobs", "rlhf_frontier", "ols_slope",
           "policy_log_ratio_vs_log_cdf", "bon_n_at_win_rate", "matched_cost"]

_E = "iclr25.vbon.experiments:"  # job bodies, imported by name in the workers
KL_NS = (2, 4, 8, 16)


def _json(x) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(x).items()}


def jobs(s: ReproSettings, out: Path, progress: bool = False) -> list[Job]:
    """``kl_enumeration`` and ``pipeline`` (independent of each other). The reference LM's spec
    (``LM_SIZES[s.lm_size]``) is resolved here, so it is part of the job settings that ``--resume`` checks."""
    return [Job("kl_enumeration", _E + "kl_job", seed=s.seed, settings={"k": 1000, "ns": list(KL_NS)}),
            Job("pipeline", _E + "pipeline_job", seed=s.seed,
                settings={"repro": _json(s), "lm": _json(LM_SIZES[s.lm_size]), "out": str(out), "progress": progress})]


def reproduce(quick: bool, out_dir: Path, *, threads: int | None = None, quiet: bool = False,
              workers: int | None = None, resume: bool = False, settings: ReproSettings | None = None) -> list[Claim]:
    """Entry point of ``iclr25 reproduce vbon`` / ``iclr25-vbon reproduce`` (7 claims, see the README).

    Args:
        threads: torch CPU threads per job (default 1); quiet: no progress bars.
        workers: runner worker processes (default: the CPUs, at most the 2 jobs; 1: in this process).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (``records/``); changed settings are
            refused, naming them.
        settings: overrides ``quick`` (tests use tiny settings).
    """
    from iclr25.core.runner import run_jobs

    from .claims import claims_from_records
    from .plots import write_plots

    s = settings or (QUICK if quick else FULL)
    out = Path(out_dir).resolve()  # absolute: the job settings match whatever cwd resumes
    out.mkdir(parents=True, exist_ok=True)
    # a single in-process job shows the pipeline's own bars; worker processes share the runner's bar over jobs
    res = run_jobs(jobs(s, out, progress=not quiet and workers == 1), out, workers=workers, resume=resume,
                   threads=threads or 1, desc="reproduce[vbon]", quiet=quiet)
    claims, derived = claims_from_records(res.records, s)
    raw = dict(res.records["pipeline"])
    raw["kl_enumeration"] = res.records["kl_enumeration"]
    raw["mechanism"] = {**raw["mechanism"], **derived}
    raw["runner"] = res.summary()
    (out / "metrics.json").write_text(json.dumps(raw, indent=2, allow_nan=False))
    tp = raw["throughput"]
    write_plots(raw["runs"], {int(n): r for n, r in raw["bon"].items()}, tp, s.ns, s.betas, s.bounds, out)
    return claims
