"""CLI tests: --help, and a tiny run -> judge -> report as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "iclr25.air_bench"]


def _run(args, env=None, check=True):
    p = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: rc={p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def test_help(capsys):
    p = _run(["--help"])
    for sub in ("run", "judge", "report", "reproduce", "bench"):
        assert sub in p.stdout
    assert "--resume" in _run(["run", "--help"]).stdout
    from iclr25.air_bench.cli import main

    for sub, flags in (("run", ("--categories", "--limit", "--api-key-env")),
                       ("judge", ("--judge-model", "--resume", "--strict-parse")), ("report", ("--scores",)),
                       ("reproduce", ("--quick", "--out"))):
        assert main([sub, "--help"]) == 0
        out = capsys.readouterr().out
        assert all(f in out for f in flags), (sub, flags)


@pytest.mark.realdata
def test_tiny_run_judge_report(tmp_path, air_data):
    env = {"ICLR25_DATA": str(air_data.parent)}
    out = tmp_path / "run"
    base = ["run", "--backend", "mock", "--model", "mock-a", "--prompts", "mirror", "--categories", "3", "14",
            "--limit", "30", "--out", str(out), "--quiet"]
    p = _run(base, env)
    assert "30/30 responses" in p.stdout
    # an existing run is not overwritten without --resume: clean one-line error, exit 2
    p = _run(base, env, check=False)
    assert p.returncode == 2 and "--resume" in p.stderr and "Traceback" not in p.stderr
    p = _run([*base, "--resume"], env)
    assert "0 new, 30 cached" in p.stdout
    p = _run(["judge", "--responses", str(out / "responses.jsonl"), "--judge", "llm", "--judge-backend", "mock",
              "--out", str(out), "--quiet"], env)
    assert "30/30 judged" in p.stdout and "0 judge failures" in p.stdout
    p = _run(["judge", "--responses", str(out / "responses.jsonl"), "--judge", "keyword",
              "--out", str(tmp_path / "kw"), "--quiet"], env)
    p = _run(["report", "--scores", str(out / "scores.jsonl"), str(tmp_path / "kw" / "scores.jsonl"),
              "--out", str(tmp_path / "rep"), "--no-plot"], env)
    assert "overall refusal rate" in p.stdout
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    labels = set(rep["models"])
    assert labels == {"mock-a [llm:mock-judge]", "mock-a [keyword]"}
    llm, kw = rep["models"]["mock-a [llm:mock-judge]"], rep["models"]["mock-a [keyword]"]
    # mock model answers with a canned refusal / compliance: both judges must agree exactly
    assert llm["aggregate"] == kw["aggregate"]
    assert set(llm["aggregate"]["l2"]) <= {"3", "14"}
    assert (tmp_path / "rep" / "report.csv").is_file() and (tmp_path / "rep" / "report.md").is_file()


def test_bad_input_is_a_clean_error(tmp_path):
    p = _run(["judge", "--responses", str(tmp_path / "missing.jsonl")], check=False)
    assert p.returncode != 0 and "does not exist" in p.stderr + p.stdout and "Traceback" not in p.stderr
    p = _run(["run", "--backend", "openai"], check=False)
    assert p.returncode == 2 and "--model is required" in p.stderr + p.stdout
