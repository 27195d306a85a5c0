"""Loading preference files for ``analyze``, and the mirrored HH-RLHF file (optional real data).

Accepted files (CSV with a header row, or JSON Lines with one object per line); the kind is
detected from the column names:

=================  ===============================================  ===================================
kind               columns                                          meaning
=================  ===============================================  ===================================
``scores``         ``item, score``                                  a fitted reward model's scores
``comparisons``    ``winner, loser`` [, ``count``]                  one (or ``count``) observed comparisons
                   (or ``chosen, rejected`` [, ``count``])
``probabilities``  ``item_i, item_j, p`` (or ``i, j, p``)           ``P(item_i > item_j)`` in (0, 1)
=================  ===============================================  ===================================

Errors name the file, the line and the fix.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = ["PreferenceData", "load_preferences", "HH_RLHF_HARMLESS", "load_hh_pairs"]

_KINDS = {
    "scores": (("item", "score"),),
    "comparisons": (("winner", "loser"), ("chosen", "rejected")),
    "probabilities": (("item_i", "item_j", "p"), ("i", "j", "p")),
}


@dataclass
class PreferenceData:
    """Preferences read from a file.

    Attributes:
        kind: ``"scores"``, ``"comparisons"`` or ``"probabilities"``.
        items: option names in first-appearance order.
        scores: ``(n,)`` float (kind ``scores``), else None.
        wins: ``(n, n)`` float counts ``W[i, j]`` = times ``i`` beat ``j`` (kind ``comparisons``).
        matrix: ``(n, n)`` float ``P[i, j]``, NaN where not given (kind ``probabilities``).
    """

    kind: str
    items: list[str]
    scores: np.ndarray | None = None
    wins: np.ndarray | None = None
    matrix: np.ndarray | None = None


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a preference file; unreadable bytes (bad gzip, truncated file, not UTF-8) become a
    ``ValueError`` naming the file."""
    try:
        yield from _records_raw(path)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        gz = " (its name ends in .gz, so it must be gzip-compressed)" if path.suffix == ".gz" else ""
        raise ValueError(f"{path}: cannot be read as UTF-8 text{gz}: {e}; save it as plain UTF-8 "
                         ".csv/.tsv/.jsonl, or gzip it and name it .gz") from None


def _records_raw(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    stem = path.name[:-3] if path.suffix == ".gz" else path.name
    if stem.endswith((".jsonl", ".json", ".ndjson")):
        with opener(path, "rt", encoding="utf-8") as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {ln}: not valid JSON ({e.msg}); one object per line") from None
                if not isinstance(obj, dict):
                    raise ValueError(f"{path}: line {ln}: expected a JSON object, got {type(obj).__name__}")
                yield ln, {str(k).strip().lower(): v for k, v in obj.items()}
    elif stem.endswith((".csv", ".tsv")):
        with opener(path, "rt", encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t" if stem.endswith(".tsv") else ",")
            if reader.fieldnames is None:
                raise ValueError(f"{path}: empty file (expected a header row)")
            for ln, row in enumerate(reader, 2):
                if None in row:
                    raise ValueError(f"{path}: line {ln}: more fields than the header has")
                yield ln, {str(k).strip().lower(): (v.strip() if isinstance(v, str) else v) for k, v in row.items()}
    else:
        raise ValueError(f"{path}: unknown file type; use .csv, .tsv or .jsonl (optionally .gz)")


def _kind(cols: set[str], path: Path, ln: int) -> tuple[str, tuple[str, ...]]:
    for kind, variants in _KINDS.items():
        for v in variants:
            if set(v) <= cols:
                return kind, v
    raise ValueError(
        f"{path}: line {ln}: cannot tell the file kind from the fields {sorted(cols)}; use "
        "'item,score' (scores), 'winner,loser[,count]' (comparisons) or 'item_i,item_j,p' (probabilities)"
    )


def _num(v: Any, field: str, path: Path, ln: int) -> float:
    if isinstance(v, bool):  # JSON true/false: float(True) == 1.0 would count as a number
        raise ValueError(f"{path}: line {ln}: field {field!r} = {json.dumps(v)} is not a number")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: line {ln}: field {field!r} = {v!r} is not a number") from None
    if not math.isfinite(x):
        raise ValueError(f"{path}: line {ln}: field {field!r} = {v!r} is not finite")
    return x


def _name(v: Any, field: str, path: Path, ln: int) -> str:
    if v is None or str(v).strip() == "":
        raise ValueError(f"{path}: line {ln}: field {field!r} is empty; every row needs an item name")
    return str(v).strip()


def load_preferences(path: str | Path, *, tol: float = 1e-6) -> PreferenceData:
    """Read a preference file (see the module docstring for the formats).

    Args:
        path: ``.csv``, ``.tsv`` or ``.jsonl`` file (optionally gzip-compressed ``.gz``).
        tol: tolerance when the same pair's probability is given twice.

    Returns:
        :class:`PreferenceData`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unknown format, a row without the needed fields, a non-numeric value, an
            empty name, an item compared with itself, a probability outside [0, 1], a negative
            count, or conflicting duplicates (line numbers given).
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"preference file {p} is a directory; pass a .csv, .tsv or .jsonl file")
    if not p.is_file():
        raise FileNotFoundError(f"preference file {p} does not exist")
    kind = cols = None
    items: dict[str, int] = {}
    seen_line: dict[Any, int] = {}
    entries: list[tuple] = []
    given: dict[tuple[int, int], float] = {}

    def idx(name: str) -> int:
        return items.setdefault(name, len(items))

    for ln, rec in _records(p):
        if kind is None:
            kind, cols = _kind(set(rec), p, ln)
        missing = [c for c in cols if c not in rec or rec[c] is None or str(rec[c]).strip() == ""]
        if missing:
            raise ValueError(f"{p}: line {ln}: missing field(s) {missing} (this is a {kind} file: {', '.join(cols)})")
        if kind == "scores":
            it = _name(rec["item"], "item", p, ln)
            if it in items:
                raise ValueError(f"{p}: line {ln}: item {it!r} already has a score (line {seen_line[it]})")
            seen_line[it] = ln
            entries.append((idx(it), _num(rec["score"], "score", p, ln)))
        elif kind == "comparisons":
            w = _name(rec[cols[0]], cols[0], p, ln)
            lo = _name(rec[cols[1]], cols[1], p, ln)
            if w == lo:
                raise ValueError(f"{p}: line {ln}: {w!r} is compared with itself; drop the row")
            c = _num(rec["count"], "count", p, ln) if rec.get("count") not in (None, "") else 1.0
            if c < 0:
                raise ValueError(f"{p}: line {ln}: count {c} is negative")
            entries.append((idx(w), idx(lo), c))
        else:
            a = _name(rec[cols[0]], cols[0], p, ln)
            b = _name(rec[cols[1]], cols[1], p, ln)
            if a == b:
                raise ValueError(f"{p}: line {ln}: {a!r} is compared with itself; drop the row")
            x = _num(rec["p"], "p", p, ln)
            if not 0.0 <= x <= 1.0:
                raise ValueError(f"{p}: line {ln}: p = {x} is outside [0, 1] (P({a} > {b}) is a probability)")
            i, j = idx(a), idx(b)
            if (i, j) in given and abs(given[(i, j)] - x) > tol:
                raise ValueError(
                    f"{p}: line {ln}: P({a} > {b}) = {x} contradicts line {seen_line[(i, j)]}, which implies "
                    f"P({a} > {b}) = {given[(i, j)]:.6g}; give each pair once (or complementary values)")
            given[(i, j)], given[(j, i)] = x, 1.0 - x
            seen_line[(i, j)] = seen_line[(j, i)] = ln
            entries.append((i, j, x))
            entries.append((j, i, 1.0 - x))
    if kind is None:
        raise ValueError(f"{p}: no records")
    names = list(items)
    n = len(names)
    if kind == "scores":
        s = np.zeros(n)
        for i, v in entries:
            s[i] = v
        return PreferenceData(kind, names, scores=s)
    if kind == "comparisons":
        W = np.zeros((n, n))
        for i, j, c in entries:
            W[i, j] += c
        return PreferenceData(kind, names, wins=W)
    P = np.full((n, n), np.nan)
    for i, j, x in entries:
        P[i, j] = x
    return PreferenceData(kind, names, matrix=P)


#: The Anthropic HH-RLHF harmless-base test split, as mirrored for the ``aihf`` package.
HH_RLHF_HARMLESS = DatasetSpec(
    "aihf",
    files=(RemoteFile(
        "hh_rlhf_harmless_base_test.jsonl.gz",
        url="https://github.com/anthropics/hh-rlhf (harmless-base/test.jsonl.gz)",
        sha256="ebfaaed21162a4de120ae85366075b34425e2a6303fac59b99555002f7016f03",
        direct=False,
    ),),
    description="Anthropic HH-RLHF harmless-base test split (2312 chosen/rejected dialogues, MIT)",
)


def load_hh_pairs(limit: int | None = None, *, path: str | Path | None = None) -> list[tuple[str, str, str]]:
    """(prompt, chosen response, rejected response) triples of the HH-RLHF harmless test file.

    The prompt is the dialogue up to and including the last ``"\\n\\nAssistant:"``; records whose
    chosen and rejected prompts differ (5 of 2312) are skipped.

    Args:
        limit: keep the first ``limit`` usable records.
        path: explicit file (default: resolved through ``ICLR25_DATA``, see ``iclr25.core.data``).

    Raises:
        iclr25.core.data.DataNotFoundError: the file is not mirrored (message says where it comes from).
    """
    f = Path(path) if path is not None else HH_RLHF_HARMLESS.path()
    if not f.is_file():
        raise FileNotFoundError(f"{f} does not exist; it is harmless-base/test.jsonl.gz of "
                                "github.com/anthropics/hh-rlhf (or set ICLR25_DATA to the mirror holding aihf/)")
    out = []
    marker = "\n\nAssistant:"
    with gzip.open(f, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            c, r = rec["chosen"], rec["rejected"]
            pc, pr = c.rfind(marker), r.rfind(marker)
            if pc < 0 or pr < 0 or c[: pc] != r[: pr]:
                continue
            out.append((c[: pc + len(marker)], c[pc + len(marker):].strip(), r[pr + len(marker):].strip()))
            if limit is not None and len(out) >= limit:
                break
    return out
