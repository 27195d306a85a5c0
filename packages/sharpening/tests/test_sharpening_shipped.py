"""The converged trap base shipped in the wheel (issue #45 §5: the same base on every machine)."""

import hashlib
import shutil

import numpy as np
import pytest


def test_shipped_base_is_converged_checked_and_shows_the_trap():
    """Loads in seconds, its SHA-256 matches, and the validation KL measured now (not the stored label) is
    within the recipe's stopping rule; the training record says how it was trained."""
    from iclr25.sharpening.exact import enumerate_responses
    from iclr25.sharpening.settings import CONVERGED_RECIPE
    from iclr25.sharpening.shipped import (
        SHIPPED_BASE_DIR,
        SHIPPED_BASE_SHA256,
        shipped_base_record,
        shipped_trap_base,
    )
    from iclr25.sharpening.task import TrapArithmeticTask

    task = TrapArithmeticTask()
    _, test = task.split(300, 200, seed=0)
    b = shipped_trap_base(task, exclude=test)
    assert hashlib.sha256((SHIPPED_BASE_DIR / "model.safetensors").read_bytes()).hexdigest() == SHIPPED_BASE_SHA256
    rec = shipped_base_record()
    assert rec["recipe"] == "kl-stop-v3" and rec["converged"] is True and rec["steps"] <= rec["max_steps"]
    assert rec["config"]["stop_kl"] == CONVERGED_RECIPE.stop_kl and rec["config"]["beta2"] == CONVERGED_RECIPE.beta2
    assert b.info["converged"] and b.info["val_kl"] <= rec["stop_kl"]
    assert b.info["val_kl"] == pytest.approx(rec["val_kl"], abs=1e-4)      # the same prompts it stopped on
    # an independent look: the exact argmax is a+b on most test prompts, greedy mostly is not
    lp = enumerate_responses(b.model, b.tokenizer, task.prompts(test[:50]), task.candidates).numpy()
    assert np.mean(lp.argmax(-1) == task.correct_index(test[:50])) > 0.9
    assert np.mean(np.exp(lp.max(-1))) < 0.5


def test_shipped_base_refuses_damaged_weights_and_other_tasks(tmp_path, monkeypatch):
    from iclr25.sharpening import shipped
    from iclr25.sharpening.task import TrapArithmeticTask

    with pytest.raises(ValueError, match="default trap task"):
        shipped.shipped_trap_base(TrapArithmeticTask(p_correct=0.2, n_distractors=20))
    d = tmp_path / "base"
    shutil.copytree(shipped.SHIPPED_BASE_DIR, d)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-4] + b"\0\0\0\0")
    monkeypatch.setattr(shipped, "SHIPPED_BASE_DIR", d)
    with pytest.raises(ValueError, match="SHA-256 .* differs .*reinstall"):
        shipped.shipped_trap_base()
    (d / "trapbase_train.json").unlink()
    with pytest.raises(FileNotFoundError, match="trapbase_train.json is missing"):
        shipped.shipped_trap_base()


def test_shipped_base_default_validation_is_the_prompts_it_stopped_on(caplog):
    """The README example calls ``shipped_trap_base(task)`` without ``exclude``: it used to measure the KL on
    other prompts (0.0500 > 0.05), label the shipped base ``converged: False`` and warn on every ``demo``/``bon``."""
    import logging

    from iclr25.sharpening.shipped import shipped_base_record, shipped_trap_base

    with caplog.at_level(logging.WARNING):
        b = shipped_trap_base()
    assert b.info["converged"] is True
    assert b.info["val_kl"] == pytest.approx(shipped_base_record()["val_kl"], abs=1e-4)
    assert not [r for r in caplog.records if "validation KL" in r.getMessage()]


def test_reproduce_with_damaged_shipped_base_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    """A damaged install used to surface as the runner's JobFailed with two tracebacks (exit 1); a damaged
    training record as a bare JSON error that named no file."""
    from iclr25.sharpening import shipped
    from iclr25.sharpening.cli import main

    d = tmp_path / "base"
    shutil.copytree(shipped.SHIPPED_BASE_DIR, d)
    monkeypatch.setattr(shipped, "SHIPPED_BASE_DIR", d)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    out = tmp_path / "out"
    assert main(["reproduce", "--quick", "--workers", "1", "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert "model.safetensors: SHA-256" in err and "reinstall" in err
    assert not (out / "records").exists()
    (d / "trapbase_train.json").write_text("{")
    with pytest.raises(ValueError, match=r"trapbase_train.json is damaged .*reinstall"):
        shipped.shipped_base_record()
