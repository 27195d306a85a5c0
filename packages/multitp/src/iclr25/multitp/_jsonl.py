"""JSON-lines helpers: the core's ``iclr25.core.jsonl``, plus truncating a torn last line before appending.

A run killed while writing leaves a partial last line. :func:`repair_torn_tail` cuts the file back to its
last complete line before anything is appended, so a resumed run never writes after a fragment.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from iclr25.core.jsonl import JsonlError, append_jsonl, read_jsonl

log = logging.getLogger(__name__)

__all__ = ["JsonlError", "read_jsonl", "append_jsonl", "repair_torn_tail"]


def repair_torn_tail(path: str | Path) -> bool:
    """Drop a partial last line (an interrupted write) by truncating the file; returns whether it did.

    A complete last record that only lacks its newline gets the newline.
    """
    p = Path(path)
    if not p.exists():
        return False
    raw = p.read_bytes()
    if not raw or raw.endswith(b"\n"):
        return False
    head, _, tail = raw.rpartition(b"\n")
    try:
        json.loads(tail)
        with open(p, "ab") as fh:
            fh.write(b"\n")
        return False
    except json.JSONDecodeError:
        log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted write", p, len(tail))
        with open(p, "r+b") as fh:
            fh.truncate(len(head) + 1 if head else 0)
        return True
