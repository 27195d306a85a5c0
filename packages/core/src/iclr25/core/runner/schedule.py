"""The parent side: :func:`run_jobs` runs the declared jobs in this process or in spawned workers,
fed as their dependencies finish, and writes their records.

Part of :mod:`iclr25.core.runner` (see its docstring)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..checkpoint import atomic_write_json
from .jobs import (
    RECORDS_DIR,
    SETTINGS_FILE,
    Job,
    JobFailed,
    JobMissingModule,
    RunInterrupted,
    RunResult,
    _failed,
    _order,
    default_workers,
)
from .records import _checked, _read_record, _record_path
from .worker import _call, _worker_main

log = logging.getLogger("iclr25.core.runner")


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
             quiet: bool | None = None, worker_env: Mapping[str, str] | None = None) -> RunResult:
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
        worker_env: environment variables the spawned workers start with (e.g. :data:`HEAP_REUSE_ENV`); a
            variable already set in this process keeps its value. Not applied with one worker (in-process).

    Returns:
        :class:`RunResult`.

    Raises:
        ValueError: a bad declaration (names, deps, cycle, settings), ``workers < 1``, or ``--resume`` with
            changed settings or a damaged record (naming it).
        JobFailed: a job raised or its worker died (finished records kept).
        RunInterrupted: Ctrl-C / SIGTERM (finished records kept; rerun with ``--resume``).
    """
    from ..config import guard_resume_settings
    from ..progress import progress

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
    if resume and not (out / SETTINGS_FILE).is_file() and not (rec_dir.is_dir() and any(rec_dir.glob("*.json"))):
        log.warning("--resume: nothing to resume in %s (no %s, no records): all %d jobs run", out, SETTINGS_FILE,
                    len(jobs))
    else:
        if resume:
            _refuse_other_jobs(out, settings)
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
    if reused:
        _drop_stale_dependents(jobs, records, job_cpu, job_wall, reused, out)
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
        # counted on disk: a signal can land between a record's write and the line that notes it in memory
        done = sum(j.name in records or _record_path(out, j.name).is_file() for j in jobs)
        return (f"{done}/{len(jobs)} jobs finished, their records kept under {rec_dir}; rerun with --resume "
                f"to run the {len(jobs) - done} left")

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
            _run_pool(todo, records, n_workers, threads, finish, worker_env)
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


def _drop_stale_dependents(jobs: Sequence[Job], records: dict[str, Any], job_cpu: dict[str, float],
                           job_wall: dict[str, float], reused: list[str], out: Path) -> None:
    """``--resume``: a finished job that depends (directly or not) on a job that must run again was computed from
    a record that is gone; it runs again too (its old record is deleted), so no result mixes two versions of a
    dependency."""
    stale: list[str] = []
    changed = True
    while changed:
        changed = False
        for j in jobs:
            if j.name in records and any(d not in records for d in j.deps):
                del records[j.name]
                job_cpu.pop(j.name, None)
                job_wall.pop(j.name, None)
                reused.remove(j.name)
                _record_path(out, j.name).unlink(missing_ok=True)
                stale.append(j.name)
                changed = True
    if stale:
        log.warning("--resume: %d finished job(s) depend on a job that runs again and run again too: %s", len(stale),
                    ", ".join(stale))


def _refuse_other_jobs(out: Path, settings: Mapping[str, Any]) -> None:
    """``--resume`` into a run of other jobs (another preset, other seeds): one message that says so, rather
    than a settings diff per job. A missing or damaged settings file is left to the settings guard."""
    try:
        saved = json.loads((out / SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return
    if not isinstance(saved, dict):
        return
    old = [k[4:] for k in saved if k.startswith("job ")]
    now = [k[4:] for k in settings if k.startswith("job ")]
    gone, new = [j for j in old if j not in now], [j for j in now if j not in old]
    if not gone and not new:
        return

    def some(names: list[str]) -> str:
        return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")

    parts = ([f"{len(gone)} of its {len(old)} jobs are not in this run ({some(gone)})"] if gone else []) + (
        [f"{len(new)} of this run's {len(now)} jobs are not in it ({some(new)})"] if new else [])
    raise ValueError(f"--resume: {out} was started with other settings: other jobs ({'; '.join(parts)}); another "
                     "preset (--quick or not) or other --seeds? Resume with that run's flags, or start a new --out")


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
    from ..threads import limited_threads

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


@contextlib.contextmanager
def _env_for_spawn(extra: Mapping[str, str] | None) -> Iterator[None]:
    """``extra``'s variables not set here yet are in ``os.environ`` within the block (a spawned process starts
    with them), and removed afterwards."""
    added = [k for k in (extra or {}) if k not in os.environ]
    os.environ.update({k: str(extra[k]) for k in added})  # type: ignore[index]
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _run_pool(todo: list[Job], records: dict[str, Any], n_workers: int, threads: int | None,
              finish: Callable[..., None], worker_env: Mapping[str, str] | None = None) -> None:
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
            with _env_for_spawn(worker_env):
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
