"""CLI tests: the console script as a subprocess (--help, poison -> train -> detect), plus
in-process calls of ``main`` for errors, ``--resume`` and ``demo`` (cheaper than a new process)."""

import json
import os
import subprocess
import sys

import pytest
import torch

from iclr25.agpd.cli import main
from iclr25.agpd.train import load_checkpoint


def _run(*args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "iclr25.agpd", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_help_lists_subcommands():
    r = _run("--help")
    assert r.returncode == 0
    for sub in ("poison", "train", "detect", "reproduce", "demo"):
        assert sub in r.stdout


def test_subcommand_help_and_clear_errors(tmp_path, capsys):
    assert main(["detect", "--help"]) == 0
    assert "--agpd.variant" in capsys.readouterr().out
    assert main(["poison", "--out", str(tmp_path), "--attack", "trojan"]) == 2
    assert main(["train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "m")]) == 2
    assert "iclr25-agpd poison" in capsys.readouterr().err


def test_demo_recovers_planted_target(capsys):
    assert main(["demo", "--n-per-class", "100"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("demo (paper): targets [0]; TPR 1.0000 FPR 0.0000")


def test_poison_train_detect_tiny(tmp_path, capsys):
    """poison -> train (1 epoch) -> detect as subprocesses; --resume in process; BackdoorBench variant."""
    d, m = tmp_path / "data", tmp_path / "model"
    r = _run("poison", "--out", str(d), "--attack", "badnets", "--ratio", "0.1")
    assert r.returncode == 0, r.stderr
    assert "poisoned 135/1347" in r.stdout
    r = _run("train", "--data", str(d), "--out", str(m), "--epochs", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    assert (m / "model.pt").is_file() and (m / "checkpoint.pt").is_file()
    tcfg = json.loads((m / "train.json").read_text())["config"]  # JSON types, not strings
    assert tcfg["epochs"] == 1 and isinstance(tcfg["lr"], float) and tcfg["resume"] is False
    before = load_checkpoint(m / "model.pt")["model"]
    assert main(["train", "--data", str(d), "--out", str(m), "--epochs", "1", "--resume", "--quiet"]) == 0
    after = load_checkpoint(m / "model.pt")["model"]  # resumed at epoch 1 of 1: nothing left to train
    assert all(torch.equal(before[k], after[k]) for k in before)
    r = _run("detect", "--data", str(d), "--model", str(m), "--agpd.variant", "backdoorbench", "--baselines",
             "spectral", "--quiet", "--out", str(tmp_path / "det"))
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "det" / "detection.json").read_text())
    assert {"TPR", "FPR", "F1", "target_classes", "layer"} <= set(out["agpd"])
    assert set(out["baselines"]) == {"spectral"}
    assert r.stdout.startswith("AGPD (backdoorbench): targets")


def test_bad_target_and_corrupt_files_are_clean_errors(tmp_path, capsys):
    assert main(["poison", "--out", str(tmp_path / "p"), "--target", "99"]) == 2
    err = capsys.readouterr().err
    assert "target 99 is not a class" in err and "0..9" in err and "Traceback" not in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "poisoned.pt").write_text("junk")
    assert main(["detect", "--data", str(bad), "--model", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "poisoned.pt is not the poisoned data set" in err and "iclr25-agpd poison" in err


@pytest.mark.parametrize("argv, needle", [
    (["poison", "--patch-size", "0"], "patch_size=0 must be >= 1"),
    (["poison", "--alpha", "nan"], "alpha=nan must be finite"),
    (["poison", "--ratio", "1.5"], "ratio=1.5 must be finite and in [0, 1)"),
    (["train", "--data", "x", "--epochs", "-2"], "epochs=-2 must be >= 1"),
    (["train", "--data", "x", "--lr", "nan"], "lr=nan must be finite"),
    (["detect", "--data", "x", "--model", "y", "--agpd.tau-z", "nan"], "tau_z=nan must be finite"),
    (["detect", "--data", "x", "--model", "y", "--agpd.m-fraction", "0"], "m_fraction=0"),
    (["reproduce", "--quick", "--workers", "0"], "--workers 0 must be >= 1"),
    (["detect", "--data", "x", "--model", "y", "--baselines", "foo"], "unknown baseline(s) ['foo']"),
])
def test_bad_settings_are_clean_errors(argv, needle, tmp_path, capsys):
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_wrong_keys_and_wrong_architecture_are_clean_errors(tmp_path, capsys):
    from iclr25.agpd.models import small_preact_cnn
    from iclr25.agpd.train import save_checkpoint

    d = tmp_path / "d"
    d.mkdir()
    torch.save({"x": torch.zeros(2)}, d / "poisoned.pt")  # loadable, wrong keys
    assert main(["detect", "--data", str(d), "--model", str(d), "--out", str(tmp_path / "o")]) == 2
    assert "missing ['x_bd'" in capsys.readouterr().err
    assert main(["poison", "--out", str(d)]) == 0  # a real data set (digits, 1 channel)
    m = tmp_path / "m"
    save_checkpoint(m / "model.pt", small_preact_cnn(10, 3), meta={"model": "preactresnet18", "num_classes": 10,
                                                                   "in_channels": 3})
    capsys.readouterr()
    assert main(["detect", "--data", str(d), "--model", str(m), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "does not fit a 'preactresnet18' model" in err and "Traceback" not in err


def test_train_same_seed_is_identical_and_detect_takes_a_model_file(tmp_path, capsys):
    """Issue 41 items 2-3: two 'train --seed 0' runs give the same weights (the model used to be built
    before seeding); 'detect --model' takes the model.pt file as well as its folder, and a missing
    file or a folder without model.pt is a one-line error."""
    d = tmp_path / "data"
    assert main(["poison", "--out", str(d), "--quiet"]) == 0
    torch.manual_seed(123)  # whatever the global RNG state, --seed decides
    for name in ("a", "b"):
        assert main(["train", "--data", str(d), "--out", str(tmp_path / name), "--epochs", "1", "--seed", "0",
                     "--quiet"]) == 0
        torch.rand(7)
    a, b = (load_checkpoint(tmp_path / n / "model.pt")["model"] for n in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)
    capsys.readouterr()
    assert main(["detect", "--data", str(d), "--model", str(tmp_path / "a" / "model.pt"), "--baselines",
                 "--quiet", "--out", str(tmp_path / "det")]) == 0
    assert capsys.readouterr().out.startswith("AGPD (backdoorbench): targets")
    for bad, needle in ((tmp_path / "a" / "nope.pt", "does not exist"), (tmp_path, "has no model.pt")):
        assert main(["detect", "--data", str(d), "--model", str(bad), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_detect_given_the_training_checkpoint_is_a_clean_error(tmp_path, capsys):
    """'detect --model out/checkpoint.pt' (the per-epoch file next to model.pt, e.g. after a killed
    training run) used to end in a KeyError traceback (exit 1): its meta holds only the training
    settings, not the architecture. Now: exit 2, one line, pointing to model.pt / --resume."""
    from iclr25.agpd.models import small_preact_cnn
    from iclr25.agpd.train import save_checkpoint

    d = tmp_path / "d"
    assert main(["poison", "--out", str(d), "--quiet"]) == 0
    ck = save_checkpoint(tmp_path / "m" / "checkpoint.pt", small_preact_cnn(10, 1), epoch=1,
                         meta={"training": {"epochs": 2}})
    capsys.readouterr()
    assert main(["detect", "--data", str(d), "--model", str(ck), "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "checkpoint" in err and "model.pt" in err and "--resume" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
