"""Training state you can trust (issue #44): the log-2 identity with dropout, ``--resume`` refusing changed
settings (the issue's mixed-run reproductions), a real SIGKILL during a checkpoint save, and kill -9 at a
random moment + ``--resume`` ending bit-identical to an uninterrupted run (the core's kill_and_resume)."""

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from iclr25.core.testing import assert_same_files, assert_same_logs, kill_and_resume, single_thread_env
from iclr25.cream import PreferencePair, TrainConfig
from iclr25.cream.cli import main
from iclr25.cream.training import train_dpo

COMMON = ("--device", "cpu", "--quiet", "--threads", "1")


def _run(*argv):
    return main([str(a) for a in argv])


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def dropout_dir(tmp_path_factory):
    """A tiny GPT-2 whose config carries dropout 0.3 (residual, embedding, attention)."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    d = tmp_path_factory.mktemp("tiny-dropout") / "m0"
    tiny_causal_lm(n_layer=1, n_embd=32, n_head=2, n_positions=128, dropout=0.3, seed=0).save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    return d


def _pairs(n=6):
    return [PreferencePair(id=f"q{i}", prompt=f"{i}+{i}=", chosen=str(2 * i), rejected=str(2 * i + 7),
                           c=0.5 + i / (4 * n)) for i in range(n)]


def _pairs_file(path, n):
    return _jsonl(path, [{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected, "c": p.c}
                         for p in _pairs(n)])


# ---- item 4: the policy equals the reference at initialisation -> the loss is log 2 ----------------------------


@pytest.mark.parametrize("lora", [False, True])
def test_first_dpo_loss_is_log2_on_a_dropout_model(dropout_dir, lora):
    """Policy == reference at step 1 (warm-up: lr 0 there). With dropout disabled in the policy (the default,
    as TRL) every margin is exactly 0 and the loss is log 2 (to float32); with dropout kept on it is not."""
    from transformers import AutoModelForCausalLM

    from iclr25.core.lm import byte_tokenizer

    first = {}
    for disable in (True, False):
        model = AutoModelForCausalLM.from_pretrained(dropout_dir)
        assert model.config.resid_pdrop == 0.3
        torch.manual_seed(0)
        cfg = TrainConfig(lr=1e-3, epochs=1, batch_size=3, device="cpu", disable_dropout=disable, lora=lora,
                          lora_target_modules="c_attn", lora_dropout=0.3)
        res = train_dpo(model, byte_tokenizer(), _pairs(), cfg, progress=False)
        first[disable] = res.history[0]
    assert first[True]["margin"] == 0.0
    assert first[True]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first[False]["margin"] != 0.0
    assert abs(first[False]["loss"] - math.log(2)) > 1e-5  # dropout in the policy forward only


def test_dpo_cli_flag_keeps_dropout(dropout_dir, tmp_path):
    pairs = _pairs_file(tmp_path / "pairs.jsonl", 6)
    args = ["dpo", "--model", dropout_dir, "--pairs", pairs, "--epochs", 1, "--batch-size", 3, "--lr", 1e-3, *COMMON]
    assert _run(*args, "--out", tmp_path / "on") == 0
    assert _run(*args, "--no-disable-dropout", "--out", tmp_path / "off") == 0
    h_on = json.loads((tmp_path / "on" / "stage.json").read_text())["history"][0]
    h_off = json.loads((tmp_path / "off" / "stage.json").read_text())["history"][0]
    assert h_on["margin"] == 0.0 and h_off["margin"] != 0.0


# ---- item 1: --resume refuses changed settings ----------------------------------------------------------------


def test_loop_resume_with_other_settings_is_refused(tmp_path, capsys):
    """The issue's reproduction: loop dyn T=2 N=3, then --resume with avg T=3 N=5 mixed the two runs (exit 0)."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    m0 = tmp_path / "m0"
    tiny_causal_lm(n_layer=1, n_embd=32, n_head=2, n_positions=128, seed=0).save_pretrained(m0)
    byte_tokenizer().save_pretrained(m0)
    sft = _jsonl(tmp_path / "sft.jsonl", [{"prompt": f"{i}+1=", "response": str(i + 1)} for i in range(4)])
    pool = _jsonl(tmp_path / "pool.jsonl", [{"prompt": f"{i}*{i}="} for i in range(6)])
    base = ["loop", "--model", m0, "--sft-data", sft, "--prompts", pool, "--temperature", 1.0, "--max-new-tokens", 2,
            "--lr", 1e-3, "--sft-lr", 1e-3, "--sft-epochs", 1, "--batch-size", 2, "--out", tmp_path / "R", *COMMON]
    assert _run(*base, "--method", "dyn", "--iterations", 2, "--n-samples", 3) == 0
    before = (tmp_path / "R" / "cream_config.json").read_text()
    capsys.readouterr()
    assert _run(*base, "--method", "avg", "--iterations", 3, "--n-samples", 5, "--resume") == 2
    err = capsys.readouterr().err
    assert "iterations: 2 -> 3" in err and "method: 'dyn' -> 'avg'" in err and "n_samples: 3 -> 5" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "R" / "cream_config.json").read_text() == before  # the record of the run is kept
    assert not (tmp_path / "R" / "round_3").exists()
    # the same flags resume (every round finished: reused)
    assert _run(*base, "--method", "dyn", "--iterations", 2, "--n-samples", 3, "--resume") == 0
    reports = json.loads((tmp_path / "R" / "reports.json").read_text())
    assert [(r["iteration"], r["method"]) for r in reports] == [(1, "dyn"), (2, "dyn")]


def test_dpo_resume_of_a_finished_stage_with_other_mode_or_lr_is_refused(dropout_dir, tmp_path, capsys):
    """The issue's reproduction: dpo --resume on a finished stage with another --mode/--lr exited 0 after '0 steps'
    and returned the old model."""
    pairs = _pairs_file(tmp_path / "pairs.jsonl", 6)
    args = ["dpo", "--model", dropout_dir, "--pairs", pairs, "--epochs", 1, "--batch-size", 3, "--out", tmp_path / "d",
            *COMMON]
    assert _run(*args, "--mode", "dyn", "--lr", 1e-3) == 0
    for flags, words in ((["--mode", "avg", "--lr", 1e-3], "mode: 'dyn' -> 'avg'"),
                         (["--mode", "dyn", "--lr", 1e-2], "lr: 0.001 -> 0.01")):
        capsys.readouterr()
        assert _run(*args, *flags, "--resume") == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
    assert _run(*args, "--mode", "dyn", "--lr", 1e-3, "--resume") == 0


def test_library_stage_resume_refuses_other_data_or_settings(dropout_dir, tmp_path):
    """train_dpo itself (the loop's stages) records its settings and a hash of its pairs."""
    from transformers import AutoModelForCausalLM

    from iclr25.core.lm import byte_tokenizer

    tok = byte_tokenizer()
    cfg = TrainConfig(lr=1e-3, epochs=1, batch_size=3, device="cpu")
    train_dpo(AutoModelForCausalLM.from_pretrained(dropout_dir), tok, _pairs(), cfg, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="data_sha256"):
        train_dpo(AutoModelForCausalLM.from_pretrained(dropout_dir), tok, _pairs(5), cfg, out_dir=tmp_path,
                  resume=True, progress=False)
    with pytest.raises(ValueError, match=r"beta: 0.1 -> 0.2"):
        train_dpo(AutoModelForCausalLM.from_pretrained(dropout_dir), tok, _pairs(), TrainConfig(
            lr=1e-3, epochs=1, batch_size=3, device="cpu", beta=0.2), out_dir=tmp_path, resume=True, progress=False)


# ---- items 2 and 3: a kill mid-save keeps the previous checkpoint; kill -9 + --resume is bit-identical --------


# Runs `iclr25-cream dpo` but SIGKILLs itself halfway through writing optimizer.pt of the second checkpoint.
_KILL_IN_SAVE = textwrap.dedent("""
    import os, signal, sys
    import torch
    calls = {"n": 0}
    orig = torch.save
    def save(obj, f, *a, **k):
        if str(f).endswith("optimizer.pt"):
            calls["n"] += 1
            if calls["n"] == 2:
                with open(f, "wb") as h:
                    h.write(b"PK-half-an-optimizer")
                os.kill(os.getpid(), signal.SIGKILL)
        return orig(obj, f, *a, **k)
    torch.save = save
    from iclr25.cream.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _dpo_cmd(model, pairs, *extra):
    return ["dpo", "--model", str(model), "--pairs", str(pairs), "--mode", "dyn", "--batch-size", "2", "--lr", "1e-3",
            "--no-disable-dropout", *COMMON, *[str(x) for x in extra]]


def test_sigkill_during_a_checkpoint_save_keeps_the_previous_checkpoint(dropout_dir, tmp_path):
    pairs = _pairs_file(tmp_path / "pairs.jsonl", 8)
    args = _dpo_cmd(dropout_dir, pairs, "--epochs", 2, "--checkpoint-every", 2)
    cut = tmp_path / "cut"
    r = subprocess.run([sys.executable, "-c", _KILL_IN_SAVE, *args, "--out", str(cut)], env=single_thread_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stderr[-2000:]
    ck = cut / "checkpoint"
    assert (tmp_path / "cut" / "checkpoint.tmp" / "optimizer.pt").read_bytes() == b"PK-half-an-optimizer"
    state = json.loads((ck / "trainer_state.json").read_text())
    assert state["global_step"] == 2  # the first checkpoint, whole: its optimizer state still loads
    torch.load(ck / "optimizer.pt", weights_only=True)
    assert _run(*args, "--out", cut, "--resume") == 0
    assert not (cut / "checkpoint").exists() and not (cut / "checkpoint.tmp").exists()
    assert _run(*args, "--out", tmp_path / "full") == 0
    assert_same_files(tmp_path / "full", cut, ["model/*.safetensors"])
    assert_same_logs(tmp_path / "full", cut, ["stage.json"])


def test_kill_at_a_random_moment_and_resume_is_bit_identical(dropout_dir, tmp_path):
    """kill -9 at a random moment after the first checkpoint; --resume ends with the same weights and per-step
    history as an uninterrupted run, byte for byte. Dropout 0.3 is on in the policy (--no-disable-dropout), so
    this needs the torch RNG state restored (the masks after the resume are those of the uninterrupted run)."""
    pairs = _pairs_file(tmp_path / "pairs.jsonl", 24)
    cmd = [sys.executable, "-m", "iclr25.cream", *_dpo_cmd(dropout_dir, pairs, "--epochs", 4, "--checkpoint-every", 1)]
    res = kill_and_resume(cmd, killed_out=tmp_path / "killed", reference_out=tmp_path / "ref",
                          ready=lambda o: (Path(o) / "checkpoint" / "trainer_state.json").is_file(),
                          compare=["model/*.safetensors"], logs=["stage.json"], max_delay=0.8, timeout=300)
    assert res["compared"] == ["model/model.safetensors"]
