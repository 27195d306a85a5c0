"""CPU-scale reproduction of Prereq-Tune's claims on the synthetic world (a declaration of jobs).

The jobs run on the core's experiment runner (:func:`iclr25.core.runner.run_jobs`: worker processes, one
thread each, one record per finished job under ``out/records/``, ``--resume``): one ``m0-w<world>`` job per
world (M0: packaged for the quick world, else cached or pre-trained once), one ``know-w<world>-v<version>`` job
per knowledge version (the knowledge LoRAs belong to the world: every train seed on it shares them), then one
``seed-w<world>-t<train>`` job per seed on it (:func:`~.experiment.seed_job`: every method, :func:`~.experiment.run_seed`). The claims
are a pure function of the records (:func:`~.claims.claims_from_runs`), the figures come from :mod:`.plots`.

``quick``: the quick world (|R| 200, |F| 100, V 3, statement knowledge) and two train seeds on the same
world and M0; ``full``: |R| 400, |F| 200, V 3, statement and passage knowledge, three seeds each with its own
world and M0.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from iclr25.core import Claim
from iclr25.core.runner import Job

from ._version import __version__
from .claims import CLAIM_NAMES, claims_from_runs, mean_sd, version_value
from .experiment import FULL, QUICK, ReproSettings, multi_epochs, run_seed, single_epochs

__all__ = ["ReproSettings", "QUICK", "FULL", "multi_epochs", "single_epochs", "run_seed", "reproduce", "jobs",
           "claims_from_runs", "methods_table", "CLAIM_NAMES"]

log = logging.getLogger("iclr25.prereq_tune")
SLUG = "prereq-tune"


def _m0_name(ws: int) -> str:
    return f"m0-w{ws}"


def _seed_name(ws: int, ts: int) -> str:
    return f"seed-w{ws}-t{ts}"


def _plan(s: ReproSettings, seeds: list[int]) -> list[tuple[int, int]]:
    """(world seed, train seed) per seed: quick shares the first seed's world."""
    return [((seeds[0] if s.share_world else sd), sd) for sd in seeds]


def jobs(scale: str, seeds: list[int], out: Path, *, cache: str | None, device: str) -> list[Job]:
    """The reproduction's jobs: per world, its M0, then its knowledge LoRAs (one job per version, saved under
    ``out/knowledge/w<world>``), then one seed job per train seed on that world (the skill stages)."""
    from .experiment import scale_settings

    s = scale_settings(scale)
    plan = _plan(s, seeds)
    ident = json.loads(json.dumps(asdict(s), default=str))
    base = {"scale": scale, "cache": cache, "settings": ident}
    worlds = list(dict.fromkeys(w for w, _ in plan))
    js = [Job(_m0_name(ws), "iclr25.prereq_tune.experiment:m0_job", seed=ws, settings=base) for ws in worlds]
    know = {ws: [f"know-w{ws}-v{v}" for v in range(1, s.n_versions + 1)] for ws in worlds}
    js += [Job(know[ws][v - 1], "iclr25.prereq_tune.experiment:knowledge_job", seed=ws,
               settings={**base, "version": v, "dir": str(Path(out) / "knowledge" / f"w{ws}")}, deps=(_m0_name(ws),))
           for ws in worlds for v in range(1, s.n_versions + 1)]
    js += [Job(_seed_name(ws, ts), "iclr25.prereq_tune.experiment:seed_job", seed=ts,
               settings={**base, "world_seed": ws, "device": device}, deps=(_m0_name(ws), *know[ws])) for ws, ts in plan]
    return js


def reproduce(quick: bool = True, out_dir: str | Path = Path("results") / SLUG, *, seeds: list[int] | None = None,
              device: str = "auto", quiet: bool | None = None, cache: str | Path | None = None,
              resume: bool = False, workers: int | None = None, scale: str | None = None) -> list[Claim]:
    """Reproduce the claims (:data:`~.claims.CLAIM_NAMES`; module docstring). Writes ``records/`` (one per job),
    ``runs.json`` (every number per seed), ``methods.md`` (per-method table) and the figures of :mod:`.plots`.

    Args:
        quick: the quick world and two seeds sharing it, else the full run.
        out_dir: output folder.
        seeds: train seeds (default: the scale's). In quick mode every seed uses the first seed's world.
        device: ``auto`` is the CPU at this scale (the tiny model gains nothing from a GPU); ``cuda`` runs the
            seed jobs there.
        quiet: no progress bar (``None``: the core's ``--quiet``).
        cache: M0 cache root (default: the user cache).
        resume: keep the jobs a stopped run into ``out_dir`` finished (changed settings are refused).
        workers: worker processes (default: the cores, at most the number of jobs; 1: in this process).
        scale: a scale of :data:`~.experiment.SCALES` by name instead of ``quick``'s (e.g. ``"smoke"`` in tests).

    Returns:
        The claims.
    """
    from iclr25.core.runner import default_workers, run_jobs
    from iclr25.core.seed import choose_device

    from .experiment import scale_settings
    from .plots import write_plots

    name = scale or ("quick" if quick else "full")
    s = scale_settings(name)
    seeds = [int(x) for x in (seeds or s.seeds)]
    if not seeds or min(seeds) < 0:
        raise ValueError(f"seeds must be non-negative integers, got {seeds}")
    dev = "cpu" if device == "auto" else choose_device(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    js = jobs(name, seeds, out, cache=str(cache) if cache is not None else None, device=dev)
    n_workers = workers if workers is not None else default_workers(len(seeds))
    res = run_jobs(js, out, workers=n_workers, resume=resume, threads=1, desc="prereq-tune reproduce", quiet=quiet)
    plan = _plan(s, seeds)
    runs = [res.records[_seed_name(ws, ts)] for ws, ts in plan]
    m0 = {j.name: res.records[j.name] for j in js if j.name.startswith("m0-")}
    meta = {"settings": json.loads(json.dumps(asdict(s), default=str)), "m0": m0, "seeds": seeds,
            "version": __version__, "runner": res.summary()}
    (out / "runs.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1, default=str) + "\n")
    (out / "methods.md").write_text(methods_table(runs) + "\n")
    write_plots(out, runs)
    return claims_from_runs(runs, quick=quick, shared_world=s.share_world)


def methods_table(runs: list[dict[str, Any]]) -> str:
    """Markdown: per-method accuracies (mean ± sd over seeds)."""
    col = lambda f: [float(f(r)) for r in runs]  # noqa: E731
    rows = [
        ("M0 statement completion, R_test", col(lambda r: r["m0"]["completion_real_test"])),
        ("C1 R_test QA: SFT_real", col(lambda r: r["sft_real"]["real_test"])),
        ("C1 R_test QA: SFT_fictitious", col(lambda r: r["sft_fict"]["real_test"])),
        ("C1 R_test QA: Prereq-Tune single-version", col(lambda r: r["single"]["real_test"])),
        ("C1 R_test QA: **Prereq-Tune multi-version**", col(lambda r: r["multi"]["real_test"])),
    ]
    for k in runs[0]["multi"]["control"]:
        for u in (1, 2):
            rows.append((f"C2 {k}+Δskill vs V{u}", col(lambda r, k=k, u=u: version_value(r["multi"]["control"][k], u))))
    rows += [
        ("C3 multi-version Δskill alone on F train (mean over versions)", col(lambda r: r["multi"]["fict_train_mean"])),
        ("C3 multi-version Δskill alone on F train (max over versions)", col(lambda r: r["multi"]["fict_train_max"])),
        ("C3 single-version Δskill alone on F train (v1, trained)", col(lambda r: r["single"]["fict_train_v1"])),
        ("C3 single-version Δskill alone vs untrained versions", col(lambda r: r["single"]["fict_train_untrained_versions"])),
        ("C3 SFT_fictitious on its own training questions", col(lambda r: r["sft_fict"]["own_train"])),
        ("SFT_fictitious epochs trained", col(lambda r: r["sft_fict"]["epochs"])),
    ]
    lines = ["| measurement | mean ± sd | per seed |", "| --- | --- | --- |"]
    for name, xs in rows:
        m, sd = mean_sd(xs)
        lines.append(f"| {name} | {m:.3f} ± {sd:.3f} | {', '.join(f'{x:.3f}' for x in xs)} |")
    return "\n".join(lines)
