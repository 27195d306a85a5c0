"""Scale and presets of CREAM's CPU-scale reproduction (:class:`ReproSettings`, :data:`QUICK`, :data:`FULL`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ReproSettings", "QUICK", "FULL", "FULL_REGIMES", "METHODS", "LABEL", "ACC_MARGIN", "logit"]

METHODS = ("srlm", "avg", "dyn", "oracle")
LABEL = {"srlm": "SRLM", "avg": "CREAM-avg", "dyn": "CREAM-dyn", "oracle": "oracle DPO"}
ACC_MARGIN = 1 / 200  # "greater" on the 200-prompt test set: at least one more prompt right


@dataclass(frozen=True)
class ReproSettings:
    """Scale of a reproduction run.

    Attributes:
        seeds: seeds (each its own split, corpus, M0, M1 and sampling).
        methods: methods run from each M1.
        iterations: T.
        n_samples, temperature: N and the sampling temperature.
        reward_reference: ``base`` (default) or ``previous``.
        long_stage_epochs, long_stage_lr: the separate long DPO stage on the round-1 pairs (SRLM
            vs CREAM-avg from M1) that runs long enough for the margins to reach the bound
            ``logit(C)`` (the loop's one-epoch stages do not; ``0`` epochs: skip).
        m0_steps, sft_epochs: shrink M0/M1 training (tests only; ``None`` = the spec's recipe).
        n_operand, n_test, n_seed: the task's size (tests only; spec: 30, 200, 120).
        workers: worker processes (seeds in parallel).
    """

    seeds: tuple[int, ...] = (0, 1)
    methods: tuple[str, ...] = METHODS
    iterations: int = 3
    n_samples: int = 5
    temperature: float = 1.0
    reward_reference: str = "base"
    long_stage_epochs: int = 60
    long_stage_lr: float = 1e-3
    m0_steps: int | None = None
    sft_epochs: float | None = None
    n_operand: int = 30
    n_test: int = 200
    n_seed: int = 120
    workers: int = 2


#: quick: the main regime without CREAM-avg (in one-epoch stages it takes SRLM's Adam steps; claims.claims_from)
QUICK = ReproSettings(methods=("srlm", "dyn", "oracle"))
FULL = ReproSettings(seeds=(0, 1, 2, 3, 4))
#: extra regimes of the full run (tables, no claims)
FULL_REGIMES = {
    "previous reference": dict(reward_reference="previous", methods=("srlm", "avg", "dyn"), long_stage_epochs=0),
    "T=4": dict(iterations=4, long_stage_epochs=0),
    "hard (N=8, temperature 1.2)": dict(n_samples=8, temperature=1.2, long_stage_epochs=0),
}


def logit(c: float) -> float:
    c = min(max(c, 1e-6), 1 - 1e-6)
    return math.log(c / (1 - c))
