"""CLI: one subprocess test (--help + demo); the rest in-process through ``main(argv)`` (fast)."""

import json
import os
import subprocess
import sys

import pytest

from iclr25.lotos.cli import main

CMD = [sys.executable, "-m", "iclr25.lotos"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_subprocess_help_and_demo():
    r = subprocess.run([*CMD, "--help"], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0
    for sub in ("train", "evaluate", "reproduce", "demo"):
        assert sub in r.stdout
    r = subprocess.run([*CMD, "demo"], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "8.290859" in r.stdout and "0.4000" in r.stdout and "4.4000" in r.stdout


class Res:
    def __init__(self, code, out, err):
        self.returncode, self.stdout, self.stderr = code, out, err


@pytest.fixture
def run(capsys):
    def _run(*args, check=True):
        code = main(list(args))
        cap = capsys.readouterr()
        if check and code != 0:
            raise AssertionError(f"exit {code}\nstdout:\n{cap.out}\nstderr:\n{cap.err}")
        return Res(code, cap.out, cap.err)
    return _run


@pytest.mark.parametrize("sub", ["train", "evaluate", "reproduce", "demo"])
def test_help(sub, run):
    assert "usage" in run(sub, "--help").stdout.lower()


def test_bad_flag_is_clean_error(run):
    r = run("train", "--method", "lotos", "--num-models", "1", check=False)
    assert r.returncode == 2 and "num_models" in r.stderr and "Traceback" not in r.stderr
    r = run("evaluate", "--eps", "2", check=False)
    assert r.returncode == 2 and "outside" in r.stderr


def test_train_resume_evaluate(tmp_path, run):
    pytest.importorskip("sklearn", reason="the digits data set needs the [digits] extra")
    common = ["--data", "digits", "--n-train", "96", "--width", "4", "--num-models", "2", "--batch-size", "32",
              "--clip-every", "2", "--quiet", "--device", "cpu"]
    ens, sur = tmp_path / "ens", tmp_path / "sur"
    run("train", "--method", "lotos", "--epochs", "1", "--out", str(ens), *common)
    assert (ens / "checkpoint.pt").is_file() and (ens / "models.pt").is_file()
    r = run("train", "--method", "lotos", "--epochs", "2", "--resume", "--out", str(ens), *common)
    assert "trained 2 lotos models for 2 epochs" in r.stdout
    lines = (ens / "metrics.jsonl").read_text().strip().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2]
    run("train", "--method", "orig", "--epochs", "1", "--seed", "7", "--out", str(sur), *common)
    r = run("evaluate", "--ensemble", str(ens), "--surrogate", str(sur), "--n-test", "40", "--steps", "2",
            "--device", "cpu", "--out", str(tmp_path / "eval"))
    res = json.loads((tmp_path / "eval" / "eval.json").read_text())
    spec = json.loads((ens / "spectral.json").read_text())  # true σ_1 of every clipped layer, per member
    assert len(spec["members"]) == 2 and spec["max_true_over_clip_after"] <= 1.0 + 1e-3
    for k in ("clean_acc_ensemble", "mean_transfer", "blackbox_robust_acc", "mean_cross_gain", "transfer_matrix"):
        assert k in res
    assert len(res["transfer_matrix"]) == 2 and len(res["cross_gain"]) == 4


def test_resume_without_checkpoint_fails(tmp_path, run):
    pytest.importorskip("sklearn", reason="the digits data set needs the [digits] extra")
    res = run("train", "--data", "digits", "--n-train", "32", "--width", "4", "--epochs", "1", "--resume",
              "--out", str(tmp_path / "none"), "--quiet", check=False)
    assert res.returncode == 2 and "no checkpoint" in res.stderr and "Traceback" not in res.stderr


def test_resume_from_a_corrupt_checkpoint_is_a_clean_error(tmp_path, run):
    """New-user trial: a junk checkpoint.pt under --resume gave a KeyError traceback."""
    out = tmp_path / "junk"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"not a checkpoint")
    res = run("train", "--data", "digits", "--n-train", "32", "--width", "4", "--epochs", "1", "--resume",
              "--out", str(out), "--quiet", "--device", "cpu", check=False)
    assert res.returncode == 2 and "corrupt, truncated" in res.stderr and "Traceback" not in res.stderr
