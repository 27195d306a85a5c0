"""Console script ``iclr25-sw-fair-clustering``: ``stream``, ``compare``, ``reproduce``, ``lower-bound-demo``.

Only the config dataclasses are imported here, so ``--help`` stays fast; the work lives in
:mod:`iclr25.sw_fair_clustering.commands`. The shared flags (``--out``, ``--threads``, ``--quiet``,
``--device``, ``--seed``/``--seeds``, ``--version``) come from :mod:`iclr25.core.config`.
"""

from __future__ import annotations

from collections.abc import Sequence

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import CompareConfig, LowerBoundConfig, ReproduceConfig, StreamConfig

__all__ = ["main"]

PROG = "iclr25-sw-fair-clustering"
SLUG = "sw-fair-clustering"


def _stream(cfg: StreamConfig) -> int:
    from .commands import run_stream

    return run_stream(cfg)


def _compare(cfg: CompareConfig) -> int:
    from .commands import run_compare

    return run_compare(cfg)


def _lower_bound(cfg: LowerBoundConfig) -> int:
    from .commands import run_lower_bound_demo

    return run_lower_bound_demo(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``iclr25-sw-fair-clustering``; returns the exit code."""
    return run_cli(
        PROG,
        "Fair Clustering in the Sliding Window Model (ICLR 2025): fair k-median / k-means over the last W points "
        "of a coloured stream from a sublinear-space coreset, with the fair-assignment LP on HiGHS.",
        {
            "stream": Command(StreamConfig, _stream, "stream a data set or file; fair clustering every W/5 arrivals "
                              "(queries.jsonl, --resume)"),
            "compare": Command(CompareConfig, _compare, "offline / SW-coreset / uniform / insertion-only table"),
            "reproduce": reproduce_command(SLUG, "iclr25.sw_fair_clustering.reproduce:reproduce", __version__,
                                           config=ReproduceConfig, help="reproduce the paper's claims (--quick: < 3 min on 2 cores)"),
            "lower-bound-demo": Command(LowerBoundConfig, _lower_bound,
                                        "the exact-feasibility flip behind the linear-space lower bound"),
        },
        argv,
        version=__version__,
    )
