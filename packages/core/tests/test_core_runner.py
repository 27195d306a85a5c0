"""The experiment runner: records equal for 1 and 2 workers, dependencies first, resume after a real SIGKILL of
the parent (workers die with it), Ctrl-C / SIGTERM keep finished records, children's CPU counted, a failing job
named with its worker's traceback, changed settings refused on resume."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from iclr25.core.runner import (
    Job,
    JobFailed,
    RunInterrupted,
    load_records,
    nan_to_none,
    none_to_nan,
    run_jobs,
)

MOD = "iclr25_runner_toy_jobs"

#: the jobs live in a module written to a temporary folder (pytest's importlib mode makes test modules
#: unimportable by name; a spawned worker imports a job's fn by name, from the parent's sys.path)
JOBS_SRC = '''
import json, os, random, time
from pathlib import Path

import numpy as np

from iclr25.core.runner import Job


def _log(settings, what):
    if settings.get("log"):
        with open(settings["log"], "a") as f:
            f.write(f"{what} {time.monotonic():.6f}\\n")


def draw(settings, seed, deps):
    """Numbers from the job's own generator and from the global ones the runner seeds."""
    _log(settings, f"start {settings.get('tag', seed)}")
    time.sleep(settings.get("sleep", 0.0))
    x = float(np.random.default_rng(seed).standard_normal()) + float(np.random.rand()) + random.random()
    _log(settings, f"end {settings.get('tag', seed)}")
    return {"seed": seed, "x": x, "n": settings.get("n", 0), "pair": (1, 2)}


def combine(settings, seed, deps):
    _log(settings, "start combine")
    return {"deps": sorted(deps), "sum": sum(r["x"] for r in deps.values())}


def burn(settings, seed, deps):
    t = time.process_time()
    while time.process_time() - t < settings["cpu"]:
        pass
    return {"burned": settings["cpu"]}


def fail(settings, seed, deps):
    time.sleep(settings.get("sleep", 0.0))
    raise RuntimeError("boom from the toy job")


def nan(settings, seed, deps):
    return {"ok": 1.0, "deep": [{"v": float("nan")}]}


_LOCKS = []


def held(settings, seed, deps):
    """Say it started (with its pid), then wait until the release file exists. Holds a multiprocessing lock
    (a named semaphore, as tqdm's and many libraries' are) while it waits."""
    import multiprocessing

    _LOCKS.append(multiprocessing.get_context("spawn").Lock())
    Path(settings["dir"], f"started-{seed}").write_text(str(os.getpid()))
    while not Path(settings["dir"], "release").exists():
        time.sleep(0.05)
    return {"seed": seed, "x": float(np.random.default_rng(seed + 100).random())}


def jobs_for(d):
    return ([Job(f"a{s}", draw, seed=s, settings={"n": 1}) for s in (0, 1)]
            + [Job(f"h{s}", held, seed=s, settings={"dir": str(d)}) for s in (0, 1)]
            + [Job("sum", combine, deps=("a0", "a1", "h0", "h1"))])
'''

SCRIPT_SRC = '''
import json, signal, sys
# a shell's background job starts with SIGINT ignored, and Python then keeps it so: Ctrl-C as in a terminal
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {dir!r})
from iclr25.core.runner import RunInterrupted, run_jobs
from {mod} import jobs_for


def main():
    out, resume, workers = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
    try:
        res = run_jobs(jobs_for({dir!r}), out, workers=workers, resume=resume, quiet=True)
    except RunInterrupted as e:
        print(f"interrupted: {{e}}", file=sys.stderr)
        return 130
    print(json.dumps({{"ran": res.ran, "reused": res.reused}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    d = tmp_path / "mods"
    d.mkdir()
    (d / f"{MOD}.py").write_text(JOBS_SRC)
    (d / "script.py").write_text(SCRIPT_SRC.format(dir=str(d), mod=MOD))
    monkeypatch.syspath_prepend(str(d))
    sys.modules.pop(MOD, None)
    import importlib

    mod = importlib.import_module(MOD)
    yield mod, d
    sys.modules.pop(MOD, None)


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", ICLR25_QUIET="1")
    return env


def _wait(cond, timeout=60.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped by whoever adopted it) counts as dead
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_records_equal_for_one_and_two_workers_and_deps_first(toy, tmp_path):
    mod, _ = toy
    log1, log2 = tmp_path / "log1.txt", tmp_path / "log2.txt"

    def jobs(log):
        base = [Job("base", mod.draw, seed=7, settings={"sleep": 0.3, "tag": "base", "log": str(log)})]
        kids = [Job(f"kid{s}", mod.draw, seed=s, settings={"tag": f"kid{s}", "log": str(log)}, deps=("base",))
                for s in (0, 1)]
        free = [Job("free", mod.draw, seed=3, settings={"tag": "free", "log": str(log)})]
        return kids + base + free + [Job("combine", mod.combine, settings={"log": str(log)},
                                         deps=("kid0", "kid1", "free"))]

    r1 = run_jobs(jobs(log1), tmp_path / "w1", workers=1, quiet=True)
    r2 = run_jobs(jobs(log2), tmp_path / "w2", workers=2, quiet=True)
    assert r1.workers == 1 and r2.workers == 2
    assert r1.records == r2.records                          # same numbers whatever the number of workers
    assert list(r1.records) == ["kid0", "kid1", "base", "free", "combine"]   # declaration order
    assert r1.records["kid0"]["pair"] == [1, 2]          # returned as after a JSON round trip
    assert r1.records["combine"]["deps"] == ["free", "kid0", "kid1"]
    assert r1.records["combine"]["sum"] == pytest.approx(sum(r1.records[k]["x"] for k in ("free", "kid0", "kid1")))
    assert load_records(tmp_path / "w2") == r2.records
    # dependency order in the 2-worker run: each kid starts after base ended, combine after every dep ended
    t = {}
    for line in log2.read_text().splitlines():
        what, name, stamp = line.split()[0], line.split()[1], float(line.split()[2])
        t[(what, name)] = stamp
    assert t[("start", "kid0")] >= t[("end", "base")] and t[("start", "kid1")] >= t[("end", "base")]
    assert t[("start", "combine")] >= max(t[("end", n)] for n in ("kid0", "kid1", "free"))
    rec = json.loads((tmp_path / "w2" / "records" / "combine.json").read_text())
    assert rec["job"] == "combine" and rec["deps"] == ["kid0", "kid1", "free"] and "cpu_seconds" in rec


def test_declarations_refused_by_name(toy, tmp_path):
    mod, _ = toy
    with pytest.raises(ValueError, match="unknown job"):
        run_jobs([Job("a", mod.draw, deps=("nope",))], tmp_path, quiet=True)
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        run_jobs([Job("a", mod.draw, deps=("b",)), Job("b", mod.draw, deps=("a",))], tmp_path, quiet=True)
    with pytest.raises(ValueError, match="unique"):
        run_jobs([Job("a", mod.draw), Job("a", mod.draw)], tmp_path, quiet=True)
    with pytest.raises(ValueError, match="file-name safe"):
        Job("a/b", mod.draw)
    with pytest.raises(ValueError, match="top-level"):
        Job("a", lambda s, seed, d: 1)
    with pytest.raises(ValueError, match="JSON-ready"):
        Job("a", mod.draw, settings={"p": Path("x")})
    with pytest.raises(JobFailed, match=r"job 'n' returned a record that is not JSON-ready: record.deep\[0\].v is nan"):
        run_jobs([Job("n", mod.nan)], tmp_path, workers=1, quiet=True)


def test_not_json_record_messages_give_the_fix_for_that_problem():
    from iclr25.core.runner.jobs import _bad_json

    assert "return None for an undefined number" in _bad_json({"a": [float("nan")]})
    int_key = _bad_json({"per_seed": {0: 1.0}})
    assert "non-string key 0" in int_key and "str(key)" in int_key and "None" not in int_key


@pytest.mark.parametrize("workers", [1, 2])
def test_failing_job_is_named_with_traceback_and_finished_records_kept(toy, tmp_path, workers):
    mod, _ = toy
    jobs = [Job("fine", mod.draw, seed=0), Job("bad", mod.fail, seed=1, settings={"sleep": 0.5}),
            Job("after", mod.draw, seed=2, deps=("bad",))]
    with pytest.raises(JobFailed) as ei:
        run_jobs(jobs, tmp_path, workers=workers, quiet=True)
    msg = str(ei.value)
    assert ei.value.job == "bad"
    assert "job 'bad' failed" in msg and "RuntimeError: boom from the toy job" in msg
    assert "Traceback" in msg and "in fail" in msg                        # the worker's traceback
    assert "--resume" in ei.value.summary
    assert (tmp_path / "records" / "fine.json").is_file()
    assert not (tmp_path / "records" / "after.json").exists()


def test_changed_settings_refused_on_resume_and_a_fresh_run_starts_over(toy, tmp_path):
    mod, _ = toy
    r = run_jobs([Job("a", mod.draw, seed=0, settings={"n": 1})], tmp_path, workers=1, quiet=True)
    again = run_jobs([Job("a", mod.draw, seed=0, settings={"n": 1})], tmp_path, workers=1, resume=True, quiet=True)
    assert again.reused == ["a"] and again.ran == [] and again.records == r.records   # report-only: nothing runs
    with pytest.raises(ValueError, match=r"other settings \(job a\.settings\.n: 1 -> 2\)"):
        run_jobs([Job("a", mod.draw, seed=0, settings={"n": 2})], tmp_path, workers=1, resume=True, quiet=True)
    with pytest.raises(ValueError, match="other settings"):
        run_jobs([Job("a", mod.draw, seed=1, settings={"n": 1})], tmp_path, workers=1, resume=True, quiet=True)
    with pytest.raises(ValueError, match=r"run data: None -> 'y'"):
        run_jobs([Job("a", mod.draw, seed=0, settings={"n": 1})], tmp_path, resume=True, quiet=True,
                 run_settings={"data": "y"})
    # without the settings file the record itself is checked
    (tmp_path / "runner_settings.json").unlink()
    with pytest.raises(ValueError, match="record .*a.json of job 'a' was made with other settings"):
        run_jobs([Job("a", mod.draw, seed=0, settings={"n": 3})], tmp_path, workers=1, resume=True, quiet=True)
    fresh = run_jobs([Job("a", mod.draw, seed=0, settings={"n": 3})], tmp_path, workers=1, quiet=True)
    assert fresh.ran == ["a"] and fresh.records["a"]["n"] == 3


def test_children_cpu_is_counted(toy, tmp_path):
    mod, _ = toy
    jobs = [Job(f"burn{i}", mod.burn, settings={"cpu": 0.4}) for i in range(2)]
    r = run_jobs(jobs, tmp_path, workers=2, quiet=True)
    assert all(r.job_cpu_seconds[j.name] >= 0.4 for j in jobs)
    assert r.cpu_seconds_children >= 0.8                      # the workers' seconds reach RUSAGE_CHILDREN
    assert r.cpu_seconds >= r.cpu_seconds_children
    assert r.summary()["cpu_seconds_children"] == r.cpu_seconds_children
    assert r.cpu_seconds_self < 1.0                           # the parent only waited


def _start(d: Path, out: Path, resume: bool, workers: int = 2) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(d / "script.py"), str(out), "1" if resume else "0", str(workers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)


def _reference(mod, d: Path, tmp_path: Path) -> dict:
    (d / "release").write_text("")
    try:
        return run_jobs(mod.jobs_for(d), tmp_path / "ref", workers=1, quiet=True).records
    finally:
        (d / "release").unlink()


def test_resume_after_sigkill_of_the_parent(toy, tmp_path):
    mod, d = toy
    ref = _reference(mod, d, tmp_path)
    out = tmp_path / "run"
    p = _start(d, out, resume=False)
    try:
        _wait(lambda: all((out / "records" / f"a{s}.json").is_file() for s in (0, 1))
              and (d / "started-0").is_file(), what="a0, a1 finished and h0 started")
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
    worker = int((d / "started-0").read_text())
    _wait(lambda: not _alive(worker), timeout=10, what=f"worker {worker} to die with its parent")
    assert sorted(f.name for f in (out / "records").glob("*.json")) == ["a0.json", "a1.json"]
    (d / "release").write_text("")
    r = subprocess.run([sys.executable, str(d / "script.py"), str(out), "1", "2"], capture_output=True, text=True,
                       env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout.strip().splitlines()[-1])
    assert done["reused"] == ["a0", "a1"] and sorted(done["ran"]) == ["h0", "h1", "sum"]
    assert load_records(out) == ref                               # the same final records as one clean run


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_workers_and_keep_records(toy, tmp_path, sig):
    mod, d = toy
    out = tmp_path / "run"
    p = _start(d, out, resume=False)
    try:
        _wait(lambda: all((out / "records" / f"a{s}.json").is_file() for s in (0, 1))
              and (d / "started-0").is_file(), what="a0, a1 finished and h0 started")
        if sig == signal.SIGINT:
            os.killpg(p.pid, signal.SIGINT)                      # Ctrl-C: the whole process group
        else:
            os.kill(p.pid, signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 130, err
    assert "interrupted:" in err and "2/5 jobs finished" in err and "rerun with --resume to run the 3 left" in err
    assert "Traceback" not in err                                # workers ignore SIGINT; nothing printed by them
    assert "leaked semaphore" not in err                         # a stopped worker cleans up what it held
    assert not _alive(int((d / "started-0").read_text()))        # stopped and waited for
    assert sorted(f.name for f in (out / "records").glob("*.json")) == ["a0.json", "a1.json"]


def test_interrupt_in_process_raises_run_interrupted(toy, tmp_path, monkeypatch):
    mod, _ = toy
    calls = []

    def stop(settings, seed, deps):
        calls.append(seed)
        raise KeyboardInterrupt

    monkeypatch.setattr(mod, "fail", stop)
    with pytest.raises(RunInterrupted, match="1/2 jobs finished.*--resume"):
        run_jobs([Job("ok", mod.draw), Job("stop", f"{MOD}:fail", seed=5, deps=("ok",))], tmp_path, workers=1, quiet=True)
    assert calls == [5] and (tmp_path / "records" / "ok.json").is_file()


def test_workers_default_and_bad_values(toy, tmp_path):
    mod, _ = toy
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        run_jobs([Job("a", mod.draw)], tmp_path, workers=0, quiet=True)
    r = run_jobs([Job("a", mod.draw)], tmp_path, quiet=True)     # one job: one worker, in this process
    assert r.workers == 1


def test_module_is_torch_free_at_import():
    code = textwrap.dedent("""
        import sys
        import iclr25.core.runner
        print("torch" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_nan_to_none_round_trip():
    rec = {"a": float("nan"), "b": [1.0, float("nan"), (2, float("nan"))], "c": {"d": 3}}
    out = nan_to_none(rec)
    assert out == {"a": None, "b": [1.0, None, [2, None]], "c": {"d": 3}}
    back = none_to_nan(json.loads(json.dumps(out)))
    assert back["b"][0] == 1.0 and back["b"][1] != back["b"][1] and back["c"] == {"d": 3}
    assert nan_to_none(float("inf")) == float("inf")          # an inf is not "undefined": the runner refuses it


def _needs_missing_module(settings, seed, deps):
    import iclr25_no_such_module_xyz  # noqa: F401

    return {}


@pytest.mark.parametrize("workers", [1, 2])
def test_missing_module_in_a_job_stays_a_module_not_found_error(tmp_path, workers):
    """A job whose extra is not installed: the failure is still a ModuleNotFoundError naming the module (so
    run_cli names the extra in one line), and a JobFailed naming the job."""
    from iclr25.core.runner import Job, JobFailed, run_jobs

    with pytest.raises(ModuleNotFoundError) as e:
        run_jobs([Job("a", _needs_missing_module, 0, {})], tmp_path, workers=workers)
    assert e.value.name == "iclr25_no_such_module_xyz" and isinstance(e.value, JobFailed) and e.value.job == "a"


def test_reproduce_through_the_runner_counts_children_cpu(toy, tmp_path, monkeypatch, capsys):
    """``results.json`` of a reproduction that runs its jobs in workers records the workers' CPU seconds, and
    the umbrella ``iclr25 reproduce`` prints and writes the total and per-method CPU seconds."""
    import types
    from importlib.metadata import EntryPoint

    from iclr25.core import registry
    from iclr25.core.results import Claim, read_report

    mod, _ = toy

    def reproduce(quick, out_dir, workers=None):
        jobs = [Job(f"burn{i}", mod.burn, settings={"cpu": 0.4}) for i in range(2)]
        res = run_jobs(jobs, out_dir / "jobs", workers=workers or 2, quiet=True)
        return [Claim("toy/burned", "CPU-s", sum(r["burned"] for r in res.records.values()), threshold=0.8,
                      paper_ref="direction only", n_seeds=1)]

    rep = registry.run_reproduction("toy", reproduce, quick=True, out_dir=tmp_path / "direct")
    assert read_report(tmp_path / "direct").cpu_seconds == rep.cpu_seconds >= 0.8  # both workers' seconds

    fake = types.ModuleType("iclr25_toy_method")
    fake.reproduce = reproduce
    monkeypatch.setitem(sys.modules, "iclr25_toy_method", fake)
    ep = EntryPoint(name="toy", value="iclr25_toy_method:reproduce", group=registry.GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == registry.GROUP else [])
    out = tmp_path / "umbrella"
    assert registry.main(["reproduce", "--quick", "--quiet", "--workers", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("CPU: "))
    assert "in total (this process and its children); per method: toy " in line
    summary = json.loads((out / "summary.json").read_text())
    per = summary["methods"][0]
    assert per["method"] == "toy" and per["status"] == "ok" and per["holding"] == per["claims"] == 1
    assert per["cpu_seconds"] == read_report(out / "toy").cpu_seconds >= 0.8
    assert summary["total_cpu_seconds"] >= per["cpu_seconds"]
    assert f"{summary['total_cpu_seconds']:.1f} s in total" in line
    md = (out / "summary.md").read_text()
    assert "| toy | ok | 1/1 |" in md and "| **total** |" in md and "s CPU in total" in md


def test_interrupt_right_after_a_record_is_written_counts_it(toy, tmp_path, monkeypatch):
    """A Ctrl-C/SIGTERM that lands after a record file is written but before the runner noted it in memory:
    the message counts the records kept on disk (it said 1/5 while 2 were kept, a loaded machine's race)."""
    from iclr25.core.runner import schedule

    mod, _ = toy
    real = schedule.atomic_write_json

    def write_then_interrupt(path, obj, **kw):
        real(path, obj, **kw)
        if Path(path).parent.name == "records":
            raise KeyboardInterrupt  # the signal arrives just after the write

    monkeypatch.setattr(schedule, "atomic_write_json", write_then_interrupt)
    jobs = [Job(f"a{s}", mod.draw, seed=s) for s in (0, 1)]
    with pytest.raises(RunInterrupted) as e:
        run_jobs(jobs, tmp_path / "run", workers=1, quiet=True)
    kept = sorted(f.name for f in (tmp_path / "run" / "records").glob("*.json"))
    assert kept == ["a0.json"]
    assert "1/2 jobs finished" in str(e.value) and "to run the 1 left" in str(e.value)


def test_resume_into_a_run_of_other_jobs_says_so_in_one_message(toy, tmp_path):
    """Another preset or other seeds change the set of jobs: the refusal says "other jobs", not a diff per job."""
    mod, _ = toy
    run_jobs([Job(f"a{s}", mod.draw, seed=s) for s in (0, 1)], tmp_path, workers=1, quiet=True)
    with pytest.raises(ValueError, match=r"other jobs \(1 of its 2 jobs are not in this run \(a1\); 2 of this "
                                         r"run's 3 jobs are not in it \(b0, b1\)\); another preset") as ei:
        run_jobs([Job("a0", mod.draw, seed=0)] + [Job(f"b{s}", mod.draw, seed=s) for s in (0, 1)], tmp_path,
                 workers=1, resume=True, quiet=True)
    assert "settings.n" not in str(ei.value)
    # the same jobs with another setting: the per-setting diff, as before
    with pytest.raises(ValueError, match=r"other settings \(job a0\.settings\.n: None -> 5"):
        run_jobs([Job(f"a{s}", mod.draw, seed=s, settings={"n": 5} if s == 0 else {}) for s in (0, 1)], tmp_path,
                 workers=1, resume=True, quiet=True)


def test_resume_with_nothing_to_resume_says_so(toy, tmp_path, caplog):
    mod, _ = toy
    with caplog.at_level("WARNING", logger="iclr25.core.runner"):
        r = run_jobs([Job("a", mod.draw, seed=0)], tmp_path / "new", workers=1, resume=True, quiet=True)
    assert r.ran == ["a"] and r.reused == []
    warned = [m for m in caplog.messages if "--resume" in m]
    assert len(warned) == 1 and "nothing to resume" in warned[0] and "all 1 jobs run" in warned[0], warned


def env_and_worker(settings, seed, deps):
    from iclr25.core.runner import in_worker

    return {"env": {k: os.environ.get(k) for k in settings["keys"]}, "in_worker": in_worker()}


def test_worker_env_reaches_workers_only_and_user_values_win(toy, tmp_path, monkeypatch):
    """``worker_env``: the spawned workers start with it (a value already set here wins); this process's environment
    is restored; ``in_worker()`` is True in a worker and False in this process."""
    mod, d = toy
    (d / f"{MOD}_env.py").write_text("import os\n\n" + textwrap.dedent(inspect.getsource(env_and_worker)))
    keys = ["ICLR25_TEST_A", "ICLR25_TEST_B"]
    monkeypatch.delenv("ICLR25_TEST_A", raising=False)
    monkeypatch.setenv("ICLR25_TEST_B", "mine")
    jobs = [Job(f"e{s}", f"{MOD}_env:env_and_worker", seed=s, settings={"keys": keys}) for s in (0, 1)]
    r = run_jobs(jobs, tmp_path / "two", workers=2, quiet=True, worker_env={"ICLR25_TEST_A": "1", "ICLR25_TEST_B": "2"})
    assert all(rec == {"env": {"ICLR25_TEST_A": "1", "ICLR25_TEST_B": "mine"}, "in_worker": True}
               for rec in r.records.values()), r.records
    assert "ICLR25_TEST_A" not in os.environ and os.environ["ICLR25_TEST_B"] == "mine"
    here = run_jobs(jobs, tmp_path / "one", workers=1, quiet=True, worker_env={"ICLR25_TEST_A": "1"})
    assert all(rec["in_worker"] is False and rec["env"]["ICLR25_TEST_A"] is None for rec in here.records.values())


def test_resume_reruns_the_dependents_of_a_job_that_runs_again(toy, tmp_path, caplog):
    """A record deleted (or damaged and removed) before --resume: its job runs again, and so does every finished
    job built on it (q-adapter's method jobs take their step-0 point from the base record); others are kept."""
    mod, _ = toy
    jobs = ([Job(f"a{s}", mod.draw, seed=s) for s in (0, 1)] + [Job("sum", mod.combine, deps=("a0", "a1"))]
            + [Job("top", mod.draw, seed=7, deps=("sum",)), Job("lone", mod.draw, seed=5)])
    first = run_jobs(jobs, tmp_path, workers=1, quiet=True)
    (tmp_path / "records" / "a0.json").unlink()
    with caplog.at_level("WARNING", logger="iclr25.core.runner"):
        again = run_jobs(jobs, tmp_path, workers=1, resume=True, quiet=True)
    assert sorted(again.reused) == ["a1", "lone"] and sorted(again.ran) == ["a0", "sum", "top"]
    assert again.records == first.records
    assert any("depend on a job that runs again" in m and "sum, top" in m for m in caplog.messages), caplog.messages
