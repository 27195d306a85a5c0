"""CPU-scale reproduction of the MGVGA claims (spec Sec. 4.3; issue 15's paired protocol), as jobs of the core's
runner (:mod:`iclr25.core.runner`).

For every pre-training seed, MGM, the GraphMAE-style input-masking baseline and MGVGA are pre-trained on the same
pools with the same steps (one job each), and a random-init encoder is drawn with the same seed; the probes job of
that seed then runs every probe on the same designs, recipes, folds and head seeds for the four encoders, so each
comparison is *paired* per seed. A claim's margin is the standard deviation of the per-seed paired differences.
Job bodies: :mod:`iclr25.mgvga.experiments`; claims: :mod:`iclr25.mgvga.claims`; plots: :mod:`iclr25.mgvga.plots`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, replace
from pathlib import Path

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .pools import ReproSettings, build_pools, text_encoder

__all__ = ["ReproSettings", "reproduce", "jobs", "build_pools", "text_encoder"]

log = logging.getLogger("iclr25.mgvga")
_E = "iclr25.mgvga.experiments:"  # job bodies, imported by name in the workers
_OBJECTIVES = ("mgm", "graphmae", "mgvga")


def _json(s: ReproSettings) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()}


def jobs(s: ReproSettings, out: Path, device: str, checkpoint_every: int) -> list[Job]:
    """``prep``; ``pretrain_<objective>_seed<s>`` for every objective and seed; ``probes_seed<s>`` after the
    three pre-trainings of its seed and ``prep``."""
    rs = _json(s)
    out_jobs = [Job("prep", _E + "prep_job", seed=0, settings={"repro": rs})]
    for seed in s.pretrain_seeds:
        cks = {obj: str(Path(out) / f"ckpt_{obj}_seed{seed}.pt") for obj in _OBJECTIVES}
        for obj in _OBJECTIVES:
            out_jobs.append(Job(f"pretrain_{obj}_seed{seed}", _E + "pretrain_job", seed=int(seed),
                                settings={"repro": rs, "objective": obj, "checkpoint": cks[obj], "device": device,
                                          "checkpoint_every": checkpoint_every}))
        out_jobs.append(Job(f"probes_seed{seed}", _E + "probes_job", seed=int(seed),
                            settings={"repro": rs, "checkpoints": cks},
                            deps=("prep", *(f"pretrain_{o}_seed{seed}" for o in _OBJECTIVES))))
    return out_jobs


def reproduce(quick: bool = True, out_dir: Path | str = "results/mgvga", *, seeds=None, device: str = "auto",
              quiet: bool | None = None, direction: str = "fanin", resume: bool = False, checkpoint_every: int = 100,
              workers: int | None = None, settings: ReproSettings | None = None) -> list[Claim]:
    """Run the paired CPU-scale protocol and return the claims (see the README for each one).

    Args:
        quick: :meth:`ReproSettings.quick` (default) or :meth:`ReproSettings.full`.
        out_dir: ``records/``, checkpoints, ``raw_metrics.json`` and the plots go here.
        seeds: pre-training seeds (≥ 2, distinct; default quick 42, 43 / full 42, 43, 44).
        device: where pre-training runs (``auto``: CUDA when available); probes run on the CPU.
        quiet: no progress bar.
        direction: edge orientation for every graph (official ``fanin``).
        resume: keep the jobs an interrupted run in ``out_dir`` finished (changed settings are refused); an
            unfinished pre-training continues from its last checkpoint. Without it the checkpoints of ``out_dir``
            are deleted first.
        checkpoint_every: steps between pre-training checkpoints (``>= 1``).
        workers: runner worker processes (default: the CPUs, at most the number of jobs; 1: in this process).
        settings: overrides ``quick`` (tests use tiny settings).

    Raises:
        ValueError: fewer than 2 or repeated seeds, bad settings, missing designs, ``resume`` with other settings.
    """
    from iclr25.core.runner import run_jobs
    from iclr25.core.seed import choose_device

    from .claims import claims_from_records
    from .plots import write_plots
    from .readouts import jsonable

    s = settings or (ReproSettings.quick() if quick else ReproSettings.full())
    if seeds is not None:
        s = replace(s, pretrain_seeds=tuple(int(x) for x in seeds))
    if direction != s.direction:
        s = replace(s, direction=direction)
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every} must be >= 1")
    from .text import MiniLMEncoder

    MiniLMEncoder.check_available()  # the [text] extra: fail here, in one line, not in a worker
    dev = str(choose_device(device))
    out = Path(out_dir).resolve()  # absolute: the job settings (checkpoint paths) match whatever cwd resumes
    out.mkdir(parents=True, exist_ok=True)
    if not resume:  # a fresh run never continues a stale checkpoint
        for f in out.glob("ckpt_*"):
            f.unlink()
    res = run_jobs(jobs(s, out, dev, checkpoint_every), out, workers=workers, resume=resume, threads=s.threads,
                   desc="reproduce[mgvga]", quiet=quiet)
    claims, stats = claims_from_records(res.records, s)
    runs = [res.records[f"probes_seed{seed}"] for seed in s.pretrain_seeds]
    hist = {f"{obj}/{seed}": res.records[f"pretrain_{obj}_seed{seed}"]["history"]
            for seed in s.pretrain_seeds for obj in _OBJECTIVES}
    prep = res.records["prep"]
    extra = {"settings": asdict(s), "device": dev, "pool": prep["pool"], "stats": stats,
             "qor_fixed": prep["qor_fixed"], "gate_hand_features": prep["gate_hand"],
             "gate_pairs": {f"{d['design']}/r{d['variant']}": d["counts"] for d in prep["gate_pairs"]}, "runs": runs,
             "pretrain_last": {k: v[-1] for k, v in hist.items() if v}, "runner": res.summary()}
    (out / "raw_metrics.json").write_text(json.dumps(jsonable(extra), indent=1, allow_nan=False))
    write_plots(runs, hist, out)
    return claims
