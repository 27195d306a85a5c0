"""CLI tests: the console script as a subprocess (help, demo, poison -> train -> detect)."""

import json
import os
import subprocess
import sys


def _run(*args, cwd=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "iclr25.agpd", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_help_lists_subcommands():
    r = _run("--help")
    assert r.returncode == 0
    for sub in ("poison", "train", "detect", "reproduce", "demo"):
        assert sub in r.stdout
    r = _run("detect", "--help")
    assert r.returncode == 0 and "--agpd.variant" in r.stdout


def test_bad_flag_and_missing_input_give_clear_errors(tmp_path):
    r = _run("poison", "--out", str(tmp_path), "--attack", "trojan")
    assert r.returncode == 2
    r = _run("train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "m"))
    assert r.returncode == 2 and "iclr25-agpd poison" in r.stderr


def test_demo_recovers_planted_target():
    r = _run("demo", "--n-per-class", "100")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("demo (paper): targets [0]; TPR 1.0000 FPR 0.0000")


def test_poison_train_detect_tiny(tmp_path):
    """poison -> train (1 epoch) -> resume -> detect; the BackdoorBench variant via the flag."""
    variant = "backdoorbench"
    d, m = tmp_path / "data", tmp_path / "model"
    r = _run("poison", "--out", str(d), "--attack", "badnets", "--ratio", "0.1")
    assert r.returncode == 0, r.stderr
    assert "poisoned 135/1347" in r.stdout
    r = _run("train", "--data", str(d), "--out", str(m), "--epochs", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    assert (m / "model.pt").is_file() and (m / "checkpoint.pt").is_file()
    r = _run("train", "--data", str(d), "--out", str(m), "--epochs", "1", "--resume", "--quiet")
    assert r.returncode == 0, r.stderr  # resumes at epoch 1 of 1: nothing left to train
    r = _run("detect", "--data", str(d), "--model", str(m), "--agpd.variant", variant, "--baselines", "spectral",
             "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads((m / "detection.json").read_text())
    assert {"TPR", "FPR", "F1", "target_classes", "layer"} <= set(out["agpd"])
    assert set(out["baselines"]) == {"spectral"}
    assert r.stdout.startswith(f"AGPD ({variant}): targets")
