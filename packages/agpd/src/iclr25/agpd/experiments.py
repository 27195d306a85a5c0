"""The reproduction's experiment job: one (attack, seed) trained and detected end to end.

:func:`experiment_job` is a job of the core's runner (:mod:`iclr25.core.runner`): it loads the data,
trains the small Preact CNN on the poisoned split (checkpointed every epoch, so an interrupted job resumes
mid-model) and runs every detector and baseline (:func:`~iclr25.agpd.pipeline.run_experiment`). Its
record is what the claims (:mod:`iclr25.agpd.claims`) read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["experiment_job", "job_name"]

log = logging.getLogger("iclr25.agpd")


@contextlib.contextmanager
def deterministic_cuda(device: str) -> Iterator[None]:
    """On a CUDA device, run the body with deterministic kernels (cuDNN's deterministic convolutions, no
    autotuning, cuBLAS's fixed workspace, ``torch.use_deterministic_algorithms(warn_only=True)``) and restore
    the previous flags after; elsewhere a no-op. Without it two identical GPU runs gave different numbers and
    two different verdicts (3 seeds on an H200: Stage-3 Blended TPR 31.8 vs 97.3 %). ``warn_only``: the one
    kernel without a deterministic twin here is the global average pool's backward, whose 1x1 output has no
    overlapping windows, so its atomic adds have one term each and are exact."""
    if not str(device).startswith("cuda"):
        yield
        return
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts: set before any matmul
    old = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
           torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        with warnings.catch_warnings():  # the exact 1x1 pool backward above: any other kernel still warns
            warnings.filterwarnings("ignore", message=r"adaptive_avg_pool2d_backward_cuda")
            yield
    finally:
        torch.use_deterministic_algorithms(old[0], warn_only=old[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = old[2], old[3]


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
    device = settings.get("device", "cpu")
    with deterministic_cuda(device):
        rec = run_experiment(data, settings["attack"], epochs=settings["epochs"], model=settings["model"],
                             augment=settings["augment"], seed=seed, checkpoint=settings["checkpoint"], resume=True,
                             device=device)
    # a JSON round trip (class-indexed dicts get string keys, as in the records before the runner), then an
    # undefined number (an AUROC over one class) becomes null
    return nan_to_none(json.loads(json.dumps(rec)))
