"""Training state you can trust (issue 44): kill -9 at a random moment + ``--resume`` ends with the same adapter,
optimiser state and log as an uninterrupted run (LoRA dropout 0.05 on: every RNG state must be restored); a torn
checkpoint write keeps the previous checkpoint; ``--resume`` without a checkpoint is an error."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from iclr25.core.testing import kill_and_resume


@pytest.fixture
def local_base(tmp_path):
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    d = tmp_path / "base"
    tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, dropout=0.1).save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    return d


def _data(tmp_path, n=12):
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"Q{i}:", "chosen": f" yes {i}", "rejected": f" no {i}!"})
                              for i in range(n)) + "\n")
    return data


@pytest.mark.slow  # three processes that each import torch, transformers and peft: ~45 CPU-s
def test_kill_and_resume_is_bit_identical(tmp_path, local_base):
    cmd = [sys.executable, "-m", "iclr25.q_adapter", "train", "--data", str(_data(tmp_path)), "--base",
           str(local_base), "--batch-size", "2", "--epochs", "4", "--max-length", "24", "--max-prompt-length", "8",
           "--checkpoint-every", "3", "--no-disable-dropout", "--quiet"]
    res = kill_and_resume(cmd, killed_out=tmp_path / "killed", reference_out=tmp_path / "ref",
                          ready=lambda out: (out / "checkpoint" / "trainer_state.pt").is_file(), max_delay=0.5,
                          compare=["checkpoint/*.safetensors", "checkpoint/trainer_state.pt", "adapter/*.safetensors"],
                          logs=["metrics.jsonl"], timeout=300)
    steps = [json.loads(x)["step"] for x in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 25)), steps
    assert len(res["compared"]) == 3


def test_resume_without_checkpoint_exits_2(tmp_path, local_base, capsys):
    from iclr25.q_adapter.cli import main

    code = main(["train", "--data", str(_data(tmp_path)), "--base", str(local_base), "--out", str(tmp_path / "none"),
                 "--resume", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "--resume given but no checkpoint" in err and "Traceback" not in err


def test_torn_checkpoint_write_keeps_previous(tmp_path, monkeypatch):
    """A save that dies half-way (the trainer-state write raises) leaves the previous checkpoint whole."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm
    from iclr25.q_adapter import PreferencePair, QAdapterConfig, QAdapterModel, TrainerConfig, tokenize_pairs
    from iclr25.q_adapter.trainer import PreferenceTrainer

    tok = byte_tokenizer()
    pairs = tokenize_pairs([PreferencePair(f"Q{i}:", f" good {i}", f" bad {i}!") for i in range(4)], tok,
                           max_length=24, max_prompt_length=8)
    qm = QAdapterModel(tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, seed=0), QAdapterConfig())
    tr = PreferenceTrainer(qm, pairs, tok.pad_token_id, TrainerConfig(batch_size=2, max_steps=2, progress=False),
                           output_dir=tmp_path)
    tr.train()
    ck = tmp_path / "checkpoint"
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    tr.step += 1
    real_save = torch.save

    def dying_save(obj, f, *a, **k):
        real_save({"half": 1}, f)
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="disk full"):
        tr.save_checkpoint()
    monkeypatch.setattr(torch, "save", real_save)
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before and not (tmp_path / "checkpoint.tmp").exists()
    assert PreferenceTrainer(QAdapterModel(tiny_causal_lm(n_embd=32, n_layer=1, n_head=2, n_positions=64, seed=0),
                                           QAdapterConfig()), pairs, tok.pad_token_id,
                             TrainerConfig(batch_size=2, max_steps=2, progress=False),
                             output_dir=tmp_path).load_checkpoint()


def test_resume_on_other_data_is_refused_and_keeps_config(tmp_path, local_base, capsys):
    """Trial QA (s52): only the pair count was checked, so --resume with another --max-length (or another data
    file of as many pairs) continued on other data; a refused resume also overwrote config.json with the
    refused settings; a resume with no step left printed "final loss nan"."""
    from iclr25.q_adapter.cli import main

    out = tmp_path / "run"
    common = ["--base", str(local_base), "--out", str(out), "--batch-size", "4", "--max-prompt-length", "8",
              "--quiet"]
    assert main(["train", "--data", str(_data(tmp_path)), *common, "--max-length", "24", "--epochs", "1"]) == 0
    config = (out / "config.json").read_bytes()
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(json.dumps({"prompt": f"P{i}:", "chosen": f" good {i}", "rejected": f" bad {i}"})
                               for i in range(12)) + "\n")
    capsys.readouterr()
    for data, length in ((_data(tmp_path), "10"), (other, "24")):
        code = main(["train", "--data", str(data), *common, "--max-length", length, "--epochs", "2", "--resume"])
        err = capsys.readouterr().err
        assert code == 2 and "training data: other tokenised pairs" in err and "Traceback" not in err, err
        assert (out / "config.json").read_bytes() == config
    assert main(["train", "--data", str(_data(tmp_path)), *common, "--max-length", "24", "--epochs", "1",
                 "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "no step left" in printed and "nan" not in printed
