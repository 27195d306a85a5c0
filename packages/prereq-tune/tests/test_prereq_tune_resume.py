"""Exact resume (issue #44 item 3): kill -9 at a random moment + ``--resume`` ends with bit-identical skill weights
and per-step log as an uninterrupted run, with LoRA dropout on (the torch RNG state is checkpointed); a kill inside
a checkpoint save keeps the previous checkpoint (the core's atomic_folder)."""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from iclr25.core.testing import kill_and_resume
from iclr25.prereq_tune.cli import main

TPL = "question : {question} answer :"
LORA = ["--r", "4", "--alpha", "8", "--max-length", "32", "--quiet", "--threads", "1"]


@pytest.fixture
def files(tmp_path, world, tok, base):
    from iclr25.core.jsonl import write_jsonl
    from iclr25.prereq_tune import knowledge_corpus, skill_examples

    base.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    write_jsonl(tmp_path / "know.jsonl", [{"text": t, "version": v} for v in (1, 2) for t in knowledge_corpus(world, v)])
    write_jsonl(tmp_path / "skill.jsonl", [asdict(e) for e in skill_examples(world, "fictitious", [1, 2])])
    assert main(["train-knowledge", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "know.jsonl"), "--out",
                 str(tmp_path / "know"), "--epochs", "1", "--batch-size", "32", "--lr", "3e-3", "--lora-dropout", "0",
                 *LORA]) == 0
    return tmp_path


def _skill_cmd(t, *extra):
    return [sys.executable, "-m", "iclr25.prereq_tune", "train-skill", "--model", str(t / "m"), "--knowledge",
            str(t / "know" / "know_v1"), str(t / "know" / "know_v2"), "--data", str(t / "skill.jsonl"),
            "--batch-size", "4", "--lr", "3e-3", "--prompt-template", TPL, "--multi-version", "--lora-dropout", "0.05",
            *LORA, *extra]


def test_kill_at_a_random_moment_and_resume_is_bit_identical(files):
    """LoRA dropout 0.05 (the default) on: without the torch RNG state in the checkpoint the masks after a resume
    differ and the adapters differ by ~1e-2 (the issue's max dw 0.027)."""
    t = files
    res = kill_and_resume(_skill_cmd(t, "--epochs", "6", "--checkpoint-every", "1"), killed_out=t / "killed",
                          reference_out=t / "ref",
                          ready=lambda o: (Path(o) / "checkpoints" / "skill" / "last" / "trainer_state.json").is_file(),
                          compare=["skill/adapter_model.safetensors", "checkpoints/skill/last/adapter.safetensors"],
                          logs=["checkpoints/skill/last/trainer_state.json"], max_delay=1.0, timeout=300)
    assert len(res["compared"]) == 2
    state = json.loads((t / "killed" / "checkpoints" / "skill" / "last" / "trainer_state.json").read_text())
    assert len(state["losses"]) == state["step"] and state["step"] > 1


def test_checkpoint_save_is_atomic_and_holds_every_rng(files, monkeypatch):
    """An error (as a kill) inside a save leaves the previous checkpoint whole; the checkpoint holds the RNG states."""
    import torch

    from iclr25.prereq_tune import training as T

    t = files
    args = [str(a) for a in _skill_cmd(t, "--epochs", "2", "--checkpoint-every", "2")[3:]]
    calls = {"n": 0}
    orig = torch.save

    def save(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            Path(f).write_bytes(b"torn")
            raise KeyboardInterrupt  # the process dies mid-write of the second checkpoint
        return orig(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    assert main([*args, "--out", str(t / "cut")]) == 130
    last = t / "cut" / "checkpoints" / "skill" / "last"
    assert json.loads((last / T.STATE_FILE).read_text())["step"] == 2
    assert torch.load(last / "optim.pt", weights_only=True)["scheduler"]["last_epoch"] == 2
    rng = json.loads((last / T.RNG_FILE).read_text())["processes"]
    assert len(rng) == 1 and {"python", "numpy", "torch_cpu"} <= set(rng[0])
    assert not (last.parent / "last.tmp").exists()
