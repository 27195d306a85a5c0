"""JSON-lines helpers: the core's ``iclr25.core.jsonl`` when installed, plus truncating a torn last line.

A run killed while writing leaves a partial last line. :func:`repair_torn_tail` cuts the file back to its
last complete line before anything is appended, so a resumed run never writes after a fragment.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

try:  # the core's helpers (iclr25-core >= the "shared CLI conventions" release)
    from iclr25.core.jsonl import JsonlError, append_jsonl, read_jsonl  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised only with an older core
    class JsonlError(ValueError):  # type: ignore[no-redef]
        """A malformed JSON-lines file ("FILE:LINE: ...")."""

    def read_jsonl(path: str | Path, *, required: Sequence[str] = (), nonempty: Sequence[str] = (),
                   torn_tail: str = "error") -> list[dict[str, Any]]:  # type: ignore[misc]
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist")
        lines = p.read_text(encoding="utf-8").split("\n")
        out = []
        last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
        for i, ln in enumerate(lines):
            if not ln.strip():
                continue
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError as e:
                if i == last and torn_tail == "drop":
                    continue
                raise JsonlError(f"{p}:{i + 1}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise JsonlError(f"{p}:{i + 1}: expected a JSON object")
            for k in required:
                if k not in rec:
                    raise JsonlError(f"{p}:{i + 1}: missing field {k!r}")
            for k in nonempty:
                if not rec.get(k):
                    raise JsonlError(f"{p}:{i + 1}: field {k!r} is empty")
            out.append(rec)
        return out

    def append_jsonl(path: str | Path, records: Iterable[dict[str, Any]], fsync: bool = True) -> int:  # type: ignore[misc]
        recs = list(records)
        if not recs:
            return 0
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        return len(recs)

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
