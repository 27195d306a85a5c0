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
* **Worker environment.** ``worker_env`` adds environment variables the workers start with (e.g.
  :data:`HEAP_REUSE_ENV`, glibc heap settings for torch-heavy evaluation); :func:`in_worker` tells a job it
  runs in a worker.
* **Progress.** One bar over the jobs (:func:`iclr25.core.progress.progress`).
* **Failures.** A job that raises fails the run with :class:`JobFailed`, naming the job and carrying
  the worker's traceback; running workers are stopped, finished records are kept (``--resume`` after
  the fix runs only what is left). A worker that dies (out of memory, killed) fails the run the same
  way, naming the job it was running and its exit code.

Workers are ``spawn``ed: a script that calls :func:`run_jobs` with ``workers > 1`` must guard its
entry point with ``if __name__ == "__main__":`` (console scripts do). ``PR_SET_PDEATHSIG`` fires when
the *thread* that started the worker exits: call :func:`run_jobs` from the main thread.

Torch-free at import (and in a worker until a job imports it). The modules, one job each: ``jobs``
(the declaration and its checks), ``worker`` (a job's call and the worker loop), ``records`` (reading and
checking records), ``schedule`` (:func:`run_jobs`).

Example::

    from iclr25.core.runner import Job, run_jobs

    jobs = [Job("base", "mypkg.experiments:pretrain", seed=0, settings={"steps": 100})]
    jobs += [Job(f"probe{s}", "mypkg.experiments:probe", seed=s, settings={"n": 50}, deps=("base",))
             for s in (0, 1)]
    res = run_jobs(jobs, "out", workers=2, resume=False)
    claims = claims_from_records(res.records)       # a pure function of the records
"""

from .jobs import (
    RECORDS_DIR,
    SETTINGS_FILE,
    Job,
    JobFailed,
    JobMissingModule,
    RunInterrupted,
    RunResult,
    default_workers,
    nan_to_none,
    none_to_nan,
)
from .records import load_records
from .schedule import run_jobs
from .worker import HEAP_REUSE_ENV, in_worker

__all__ = ["Job", "RunResult", "JobFailed", "JobMissingModule", "RunInterrupted", "run_jobs", "load_records",
           "default_workers", "nan_to_none", "none_to_nan", "RECORDS_DIR", "SETTINGS_FILE", "HEAP_REUSE_ENV",
           "in_worker"]
