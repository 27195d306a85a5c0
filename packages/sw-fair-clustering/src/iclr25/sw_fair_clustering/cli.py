"""Console script ``iclr25-sw-fair-clustering``: ``stream``, ``compare``, ``reproduce``, ``lower-bound-demo``.

Only the config dataclasses are imported here, so ``--help`` stays fast; the work lives in
:mod:`iclr25.sw_fair_clustering.commands`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from iclr25.core.config import Command, run_cli

from .config import CompareConfig, LowerBoundConfig, ReproduceConfig, StreamConfig

__all__ = ["main"]

PROG = "iclr25-sw-fair-clustering"


def _setup(cfg, command: str):
    """Threads (before numpy is imported), logging and the default output folder."""
    from pathlib import Path

    if cfg.threads is not None:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(cfg.threads)
    logging.basicConfig(level=logging.WARNING if cfg.quiet else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    if cfg.out is None:
        cfg.out = Path("results/sw-fair-clustering") if command == "reproduce" else \
            Path("runs/sw-fair-clustering") / command
    return cfg


def _stream(cfg: StreamConfig) -> int:
    from .commands import run_stream

    return run_stream(_setup(cfg, "stream"))


def _compare(cfg: CompareConfig) -> int:
    from .commands import run_compare

    return run_compare(_setup(cfg, "compare"))


def _reproduce(cfg: ReproduceConfig) -> int:
    from .commands import run_reproduce

    return run_reproduce(_setup(cfg, "reproduce"))


def _lower_bound(cfg: LowerBoundConfig) -> int:
    from .commands import run_lower_bound_demo

    return run_lower_bound_demo(_setup(cfg, "lower-bound-demo"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-sw-fair-clustering``; returns the exit code."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--version"]:
        from ._version import __version__

        print(f"{PROG} {__version__}")
        return 0
    return run_cli(
        PROG,
        "Fair Clustering in the Sliding Window Model (ICLR 2025): fair k-median / k-means over the last W points "
        "of a coloured stream from a sublinear-space coreset, with the fair-assignment LP on HiGHS.",
        {
            "stream": Command(StreamConfig, _stream, "stream a data set or file; fair clustering every W/5 arrivals "
                              "(queries.jsonl, --resume)"),
            "compare": Command(CompareConfig, _compare, "offline / SW-coreset / uniform / insertion-only table"),
            "reproduce": Command(ReproduceConfig, _reproduce, "reproduce the paper's claims (--quick: < 3 min)"),
            "lower-bound-demo": Command(LowerBoundConfig, _lower_bound,
                                        "the exact-feasibility flip behind the linear-space lower bound"),
        },
        args,
    )
