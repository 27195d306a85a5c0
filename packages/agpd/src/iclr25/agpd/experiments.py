"""The reproduction's experiment job: one (attack, seed) trained and detected end to end.

:func:`experiment_job` is a job of the core's runner (:mod:`iclr25.core.runner`): it loads the data,
trains the small Preact CNN on the poisoned split (checkpointed every epoch, so an interrupted job resumes
mid-model) and runs every detector and baseline (:func:`~iclr25.agpd.pipeline.run_experiment`). Its
record is what the claims (:mod:`iclr25.agpd.claims`) read.
"""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["experiment_job", "job_name"]

log = logging.getLogger("iclr25.agpd")


def job_name(attack: str, seed: int) -> str:
    """The runner's job (and record file) name of one experiment: ``<attack>_seed<seed>``."""
    return f"{attack}_seed{seed}"


def experiment_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job: train + detect one attack for one seed.

    Args:
        settings: ``attack`` (``badnets``, ``blended`` or ``clean``), ``data`` (``digits`` or
            ``cifar10-subset``), ``epochs``, ``model`` (``small``), ``augment`` and ``checkpoint`` (the
            model's checkpoint file: a rerun resumes training from it); optional ``device`` (default CPU).
        seed: sets the poisoned samples, the defender's clean split, the initialisation and the training order.
        deps: unused (no dependencies).

    Returns:
        The record of :func:`~iclr25.agpd.pipeline.run_experiment`, NaN written as ``None``.
    """
    from iclr25.core.runner import nan_to_none

    from .data import load_data
    from .pipeline import run_experiment

    data = load_data(settings["data"], seed)
    log.info("agpd reproduce: %s on %s, seed %d", settings["attack"], data.name, seed)
    rec = run_experiment(data, settings["attack"], epochs=settings["epochs"], model=settings["model"],
                         augment=settings["augment"], seed=seed, checkpoint=settings["checkpoint"], resume=True,
                         device=settings.get("device", "cpu"))
    # a JSON round trip (class-indexed dicts get string keys, as in the records before the runner), then an
    # undefined number (an AUROC over one class) becomes null
    return nan_to_none(json.loads(json.dumps(rec)))
