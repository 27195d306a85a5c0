"""What a reproduction declares (:class:`Job`), what a run returns (:class:`RunResult`), the
errors it raises, and the checks of a declaration (unique names, known deps, no cycle, JSON records).

Part of :mod:`iclr25.core.runner` (see its docstring)."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the folder (inside ``out``) holding one ``<job>.json`` per finished job
RECORDS_DIR = "records"
#: the file (inside ``out``) with the settings of every job, for ``--resume``
SETTINGS_FILE = "runner_settings.json"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")


class JobFailed(RuntimeError):
    """A job raised (or its worker died); the message names the job and holds the worker's traceback.

    Attributes:
        job: the job's name.
        worker_traceback: the traceback text from the worker (or what is known of its death).
    """

    def __init__(self, job: str, summary: str, worker_traceback: str = "") -> None:
        super().__init__(summary + (f"\n--- worker traceback ---\n{worker_traceback}" if worker_traceback else ""))
        self.job = job
        self.summary = summary
        self.worker_traceback = worker_traceback


class JobMissingModule(ModuleNotFoundError, JobFailed):
    """A job failed because a module (an optional extra) is not installed: a :class:`JobFailed` that is
    also a ``ModuleNotFoundError`` carrying the module's ``name``, so a CLI can name the extra in one line
    (:mod:`iclr25.core.extras`)."""

    def __init__(self, job: str, summary: str, worker_traceback: str = "", *, module: str | None = None) -> None:
        JobFailed.__init__(self, job, summary, worker_traceback)
        self.name = module
        self.msg = summary


def _failed(job: str, summary: str, tb: str, module: str | None) -> JobFailed:
    if module:
        return JobMissingModule(job, summary, tb, module=module)
    return JobFailed(job, summary, tb)


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run; finished records are kept (the message says how to resume)."""


@dataclass(frozen=True)
class Job:
    """One experiment of a reproduction.

    Attributes:
        name: unique, file-name safe (letters, digits, ``. _ = + -``): the record is ``records/<name>.json``.
        fn: an importable top-level function, or its ``"module:qualname"`` path, called as
            ``fn(settings, seed, deps_records) -> record`` (a JSON-ready dict, list or number).
        seed: the job's seed (``None`` for a job that draws no random numbers; the global generators are
            then seeded with 0).
        settings: JSON-ready keyword settings of the job; they are part of ``--resume``'s check.
        deps: names of the jobs whose records ``fn`` needs (``deps_records[name]``).
    """

    name: str
    fn: Callable[..., Any] | str
    seed: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    deps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(f"job name {self.name!r} is not file-name safe: use letters, digits and . _ = + - "
                             "(it names records/<name>.json)")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"job {self.name!r}: seed must be an integer >= 0 or None, got {self.seed!r}")
        if isinstance(self.deps, str):
            raise ValueError(f"job {self.name!r}: deps must be a sequence of job names, got the string "
                             f"{self.deps!r} (write deps=({self.deps!r},))")
        object.__setattr__(self, "deps", tuple(self.deps))
        object.__setattr__(self, "settings", dict(self.settings))
        try:
            json.dumps(self.settings, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError) as e:
            raise ValueError(f"job {self.name!r}: settings must be JSON-ready ({e}); pass paths as str, "
                             "tuples as lists, no NaN") from None
        object.__setattr__(self, "fn", _fn_path(self.fn, self.name))

    def identity(self) -> dict[str, Any]:
        """What a resumed run must find unchanged: ``{"fn", "seed", "settings", "deps"}`` (JSON round-tripped)."""
        return json.loads(json.dumps({"fn": self.fn, "seed": self.seed, "settings": self.settings,
                                      "deps": list(self.deps)}, sort_keys=True))


@dataclass
class RunResult:
    """What :func:`run_jobs` returns.

    Attributes:
        records: ``{job name: record}`` for every job (JSON round-tripped), in declaration order.
        ran: jobs computed by this run; reused: jobs whose record a resumed run found.
        wall_seconds: wall time of this call.
        cpu_seconds_self / cpu_seconds_children: CPU seconds of this process and of its (waited-for)
            worker processes during this call.
        job_cpu_seconds / job_wall_seconds: per job, as recorded when it ran (reused jobs included).
        workers: the number of worker processes used (1: in this process).
    """

    records: dict[str, Any]
    ran: list[str]
    reused: list[str]
    wall_seconds: float
    cpu_seconds_self: float
    cpu_seconds_children: float
    job_cpu_seconds: dict[str, float]
    job_wall_seconds: dict[str, float]
    workers: int

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds of this run: this process plus its workers."""
        return self.cpu_seconds_self + self.cpu_seconds_children

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary for a run's metrics file (no records)."""
        return {"workers": self.workers, "ran": list(self.ran), "reused": list(self.reused),
                "wall_seconds": self.wall_seconds, "cpu_seconds": self.cpu_seconds,
                "cpu_seconds_parent": self.cpu_seconds_self, "cpu_seconds_children": self.cpu_seconds_children,
                "job_cpu_seconds": dict(self.job_cpu_seconds), "job_wall_seconds": dict(self.job_wall_seconds)}


def default_workers(n_jobs: int | None = None) -> int:
    """The default number of workers: the CPUs this process may use (its affinity), at most ``n_jobs``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_jobs if n_jobs else cpus))



def _fn_path(fn: Callable[..., Any] | str, job: str) -> str:
    """``"module:qualname"`` of a top-level function (checked to resolve back to it)."""
    if isinstance(fn, str):
        if ":" not in fn:
            raise ValueError(f"job {job!r}: fn {fn!r} must be 'module:function'")
        return fn
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not callable(fn) or not mod or not qual or "<" in qual or "." in qual:
        raise ValueError(f"job {job!r}: fn must be a top-level function of an importable module (a worker "
                         f"imports it by name), got {fn!r}")
    if mod == "__main__":
        raise ValueError(f"job {job!r}: fn {qual} is defined in __main__, which a spawned worker cannot import "
                         "by name; move it into a module")
    return f"{mod}:{qual}"


def _resolve(path: str) -> Callable[..., Any]:
    mod, _, qual = path.partition(":")
    obj: Any = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{path} is not callable")
    return obj


def _order(jobs: Sequence[Job]) -> None:
    """Refuse duplicate names, unknown deps and cycles (naming them)."""
    names = [j.name for j in jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"job names must be unique; repeated: {dup}")
    known = set(names)
    for j in jobs:
        bad = [d for d in j.deps if d not in known]
        if bad:
            raise ValueError(f"job {j.name!r} depends on unknown job(s) {bad}; declared: {names}")
    by = {j.name: j for j in jobs}
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            cyc = path[path.index(n):] + [n]
            raise ValueError(f"jobs depend on each other in a cycle: {' -> '.join(cyc)}")
        state[n] = 1
        for d in by[n].deps:
            visit(d, path + [n])
        state[n] = 2

    for n in names:
        visit(n, [])


def _bad_json(obj: Any, where: str = "record") -> str | None:
    """Where ``obj`` is not strict JSON (NaN/inf, a non-JSON type, a non-string key), or ``None``."""
    if obj is None or isinstance(obj, (bool, str)):
        return None
    if isinstance(obj, int):
        return None
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (f"{where} is {obj!r} (JSON has no NaN/inf: return None for an "
                                                "undefined number, and say why in the record)")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, str):
                return f"{where} has the non-string key {k!r} (JSON object keys are strings: use str(key))"
            bad = _bad_json(v, f"{where}.{k}")
            if bad:
                return bad
        return None
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad = _bad_json(v, f"{where}[{i}]")
            if bad:
                return bad
        return None
    return f"{where} is a {type(obj).__module__}.{type(obj).__name__} ({obj!r:.60}), not JSON (use float/int/list)"


def nan_to_none(obj: Any) -> Any:
    """``obj`` with every NaN replaced by ``None``, recursively (dicts, lists, tuples; an inf stays, and the
    runner refuses it).

    For a job whose record legitimately holds undefined numbers (a rate over no eligible point): JSON has
    no NaN, so the job says "undefined" with ``null``, explicitly, and the claims read it back with
    :func:`none_to_nan`. Only for records that hold no ``None`` of their own (the round trip would turn
    those into NaN).
    """
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, Mapping):
        return {k: nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nan_to_none(v) for v in obj]
    return obj


def none_to_nan(obj: Any) -> Any:
    """The inverse of :func:`nan_to_none` for reading a record: every ``None`` becomes ``float("nan")``."""
    if obj is None:
        return float("nan")
    if isinstance(obj, Mapping):
        return {k: none_to_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [none_to_nan(v) for v in obj]
    return obj


