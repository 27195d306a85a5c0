"""Training state you can trust (issue 44) on the text path: the AIHF-DPO loss is log 2 at initialisation on a
checkpoint with dropout 0.3 (dropout disabled in the policy, as TRL does), kill -9 + ``--resume`` is bit-identical,
``--resume`` without a checkpoint is an error, and the round checkpoint is written atomically."""

import json
import math
import sys

import pytest
import torch


def _tiny_model(folder, dropout=0.0):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    tiny_causal_lm(seed=0, n_positions=128, dropout=dropout).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def _files(tmp_path, n=4):
    d, p = tmp_path / "demos.jsonl", tmp_path / "prefs.jsonl"
    d.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "response": "yes good"}) + "\n" for i in range(n)))
    p.write_text("".join(json.dumps({"prompt": f"Q{i}: ", "chosen": "good", "rejected": "bad"}) + "\n"
                         for i in range(n)))
    return d, p


def _argv(m, d, p, out, *extra):
    return ["train", "--task", "text", "--policy", str(m), "--demos", str(d), "--prefs", str(p), "--max-new-tokens",
            "3", "--max-length", "48", "--lr", "1e-3", "--dpo-beta", "0.1", "--quiet", "--device", "cpu",
            "--out", str(out), *extra]


@pytest.mark.parametrize("disable", [True, False])
def test_aihf_dpo_loss_is_log2_at_init_with_dropout(tmp_path, disable):
    """One step (4 demonstrations = one batch) at initialisation, policy == reference, on a model whose config
    carries dropout 0.3: the AIHF-DPO loss (demonstration and preference terms, w = 0.5) is log 2 with the policy's
    dropout disabled (the default); with --no-disable-dropout the policy forward draws dropout masks while the
    cached reference log-probs are dropout-free, and the loss is not log 2 (the defect)."""
    from iclr25.aihf.cli import main

    m = _tiny_model(tmp_path / "m", dropout=0.3)
    d, p = _files(tmp_path)
    flags = [] if disable else ["--no-disable-dropout"]
    assert main(_argv(m, d, p, tmp_path / "o", "--rounds", "1", "--batch-size", "4", "--w", "0.5", *flags)) == 0
    loss = json.loads((tmp_path / "o" / "state.json").read_text())["history"][0]["loss"]
    log2 = float(torch.log(torch.tensor(2.0)))  # log 2 in float32, the loss's dtype
    if disable:
        assert abs(loss - log2) <= 1e-6, loss  # equal up to the float32 rounding of padded vs trimmed batches
    else:
        assert abs(loss - math.log(2)) > 1e-4, loss


def test_resume_without_checkpoint_is_an_error(tmp_path, capsys):
    from iclr25.aihf.cli import main

    m = _tiny_model(tmp_path / "m")
    d, p = _files(tmp_path)
    assert main(_argv(m, d, p, tmp_path / "o", "--rounds", "1", "--resume")) == 2
    assert "--resume given but no checkpoint" in capsys.readouterr().err


@pytest.mark.slow  # three processes that each import torch and transformers: ~40 CPU-s
def test_text_kill_and_resume_is_bit_identical(tmp_path):
    from iclr25.core.testing import kill_and_resume

    m = _tiny_model(tmp_path / "m", dropout=0.1)
    d, p = _files(tmp_path, n=8)
    argv = _argv(m, d, p, "X", "--rounds", "12", "--batch-size", "2", "--no-disable-dropout")
    i = argv.index("--out")
    cmd = [sys.executable, "-m", "iclr25.aihf", *argv[:i], *argv[i + 2:]]  # kill_and_resume adds --out
    kill_and_resume(cmd, killed_out=tmp_path / "killed", reference_out=tmp_path / "ref",
                    ready=lambda out: (out / "checkpoint" / "state.json").is_file(), max_delay=1.0,
                    compare=["checkpoint/policy/*.safetensors", "checkpoint/optimizer.pt", "policy/*.safetensors"],
                    logs=["checkpoint/state.json", "state.json"], timeout=300)
    st = json.loads((tmp_path / "killed" / "state.json").read_text())
    assert [h["round"] for h in st["history"]] == list(range(1, 13))


def test_round_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A save that dies half-way (the optimiser file raises) leaves the previous round's checkpoint whole, so
    --resume continues from it (policy weights and state.json of the same round)."""
    from iclr25.aihf.cli import main

    m = _tiny_model(tmp_path / "m")
    d, p = _files(tmp_path)
    out = tmp_path / "o"
    assert main(_argv(m, d, p, out, "--rounds", "1")) == 0
    before = {f.relative_to(out / "checkpoint"): f.read_bytes() for f in (out / "checkpoint").rglob("*") if f.is_file()}
    real_save = torch.save

    def dying_save(obj, f, *a, **k):
        real_save({"half": 1}, f)
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="disk full"):
        main(_argv(m, d, p, out, "--rounds", "2", "--resume"))
    monkeypatch.setattr(torch, "save", real_save)
    after = {f.relative_to(out / "checkpoint"): f.read_bytes() for f in (out / "checkpoint").rglob("*") if f.is_file()}
    assert after == before and not (tmp_path / "o" / "checkpoint.tmp").exists()
    assert main(_argv(m, d, p, out, "--rounds", "2", "--resume")) == 0
    assert json.loads((out / "checkpoint" / "state.json").read_text())["round"] == 2
