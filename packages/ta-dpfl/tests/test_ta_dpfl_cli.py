"""CLI as a subprocess: --help, schedule, an infeasible budget (error before training)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def run(*args, timeout=240):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "iclr25.ta_dpfl", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _session_pids(sid):
    """PIDs of the live processes in session ``sid`` (Linux /proc; zombies excluded)."""
    out = []
    for e in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{e}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            out.append(int(e))
    return out


def run_session(*args, timeout):
    """The CLI in its own session (Ray's GCS server, raylet and workers join it), bounded in time: on
    timeout the whole session is killed and the test fails saying so; after a normal exit every process
    left in the session is stopped and the test fails if one had to be (an orphan raylet)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "TA_DPFL_RAY_START_ATTEMPTS": "2"}
    p = subprocess.Popen([sys.executable, "-m", "iclr25.ta_dpfl", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        pytest.fail(f"`{' '.join(args[:1])}` did not finish within {timeout} s (killed with all its processes); "
                    f"stderr tail:\n{err[-2000:]}")
    deadline = time.monotonic() + 20  # Ray's own shutdown may still be stopping its processes
    while _session_pids(p.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _session_pids(p.pid)
    if left:
        os.killpg(p.pid, signal.SIGKILL)
    assert not left, f"processes left running after the CLI exited (killed now): {left}"
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_help_lists_subcommands():
    r = run("--help")
    assert r.returncode == 0
    for sub in ("schedule", "train", "reproduce"):
        assert sub in r.stdout


def test_schedule_prints_rates_and_per_round_epsilon(tmp_path):
    r = run("schedule", "--num-clients", "3", "--rounds", "6", "--local-steps", "2", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "schedule.json"
    assert "q_saving" in r.stdout and "epsilon spent after each round" in r.stdout
    data = json.loads(out.read_text())
    assert [d["epsilon"] for d in data] == [1.0, 2.0, 4.0]
    for d in data:
        e = d["epsilon_per_round"]
        assert all(b >= a for a, b in zip(e, e[1:])) and e[-1] <= d["epsilon"]


def test_train_infeasible_budget_fails_before_training(tmp_path):
    r = run("train", "--dataset", "digits", "--num-clients", "3", "--epsilons", "0.3", "--rhos", "1.0",
            "--sigma", "0.8",
            "--min-expected-batch", "50", "--out", str(tmp_path))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "Smallest feasible sigma" in r.stderr and "largest feasible rounds" in r.stderr
    assert not list(tmp_path.glob("*/checkpoints/*"))


@pytest.mark.slow
def test_train_checkpoints_and_resume(tmp_path):
    """Flower simulation (Ray): 2 rounds, then --resume to 3 rounds continues from the checkpoint."""
    base = ["train", "--dataset", "digits", "--num-clients", "3", "--local-steps", "2", "--min-expected-batch", "1",
            "--out", str(tmp_path), "--quiet", "--insecure-seed"]
    r = run_session(*base, "--rounds", "3", timeout=600)
    if r.returncode == 3 and "did not start" in r.stderr:  # RayStartupError: bounded, nothing left running
        pytest.fail(f"Ray did not start (machine overloaded?): {r.stderr[-1500:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "ta-seed0"
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt")) == [
        "round_001.pt", "round_002.pt", "round_003.pt"]
    full = json.loads((run_dir / "result.json").read_text())
    # drop the last checkpoint and metrics row, resume: round 3 is redone from round 2's model
    (run_dir / "checkpoints" / "round_003.pt").unlink()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()[:2]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    r = run_session(*base, "--rounds", "3", "--resume", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((run_dir / "result.json").read_text())
    assert len(res["accuracy_per_round"]) == 3
    assert res["accuracy_per_round"][:2] == full["accuracy_per_round"][:2]
    assert res["epsilon_spent"] == pytest.approx(full["epsilon_spent"], rel=1e-9)


@pytest.mark.parametrize("cmd", ["schedule", "train"])
def test_rhos_not_one_per_group_is_an_error(cmd, tmp_path, capsys):
    """--rhos with fewer values than --epsilons groups was broadcast silently; now exit 2, one line."""
    from iclr25.ta_dpfl.cli import main

    rc = main([cmd, "--epsilons", "1", "2", "4", "--rhos", "0.5", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--rhos has 1 value(s) [0.5] for 3 --epsilons group(s)" in err[0]
    assert not list(tmp_path.iterdir())


def test_schedule_says_when_the_guard_changes_the_plan():
    """At sigma=1.5 the Adult eps=1, rho=0.25 clients get q*m ~ 13.8 < 20: the table names them (and
    their q*m agrees with the rates printed); at sigma=2.2 nobody is named."""
    from iclr25.ta_dpfl.cli import schedule_table
    from iclr25.ta_dpfl.config import ScheduleConfig

    text, data = schedule_table(ScheduleConfig(sigma=1.5, per_round=False))
    assert "guard q*m_n >= 20 (m_n=2170) changes this plan: 4 of 12 client(s) fail it" in text
    q_min = min(data[0]["rates"]) * 2170
    assert f"client 0 (eps=1, rho=0.25): smallest q*m = {q_min:.1f} < 20" in text and q_min < 20
    assert "client 4 " not in text.split("changes this plan")[1]
    text, _ = schedule_table(ScheduleConfig(sigma=2.2, per_round=False))
    assert "guard" not in text


def test_train_quick_is_a_deprecated_alias_of_rounds_10(monkeypatch, capsys):
    """``--quick`` belongs to ``reproduce``: on ``train`` it is rewritten to ``--rounds=10`` with a warning."""
    from iclr25.ta_dpfl import cli

    seen = {}
    monkeypatch.setattr(cli, "_train", lambda cfg: seen.update(cfg=cfg) or 0)
    with pytest.warns(FutureWarning, match="--quick is deprecated.*use --rounds=10"):
        assert cli.main(["train", "--quick"]) == 0
    assert seen["cfg"].rounds == 10 and not hasattr(seen["cfg"], "quick")
    assert "--quick is deprecated" in capsys.readouterr().err


def test_schedule_has_no_json_out_flag(tmp_path):
    r = run("schedule", "--num-clients", "3", "--rounds", "6", "--json-out", str(tmp_path / "s.json"))
    assert r.returncode != 0 and "--json-out" in r.stderr
