"""The experiment runner: a reproduction declares jobs, the runner runs them and keeps their records.

A reproduction is a list of :class:`Job` s — ``Job(name, fn, seed, settings, deps=(...))`` — whose
``fn`` is an importable top-level function ``fn(settings, seed, deps_records) -> record`` returning a
JSON-ready record, and a *pure* function from the records to the claims. :func:`run_jobs` executes
the jobs and returns their records; a ``report``-only re-run (``resume=True`` with every record
there) trains nothing.

What :func:`run_jobs` guarantees, for every package alike:

* **Workers.** ``workers=N`` spawned worker processes (``spawn``: nothing of the parent's state is
  forked), each limited to ``threads`` CPU threads (torch and BLAS, :mod:`iclr25.core.threads`),
  each running one job at a time. ``workers=1`` runs the jobs in this process, one after the other,
  with the same thread limit. Records are the same whatever ``workers`` (tested): before each job the
  runner seeds Python's ``random`` and NumPy's global generator with the job's seed; a job must seed
  every other generator it draws from (torch's included) from its ``seed`` argument.
* **Dependencies.** A job starts once every job in its ``deps`` has a record; ``fn`` gets those
  records as ``deps_records = {dep_name: record}``. Unknown names and cycles are refused up front.
* **Records.** One file per finished job, ``OUT/records/<job>.json``, written atomically by the parent
  (:func:`iclr25.core.checkpoint.atomic_write_json`): ``{"job", "fn", "seed", "settings", "deps",
  "record", "cpu_seconds", "wall_seconds"}``. The ``record`` is what ``fn`` returned after a JSON round
  trip (tuples become lists): it is what :func:`run_jobs` returns and what a resumed run reads, so the
  claims see the same values either way. A record holding NaN/inf or a non-JSON object is an error
  naming the job and the field (return ``None`` for an undefined number, and say why in the record).
* **Resume.** ``resume=True`` skips jobs whose record exists and refuses changed settings
  (:func:`iclr25.core.config.guard_resume_settings`: ``OUT/runner_settings.json`` holds every job's
  fn, seed, settings and deps, and the caller's ``run_settings``). A fresh run (``resume=False``)
  deletes the previous records of ``OUT`` and starts over.
* **Ctrl-C / SIGTERM.** Workers ignore SIGINT; the parent stops them (SIGTERM, then SIGKILL), waits
  for them, keeps every finished record and raises :class:`RunInterrupted` (a ``KeyboardInterrupt``:
  the core CLI prints its message, which says how many jobs are left and to rerun with ``--resume``;
  exit code 130).
* **Workers die with the parent.** On Linux each worker asks for ``PR_SET_PDEATHSIG`` (SIGKILL) via
  ``ctypes`` and exits at once if its parent is already gone (the check compares with the parent's
  pid, not with 1: a sub-reaper adopts orphans too). A SIGKILLed parent leaves no worker training on.
* **CPU seconds.** Workers are direct children of this process and are always waited for, so their
  CPU time reaches ``RUSAGE_CHILDREN`` (and with it ``results.json``'s ``cpu_seconds`` and
  ``/usr/bin/time``); :class:`RunResult` reports this process's and the children's CPU seconds of the
  run, and each record its job's CPU seconds.
* **Progress.** One bar over the jobs (:func:`iclr25.core.progress.progress`).
* **Failures.** A job that raises fails the run with :class:`JobFailed`, naming the job and carrying
  the worker's traceback; running workers are stopped, finished records are kept (``--resume`` after
  the fix runs only what is left). A worker that dies (out of memory, killed) fails the run the same
  way, naming the job it was running and its exit code.

Workers are ``spawn``ed: a script that calls :func:`run_jobs` with ``workers > 1`` must guard its
entry point with ``if __name__ == "__main__":`` (console scripts do). ``PR_SET_PDEATHSIG`` fires when
the *thread* that started the worker exits: call :func:`run_jobs` from the main thread.

Torch-free at import (and in a worker until a job imports it).

Example::

    from iclr25.core.runner import Job, run_jobs

    jobs = [Job("base", "mypkg.experiments:pretrain", seed=0, settings={"steps": 100})]
    jobs += [Job(f"probe{s}", "mypkg.experiments:probe", seed=s, settings={"n": 50}, deps=("base",))
             for s in (0, 1)]
    res = run_jobs(jobs, "out", workers=2, resume=False)
    claims = claims_from_records(res.records)       # a pure function of the records
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import random
import re
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checkpoint import atomic_write_json

__all__ = ["Job", "RunResult", "JobFailed", "JobMissingModule", "RunInterrupted", "run_jobs", "load_records",
           "default_workers", "nan_to_none", "none_to_nan", "RECORDS_DIR", "SETTINGS_FILE"]

log = logging.getLogger(__name__)

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


# ---------------------------------------------------------------------------------------------
# declaration checks
# ---------------------------------------------------------------------------------------------

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
        return None if math.isfinite(obj) else f"{where} is {obj!r} (JSON has no NaN/inf)"
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, str):
                return f"{where} has the non-string key {k!r}"
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


def _call(job: dict[str, Any], deps_records: dict[str, Any], threads: int | None) -> tuple[str, float, float]:
    """Run one job here: seed the global generators, call fn, check and serialise its record."""
    import numpy as np

    from .threads import set_threads

    seed = job["seed"] if job["seed"] is not None else 0
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    fn = _resolve(job["fn"])
    set_threads(threads)          # again: the job's module may have imported torch just now
    t0, c0 = time.perf_counter(), time.process_time()
    record = fn(dict(job["settings"]), job["seed"], deps_records)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    bad = _bad_json(record)
    if bad:
        raise ValueError(f"job {job['name']!r} returned a record that is not JSON-ready: {bad}; return None for an "
                         "undefined number (and say why in the record)")
    return json.dumps(record, allow_nan=False), cpu, wall


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


# ---------------------------------------------------------------------------------------------
# the worker process
# ---------------------------------------------------------------------------------------------

def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this process when its parent dies; exit now if the parent is already gone."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)       # PR_SET_PDEATHSIG
        except (OSError, AttributeError):                      # pragma: no cover - no libc prctl
            pass
    if os.getppid() != parent_pid:                             # the parent died before prctl took effect
        os._exit(1)


def _worker_main(conn: Any, parent_pid: int, level: int, threads: int | None) -> None:
    """A worker: take jobs from ``conn`` one at a time, send back ``("ok", name, record_json, cpu, wall)`` or
    ``("error", name, summary, traceback)``; ``None`` ends it."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)               # the parent handles Ctrl-C and stops us
    from .progress import setup_logging
    from .threads import set_threads

    set_threads(threads)
    setup_logging(level)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        job, deps_records = msg
        try:
            text, cpu, wall = _call(job, deps_records, threads)
            conn.send(("ok", job["name"], text, cpu, wall))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent, named
            missing = e.name if isinstance(e, ModuleNotFoundError) else None
            conn.send(("error", job["name"], f"{type(e).__name__}: {e}", traceback.format_exc(), missing))


# ---------------------------------------------------------------------------------------------
# the parent
# ---------------------------------------------------------------------------------------------

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


def _stop(procs: Sequence[Any], grace: float = 5.0) -> None:
    """SIGTERM every live worker, SIGKILL the ones still alive after ``grace`` s, and wait for all (so their
    CPU time reaches ``RUSAGE_CHILDREN``)."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_jobs(jobs: Sequence[Job], out: str | Path, *, workers: int | None = None, resume: bool = False,
             threads: int | None = 1, run_settings: Mapping[str, Any] | None = None, desc: str = "jobs",
             quiet: bool | None = None) -> RunResult:
    """Run ``jobs`` (dependencies first), writing ``OUT/records/<job>.json`` for each; see the module docstring.

    Args:
        jobs: the declared jobs.
        out: the run folder (created).
        workers: worker processes (default :func:`default_workers` of the number of jobs to run); 1 runs
            the jobs in this process.
        resume: skip jobs whose record exists; refuse changed settings.
        threads: CPU threads of each job (torch and BLAS); ``None`` leaves the library defaults.
        run_settings: JSON-ready settings of the whole run that ``--resume`` must find unchanged too (e.g.
            the data file).
        desc: the progress bar's label.
        quiet: progress bar off (``None``: the core's ``--quiet`` / ``ICLR25_QUIET``).

    Returns:
        :class:`RunResult`.

    Raises:
        ValueError: a bad declaration (names, deps, cycle, settings), ``workers < 1``, or ``--resume`` with
            changed settings or a damaged record (naming it).
        JobFailed: a job raised or its worker died (finished records kept).
        RunInterrupted: Ctrl-C / SIGTERM (finished records kept; rerun with ``--resume``).
    """
    from .config import guard_resume_settings
    from .progress import progress

    jobs = list(jobs)
    if not jobs:
        raise ValueError("run_jobs: no jobs declared")
    _order(jobs)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be an integer >= 1 or None, got {threads!r}")
    out = Path(out)
    rec_dir = out / RECORDS_DIR
    settings = {f"job {j.name}": j.identity() for j in jobs}
    for k, v in dict(run_settings or {}).items():
        settings[f"run {k}"] = v
    try:
        settings = json.loads(json.dumps(settings, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"run_settings must be JSON-ready ({e})") from None
    guard_resume_settings(out, settings, resume=resume, write=False, filename=SETTINGS_FILE,
                          missing="the jobs' records are checked one by one")
    t0, c_self0, c_ch0 = time.perf_counter(), time.process_time(), _children_cpu()
    records: dict[str, Any] = {}
    job_cpu: dict[str, float] = {}
    job_wall: dict[str, float] = {}
    reused: list[str] = []
    if resume:
        for j in jobs:
            f = _record_path(out, j.name)
            if f.is_file():
                data = _checked(j, _read_record(f), f)
                records[j.name] = data["record"]
                job_cpu[j.name], job_wall[j.name] = float(data.get("cpu_seconds", 0.0)), float(data.get("wall_seconds", 0.0))
                reused.append(j.name)
    else:
        old = sorted(rec_dir.glob("*.json")) if rec_dir.is_dir() else []
        for f in old:
            f.unlink()
        if old:
            log.info("a fresh run: %d record(s) of a previous run in %s deleted (--resume keeps them)", len(old), rec_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / SETTINGS_FILE, settings)
    todo = [j for j in jobs if j.name not in records]
    if reused:
        log.info("--resume: %d/%d job(s) already finished (%s), %d to run", len(reused), len(jobs),
                 ", ".join(reused), len(todo))
    n_workers = workers if workers is not None else default_workers(len(todo))
    n_workers = max(1, min(n_workers, len(todo))) if todo else 1
    bar = progress(total=len(jobs), initial=len(reused), desc=desc, unit="job", quiet=quiet)
    ran: list[str] = []

    def finish(j: Job, text: str, cpu: float, wall: float) -> None:
        rec = json.loads(text)
        atomic_write_json(_record_path(out, j.name), {"job": j.name, **j.identity(), "record": rec,
                                                      "cpu_seconds": cpu, "wall_seconds": wall})
        records[j.name], job_cpu[j.name], job_wall[j.name] = rec, cpu, wall
        ran.append(j.name)
        bar.update()
        log.debug("job %s finished: %.1f s wall, %.1f CPU-s", j.name, wall, cpu)

    def left() -> str:
        n = len(jobs) - len(records)
        return (f"{len(records)}/{len(jobs)} jobs finished, their records kept under {rec_dir}; rerun with --resume "
                f"to run the {n} left")

    prev_term = None
    in_main = _main_thread()
    if in_main:
        def on_term(signum: int, frame: Any) -> None:
            raise RunInterrupted("SIGTERM")

        prev_term = signal.signal(signal.SIGTERM, on_term)
    try:
        if todo and n_workers == 1:
            _run_here(todo, records, threads, finish)
        elif todo:
            _run_pool(todo, records, n_workers, threads, finish)
    except KeyboardInterrupt:
        raise RunInterrupted(left()) from None
    except JobFailed as e:
        raise _failed(e.job, f"{e.summary} ({left()})", e.worker_traceback,
                      e.name if isinstance(e, JobMissingModule) else None) from None
    finally:
        bar.close()
        if in_main:
            signal.signal(signal.SIGTERM, prev_term)
    return RunResult(records={j.name: records[j.name] for j in jobs}, ran=ran, reused=reused,
                     wall_seconds=time.perf_counter() - t0, cpu_seconds_self=time.process_time() - c_self0,
                     cpu_seconds_children=_children_cpu() - c_ch0, job_cpu_seconds=job_cpu,
                     job_wall_seconds=job_wall, workers=n_workers)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _ready(todo: list[Job], records: Mapping[str, Any], busy: set[str]) -> list[Job]:
    return [j for j in todo if j.name not in records and j.name not in busy and all(d in records for d in j.deps)]


def _payload(j: Job, records: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return ({"name": j.name, "fn": j.fn, "seed": j.seed, "settings": j.settings},
            {d: records[d] for d in j.deps})


def _run_here(todo: list[Job], records: dict[str, Any], threads: int | None, finish: Callable[..., None]) -> None:
    """``workers=1``: the jobs in this process, dependencies first, each under the thread limit."""
    from .threads import limited_threads

    while True:
        ready = _ready(todo, records, set())
        if not ready:
            return
        j = ready[0]
        job, deps = _payload(j, records)
        try:
            with limited_threads(threads):
                text, cpu, wall = _call(job, deps, threads)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - named and re-raised
            raise _failed(j.name, f"job {j.name!r} failed: {type(e).__name__}: {e}", traceback.format_exc(),
                          e.name if isinstance(e, ModuleNotFoundError) else None) from e
        finish(j, text, cpu, wall)


def _run_pool(todo: list[Job], records: dict[str, Any], n_workers: int, threads: int | None,
              finish: Callable[..., None]) -> None:
    """``workers > 1``: spawned workers, one job each at a time, fed as dependencies finish."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    level = logging.getLogger().getEffectiveLevel()
    procs, conns = [], []
    running: dict[int, Job] = {}                       # worker index -> its job
    by_name = {j.name: j for j in todo}
    try:
        # workers start with SIGINT ignored (kept across exec, and Python then leaves it so): a Ctrl-C while a
        # worker is still importing must not print its traceback; the parent stops the workers itself
        prev_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            for _ in range(n_workers):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, args=(child, os.getpid(), level, threads), daemon=True)
                p.start()
                child.close()
                procs.append(p)
                conns.append(parent)
        finally:
            if prev_int is not None:
                signal.signal(signal.SIGINT, prev_int)
        while len([n for n in by_name if n in records]) < len(todo):
            busy = {j.name for j in running.values()}
            for i in range(n_workers):
                if i in running:
                    continue
                ready = _ready(todo, records, busy)
                if not ready:
                    break
                j = ready[0]
                conns[i].send(_payload(j, records))
                running[i] = j
                busy.add(j.name)
            if not running:                            # cannot happen after _order; a guard, not a hang
                raise RuntimeError("no job is ready and none is running")
            ready_objs = wait([conns[i] for i in running] + [procs[i].sentinel for i in running])
            for i in list(running):
                j = running[i]
                if conns[i] in ready_objs:
                    try:
                        msg = conns[i].recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is None:
                        procs[i].join(1.0)
                        raise JobFailed(j.name, f"job {j.name!r} failed: its worker died (exit code "
                                                f"{procs[i].exitcode}) before sending a record")
                    del running[i]
                    if msg[0] == "ok":
                        _, _name, text, cpu, wall = msg
                        finish(j, text, cpu, wall)
                    else:
                        _, _name, summary, tb, missing = msg
                        raise _failed(j.name, f"job {j.name!r} failed in its worker: {summary}", tb, missing)
                elif procs[i].sentinel in ready_objs:
                    procs[i].join(1.0)
                    raise JobFailed(j.name, f"job {j.name!r} failed: its worker died (exit code "
                                            f"{procs[i].exitcode}; -9 is SIGKILL, e.g. out of memory)")
        for c in conns:
            try:
                c.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p in procs:
            p.join(30.0)
    finally:
        _stop(procs)
        for c in conns:
            c.close()
