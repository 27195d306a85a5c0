"""CPU-scale reproduction of the FRS claims (``iclr25-frs reproduce [--quick]``).

Setting (spec "CPU-scale reproduction"): a tiny encoder stands in for the PLM; the attacker
"pre-trains" it on SST-2 phrases of which 10 % carry the trigger ``cf`` relabelled positive
(BadNets stand-in for a pre-training backdoor); the defender fine-tunes it on other, clean phrases
with BMPS (σ = 0.01 on the top layer + head, clip 1.0), and — for the −BMPS ablation — with σ = 0
from the same backdoored weights and data order. All arms are evaluated on the same clean test
texts and the same triggered negatives (one ``cf`` at a known random position), with the same
models, and repeated over seeds of the smoothing randomness (BMPS copies, MCTS mutations, text
randomisation). A model trained the same way on the unpoisoned phrases is the backdoor baseline.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from iclr25.core.results import Claim
from iclr25.core.runner import Job

from .claims import ARM_ORDER, CLAIM_NAMES, aggregate, arm_warnings, arms_table, build_claims, class_table

__all__ = ["reproduce", "jobs", "claims_from_records", "QUICK", "FULL", "CLAIM_NAMES", "ARM_ORDER"]

log = logging.getLogger(__name__)
_E = "iclr25.frs.experiments:"  # job bodies, imported by name in the workers


#: quick preset (issue #26): ~1.5 CPU-minutes
QUICK = dict(
    data="sst2", trigger="cf", target=1, poison_rate=0.1,
    n_attack=2000, attack_epochs=3, attack_lr=1e-3, attack_batch=16, attack_mask_rate=0.15,
    d_model=32, n_heads=4, d_ff=64, n_layers=2, min_count=2,
    n_finetune=2000, ft_epochs=1, ft_lr=1e-3, ft_batch=32, sigma=0.01, top_layers=1, clip_norm=1.0,
    n_clean=150, n_triggered=100, k=4, n_random=2, iterations=16, max_span=3, c=0.5,
    w_mid=0.3, w_high=0.9, alpha=0.05, n_empirical=50, empirical_samples=20, seeds=(0, 1),
)
#: full CPU preset (spec settings): 6,000 phrases, 3 epochs, d = 64, 872 + 428 texts, K = 8, I = 32, 3 seeds
FULL = dict(QUICK, n_attack=6000, d_model=64, d_ff=128, n_clean=872, n_triggered=428, k=8, iterations=32,
            n_empirical=50, seeds=(0, 1, 2))


def jobs(p: dict, seeds: list[int], out: Path, device: str) -> list[Job]:
    """``setup`` (the four models, trained once; seed-independent numbers), then ``seed<s>`` for every
    smoothing seed (every arm, empirical radii, hit-rate sensitivity), each after ``setup``."""
    preset = _jsonable(p)
    base = {"preset": preset, "out": str(out), "device": device}
    return [Job("setup", _E + "setup_job", seed=0, settings=base),
            *(Job(f"seed{s}", _E + "seed_job", seed=int(s), settings=base, deps=("setup",)) for s in seeds)]


def reproduce(quick: bool, out_dir: Path, *, seeds: list[int] | None = None, device: str = "auto",
              data: str = "sst2", resume: bool = False, workers: int | None = None, threads: int | None = None,
              quiet: bool | None = None) -> list[Claim]:
    """Run the reproduction as jobs of :mod:`iclr25.core.runner`; return the claims of :data:`CLAIM_NAMES`.

    Args:
        quick: :data:`QUICK` (2 seeds) instead of :data:`FULL` (3 seeds).
        out_dir: writes ``records/`` (one JSON record per finished job: ``setup``, ``seed<s>``),
            ``metrics.json`` (all numbers per arm and seed), ``arms.md`` (mean ± sd table),
            ``texts/seed<s>_<arm>.jsonl`` (per-text certificates) and the models under ``models/``.
        seeds: seeds of the smoothing randomness (default: the preset's); the models are the same.
        device: ``auto``, ``cpu``, ``cuda``...
        data: ``sst2`` (the spec's setting) or ``agnews`` (4 classes; target class ``Sports``).
        resume: keep the jobs an interrupted run into ``out_dir`` finished (``records/``: the models of
            ``setup`` and every finished seed); changed settings are refused, naming them. The smoothing
            randomness of each seed depends only on its seed, so a resumed run gives the numbers an
            uninterrupted one would.
        workers: runner worker processes (default: the CPUs, at most the number of jobs; 1: in this process).
        threads: torch threads of each job (default ``OMP_NUM_THREADS``, else 1).
        quiet: no progress bar.

    Raises:
        ValueError: ``resume`` with records of other settings (naming each changed one).
    """
    from iclr25.core.runner import run_jobs
    from iclr25.core.seed import choose_device

    p = dict(QUICK if quick else FULL, data=data)
    seeds = list(seeds) if seeds is not None else list(p["seeds"])
    dev = str(choose_device(device))
    out = Path(out_dir).resolve()  # absolute: the job settings match whatever cwd resumes
    out.mkdir(parents=True, exist_ok=True)
    if threads is None:
        threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    res = run_jobs(jobs(p, seeds, out, dev), out, workers=workers, resume=resume, threads=threads,
                   desc="frs reproduce", quiet=quiet)
    return claims_from_records(res.records, p, quick, seeds, dev, out, res.summary(), threads)


def claims_from_records(records: dict, p: dict, quick: bool, seeds: list[int], device: str, out: Path,
                        runner: dict, threads: int) -> list[Claim]:
    """Write ``metrics.json``, ``arms.md`` and the plots from the jobs' records; return the claims (a pure
    function of the records, like :func:`iclr25.frs.claims.claims_from_metrics` of ``metrics.json``)."""
    from iclr25.core.runner import none_to_nan

    setup = records["setup"]
    per_seed = [none_to_nan(records[f"seed{s}"]["result"]) for s in seeds]
    agg = aggregate(per_seed)
    warns = sorted({w for r in per_seed for arm in ARM_ORDER for w in r[arm]["warnings"]})
    for w in warns:  # once each (the seed jobs keep them quiet: they came once per arm and seed)
        arms = [a for a in ARM_ORDER if any(w in r[a]["warnings"] for r in per_seed)]
        log.warning("certifier warning (arm(s) %s; also in metrics.json and the claim notes): %s", ", ".join(arms), w)
    stage_seconds = setup["train_seconds"] + sum(
        r[a].get(k, 0.0) for r in per_seed for a in ARM_ORDER for k in ("seconds", "empirical_seconds"))
    names = list(setup["label_names"])
    meta = {"preset": _jsonable(p), "quick": quick, "seeds": seeds, "device": device,
            "seconds": runner["wall_seconds"], "resumed": bool(runner["reused"]),
            "stage_seconds_all_invocations": stage_seconds, "max_len": setup["max_len"],
            "vocab_size": setup["vocab_size"], "poisoned": setup["poisoned"],
            "attack_finetune_overlap": setup["attack_finetune_overlap"], "occlusion_rate": setup["occlusion_rate"],
            "single_models": setup["single_models"], "aggregate": agg, "per_seed": per_seed, "warnings": warns,
            "truncated_texts": int(setup["truncated_texts"] + sum(records[f"seed{s}"]["truncated_texts"] for s in seeds)),
            "label_names": names, "torch_threads": threads, "runner": runner}
    (out / "metrics.json").write_text(json.dumps(meta, indent=2, default=float))
    (out / "arms.md").write_text(arms_table(agg, seeds, p) + "\n" + class_table(agg, names))
    from .plots import write_plots

    write_plots(agg, out, len(seeds), f"{p['data']}, d = {p['d_model']}, K = {p['k']}, n = {p['n_random']}")
    return build_claims(agg, setup["single_models"], setup["occlusion_rate"], p, seeds, arm_warnings(per_seed),
                        names=names)


def _jsonable(p: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()}
