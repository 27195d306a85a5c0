"""CLI: --help, error exits, and a tiny bon-sample / train / --resume / evaluate run as subprocesses."""

import json
import os
import subprocess
import sys

import pytest


def _run(args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "iclr25.vbon", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_help_lists_subcommands():
    r = _run(["--help"])
    assert r.returncode == 0
    for cmd in ("bon-sample", "train", "evaluate", "reproduce"):
        assert cmd in r.stdout
    r = _run(["train", "--help"])
    assert r.returncode == 0 and "--vbon.n" in r.stdout and "--resume" in r.stdout


def test_bad_input_exits_2(tmp_path):
    r = _run(["train", "--vbon.n", "1", "--output-dir", str(tmp_path)])
    assert r.returncode == 2 and "n must be >= 2" in r.stderr
    r = _run(["train", "--resume", "--output-dir", str(tmp_path / "none")])
    assert r.returncode == 2 and "no checkpoint" in r.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    r = _run(["bon-sample", "--prompts-file", str(empty)])
    assert r.returncode == 2 and "empty" in r.stderr


@pytest.mark.realdata
def test_tiny_train_resume_evaluate(tiny_lm, data_dir, tmp_path):
    model, tok = tiny_lm
    lm = tmp_path / "lm"
    model.save_pretrained(lm)
    tok.save_pretrained(lm)
    prompts = tmp_path / "p.txt"
    prompts.write_text("the movie is\na very\nthe plot and\ncast is a\n")
    env = {"ICLR25_DATA": str(data_dir), "ICLR25_CACHE": str(tmp_path / "cache")}
    common = ["--models.policy", str(lm), "--prompts-file", str(prompts)]
    r = _run(["bon-sample", "--n", "4", "--max-new-tokens", "6", "--output", str(tmp_path / "b.jsonl"), *common], env)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["best_reward"] == max(row["rewards"]) for row in rows)
    out = tmp_path / "run"
    base = ["train", "--output-dir", str(out), "--vbon.m", "8", "--vbon.prompts-per-step", "2",
            "--vbon.samples-per-prompt", "2", "--vbon.max-new-tokens", "6", "--save-every", "1", "--quiet", *common]
    r = _run([*base, "--vbon.steps", "2"], env)
    assert r.returncode == 0, r.stderr
    assert (out / "checkpoint" / "trainer_state.pt").is_file() and (out / "reward_cdf.jsonl").is_file()
    r = _run([*base, "--vbon.steps", "3", "--resume"], env)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "results.json").read_text())["steps"] == 3
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    r = _run(["evaluate", "--checkpoint", str(out / "checkpoint"), "--num-prompts", "4", "--samples-per-prompt", "2",
              "--max-new-tokens", "6", *common], env)
    assert r.returncode == 0, r.stderr
    ev = json.loads((out / "eval.json").read_text())
    assert 0 <= ev["win_rate"] <= 1 and r.stdout.strip().splitlines()[-1].startswith("evaluate:")
