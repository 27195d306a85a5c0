"""The ``iclr25-aihf`` command: ``train``, ``evaluate``, ``reproduce``, ``mujoco``, ``demo``.

Only the config dataclasses are imported here, so ``--help`` stays fast; the work lives in
:mod:`iclr25.aihf.commands`. The shared flags (``--out``, ``--device``, ``--threads``, ``--quiet``, ``--seed`` /
``--seeds``, ``--version``) come from :mod:`iclr25.core.config`.
"""

from __future__ import annotations

from collections.abc import Sequence

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import DemoConfig, EvaluateConfig, MujocoConfig, ReproduceConfig, TrainConfig

__all__ = ["main"]

PROG = "iclr25-aihf"
SLUG = "aihf"


def _train(cfg: TrainConfig) -> int:
    from .commands import run_train

    return run_train(cfg)


def _evaluate(cfg: EvaluateConfig) -> int:
    from .commands import run_evaluate

    return run_evaluate(cfg)


def _demo(cfg: DemoConfig) -> int:
    from .commands import run_demo

    return run_demo(cfg)


def _mujoco(cfg: MujocoConfig) -> int:
    from .mujoco import run_mujoco

    return run_mujoco(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-aihf``; returns the exit code. ``--config hh_pythia`` loads the packaged preset."""
    from .config import PRESETS, preset_path

    return run_cli(
        PROG,
        "AIHF (ICLR 2025): reward and policy learned jointly from demonstrations and preferences, "
        "w * L_demo + (1 - w) * L_pref, with an explicit reward (KL-regularised policy step) or in DPO form "
        "(AIHF-DPO / Self-Play-AIHF).",
        {
            "train": Command(TrainConfig, _train, "train AIHF or a baseline (--task bandit|gridworld|tinylm|text; "
                             "--resume)"),
            "evaluate": Command(EvaluateConfig, _evaluate, "re-evaluate a train run (--run DIR)"),
            "reproduce": reproduce_command(SLUG, "iclr25.aihf.reproduce:reproduce", __version__,
                                           config=ReproduceConfig,
                                           help="reproduce the paper's claims at CPU scale (--quick: < 3 min on "
                                           "2 cores)"),
            "mujoco": Command(MujocoConfig, _mujoco, "AIHF on a MuJoCo env with a SAC policy step (needs the "
                              "[mujoco] extra; defaults = the full GPU run, README for the 1,000-step CPU smoke)"),
            "demo": Command(DemoConfig, _demo, "a 10-second bandit demo: AIHF vs RLHF vs SFT->RLHF"),
        },
        argv,
        version=__version__,
        presets=(PRESETS, preset_path),
    )
