"""Sharded certification (``certify`` under ``torchrun`` / ``accelerate launch``): the launcher's rank, the
wait for every shard's ``.done`` marker, and the merge of the shards' certificate files.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["shard_env", "wait_for_shards", "merge_shards"]


def shard_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from the launcher's environment (``accelerate launch``,
    ``torchrun``, SLURM-style ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``); (0, 1, 0) for one process."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    local = int(os.environ.get("LOCAL_RANK", str(rank)) or 0)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"bad launcher environment: RANK={rank}, WORLD_SIZE={world}")
    return rank, world, local


def wait_for_shards(out: Path, world: int, timeout_s: float = 24 * 3600.0) -> None:
    """Rank 0 waits until every shard wrote its ``.done`` marker (no distributed backend needed)."""
    import time

    t0 = time.monotonic()
    while not all((out / f"certificates.shard{i}.done").is_file() for i in range(world)):
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"shards did not finish within {timeout_s:.0f} s")
        time.sleep(1.0)


def merge_shards(out: Path, num: int) -> Path:
    """Merge ``certificates.shard<i>.jsonl`` into ``certificates.jsonl`` sorted by index (duplicates: last wins)."""
    from iclr25.core.jsonl import read_jsonl, write_jsonl

    recs = {}
    for i in range(num):
        p = out / f"certificates.shard{i}.jsonl"
        if p.is_file():
            for r in read_jsonl(p, required=("index",), torn_tail="drop"):
                recs[int(r["index"])] = r
    final = out / "certificates.jsonl"
    write_jsonl(final, [recs[k] for k in sorted(recs)])
    return final
