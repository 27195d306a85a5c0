"""One job's call (:func:`_call`: seed, run, check the record) and the worker process's loop.

Part of :mod:`iclr25.core.runner` (see its docstring)."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback
from typing import Any

from .jobs import _bad_json, _resolve

#: glibc malloc settings for workers of torch-heavy jobs (``run_jobs(worker_env=HEAP_REUSE_ENV)``): an evaluation's
#: ``[batch, length, vocab]`` float32 tensors (tens of MB) are above glibc's default mmap threshold, so each one is a
#: fresh ``mmap`` whose pages the kernel faults in and zeroes, then an ``munmap``: in q-adapter's quick run ~17 % of
#: the CPU seconds were this system time. With these, freed blocks stay in the heap and are reused (no effect on any
#: number: the same arithmetic in other memory; up to 1 GiB of freed heap may stay with a worker).
HEAP_REUSE_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2 ** 30), "MALLOC_TRIM_THRESHOLD_": str(2 ** 30)}

_IN_WORKER = False


def in_worker() -> bool:
    """Whether this process is a runner worker (spawned by :func:`~iclr25.core.runner.run_jobs`): a job may then
    skip what only an interactive process needs (e.g. an optional import no job uses)."""
    return _IN_WORKER


def _call(job: dict[str, Any], deps_records: dict[str, Any], threads: int | None) -> tuple[str, float, float]:
    """Run one job here: seed the global generators, call fn, check and serialise its record."""
    import numpy as np

    from ..threads import set_threads

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
        raise ValueError(f"job {job['name']!r} returned a record that is not JSON-ready: {bad}")
    return json.dumps(record, allow_nan=False), cpu, wall


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


class _Terminated(SystemExit):
    """The parent's SIGTERM (a job's own ``sys.exit`` stays a failure reported to the parent)."""


def _on_term(signum: int, frame: Any) -> None:
    raise _Terminated(128 + signum)


def _worker_main(conn: Any, parent_pid: int, level: int, threads: int | None) -> None:
    """A worker: take jobs from ``conn`` one at a time, send back ``("ok", name, record_json, cpu, wall)`` or
    ``("error", name, summary, traceback)``; ``None`` ends it."""
    global _IN_WORKER
    _IN_WORKER = True
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)               # the parent handles Ctrl-C and stops us
    # the parent stops us with SIGTERM: exit through Python, so that multiprocessing's finalizers release what
    # the job held (a lock's named semaphore, e.g. tqdm's: else the resource tracker warns of a leak)
    signal.signal(signal.SIGTERM, _on_term)
    from ..progress import setup_logging
    from ..threads import set_threads

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
        except _Terminated:
            raise
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent, named
            missing = e.name if isinstance(e, ModuleNotFoundError) else None
            conn.send(("error", job["name"], f"{type(e).__name__}: {e}", traceback.format_exc(), missing))


