"""The records of finished jobs under ``OUT/records/`` and the ``--resume`` check of each.

Part of :mod:`iclr25.core.runner` (see its docstring)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .jobs import RECORDS_DIR, Job


def _record_path(out: Path, name: str) -> Path:
    return out / RECORDS_DIR / f"{name}.json"


def load_records(out: str | Path, jobs: Iterable[Job] | None = None) -> dict[str, Any]:
    """The records under ``OUT/records`` (``{job: record}``), without running anything.

    Args:
        out: the run folder.
        jobs: when given, each must have a record whose fn/seed/settings/deps match (else ``ValueError``
            naming the job); when ``None``, every record file found is returned.

    Raises:
        ValueError: a missing or changed record (with ``jobs``), or a damaged record file.
    """
    out = Path(out)
    if jobs is None:
        files = sorted((out / RECORDS_DIR).glob("*.json"))
        return {f.stem: _read_record(f)["record"] for f in files}
    res = {}
    for j in jobs:
        f = _record_path(out, j.name)
        if not f.is_file():
            raise ValueError(f"no record of job {j.name!r} ({f}); run the reproduction (with --resume to keep "
                             "the finished jobs)")
        res[j.name] = _checked(j, _read_record(f), f)["record"]
    return res


def _read_record(f: Path) -> dict[str, Any]:
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "record" not in data:
            raise ValueError("not a runner record (no 'record' field)")
        return data
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"record {f} is damaged ({e}); delete it (the job runs again with --resume) or run "
                         "without --resume") from None


def _checked(job: Job, data: dict[str, Any], f: Path) -> dict[str, Any]:
    saved = {k: data.get(k) for k in ("fn", "seed", "settings", "deps")}
    now = job.identity()
    if saved != now:
        diff = ", ".join(f"{k}: {saved[k]!r} -> {now[k]!r}" for k in now if saved[k] != now[k])
        raise ValueError(f"--resume: record {f} of job {job.name!r} was made with other settings ({diff}); resume "
                         "with the same flags, or run without --resume (it starts over)")
    return data


