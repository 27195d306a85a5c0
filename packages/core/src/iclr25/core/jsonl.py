"""Line-numbered JSONL reading and durable appending.

Every iclr25 package that reads user JSONL (preference pairs, prompts, cached responses) reads it
through :func:`read_jsonl`, so a bad line is always reported the same way: ``FILE:LINE: what is
wrong``, as a :class:`JsonlError` (a ``ValueError``, which the CLIs print without a traceback).

Resumable caches append with :func:`append_jsonl` (flush + ``fsync`` per batch) and reload with
``torn_tail="drop"``: a last line cut off by a crash (no trailing newline, not valid JSON) is
dropped with a warning instead of failing the resume; a bad line anywhere else is still an error.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

__all__ = ["JsonlError", "iter_jsonl", "read_jsonl", "append_jsonl", "write_jsonl"]

log = logging.getLogger(__name__)


class JsonlError(ValueError):
    """A JSONL line that is not valid JSON, not an object, or lacks a required field."""


def _check(rec: Any, where: str, required: Sequence[str], nonempty: Sequence[str]) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise JsonlError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    missing = [k for k in required if k not in rec]
    if missing:
        raise JsonlError(f"{where}: missing field(s) {missing}; the line has {sorted(rec)}")
    for k in nonempty:
        v = rec.get(k)
        if v is None or (isinstance(v, (str, list, dict)) and len(v) == 0) or \
                (isinstance(v, str) and not v.strip()):
            raise JsonlError(f"{where}: field {k!r} is empty")
    return rec


def iter_jsonl(path: str | Path, *, required: Sequence[str] = (), nonempty: Sequence[str] = (),
               torn_tail: Literal["error", "drop"] = "error",
               skip_blank: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` for each line of a JSONL file (1-based line numbers).

    Args:
        path: the file.
        required: fields every record must have.
        nonempty: fields that must be present and non-empty (strings: not only whitespace).
        torn_tail: ``"drop"``: a last line without a trailing newline that is not valid JSON
            (a write cut off by a crash) is skipped with a warning; ``"error"``: it is an error.
        skip_blank: skip empty lines (otherwise they are errors).

    The file is UTF-8; a leading UTF-8 byte-order mark is skipped (read as ``utf-8-sig``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        JsonlError: ``FILE:LINE: ...`` for invalid JSON, a non-object, a missing or empty field.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    with open(p, "rb") as fh:
        data = fh.read()
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM (Notepad, Excel) is an encoding mark, not a bad line 1
        data = data[3:]
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines = lines[:-1]
    n = len(lines)
    for i, raw in enumerate(lines, start=1):
        where = f"{p}:{i}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonlError(f"{where}: not UTF-8 ({e.reason} at byte {e.start})") from None
        if not text.strip():
            if skip_blank:
                continue
            raise JsonlError(f"{where}: empty line")
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            if i == n and not ends_with_newline and torn_tail == "drop":
                log.warning("%s: dropping a torn last line (%d bytes, no newline: an interrupted write)",
                            where, len(raw))
                return
            raise JsonlError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
        yield i, _check(rec, where, required, nonempty)


def read_jsonl(path: str | Path, *, required: Sequence[str] = (), nonempty: Sequence[str] = (),
               torn_tail: Literal["error", "drop"] = "error", skip_blank: bool = True) -> list[dict[str, Any]]:
    """All records of a JSONL file (see :func:`iter_jsonl` for the arguments and errors)."""
    return [rec for _, rec in iter_jsonl(path, required=required, nonempty=nonempty,
                                         torn_tail=torn_tail, skip_blank=skip_blank)]


def _dumps(rec: Mapping[str, Any]) -> str:
    return json.dumps(rec, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def append_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]], *, fsync: bool = True) -> int:
    """Append records (one JSON object per line), flush, and ``fsync`` unless told not to.

    A file whose last line is torn (no trailing newline) gets a newline first, so the new records
    never merge with the torn bytes. NaN/inf values are rejected (``ValueError``) rather than
    written as invalid JSON.

    Returns:
        The number of records written.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = [_dumps(r) for r in records]
    if not lines:
        return 0
    prefix = ""
    if p.is_file() and p.stat().st_size > 0:
        with open(p, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                prefix = "\n"
    with open(p, "a", encoding="utf-8") as fh:
        fh.write(prefix + "\n".join(lines) + "\n")
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
    return len(lines)


def write_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write records to a new file atomically (temporary file + rename); returns the count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(_dumps(r) + "\n")
            n += 1
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)
    return n
