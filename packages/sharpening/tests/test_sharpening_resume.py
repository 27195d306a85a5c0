"""Training state you can trust (issue #44): kill -9 at a random moment + ``--resume`` of the ``sft`` command ends
bit-identical (weights and per-step log) to an uninterrupted run, with LoRA dropout on; a checkpoint save is atomic
(every RNG state inside, the previous checkpoint kept on a failed save)."""

import json
import sys
from pathlib import Path

import pytest
import torch

from iclr25.core.testing import kill_and_resume


def _prompts(tmp_path, n=8):
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"{a}+{a + 1}=", "answer": 2 * a + 1}) + "\n"
                         for a in range(10, 10 + n)))
    return p


def test_sft_kill_at_a_random_moment_and_resume_is_bit_identical(tiny_model_dir, tmp_path):
    """LoRA (r 4, dropout 0.05) trained for many one-step checkpoints; killed once the first exists."""
    cmd = [sys.executable, "-m", "iclr25.sharpening", "sft", "--model", str(tiny_model_dir), "--prompts",
           str(_prompts(tmp_path)), "--max-new-tokens", "4", "--threads", "1", "--quiet", "--n", "2", "--epochs", "30",
           "--lora-r", "4", "--lora-dropout", "0.05", "--batch-size", "2", "--lr", "1e-3", "--eval-samples", "1",
           "--checkpoint-every", "1"]
    res = kill_and_resume(cmd, killed_out=tmp_path / "killed", reference_out=tmp_path / "ref",
                          ready=lambda o: (Path(o) / "checkpoint" / "rng_state.json").is_file(),
                          compare=["model/*.safetensors", "checkpoint/policy.safetensors"], logs=["metrics.jsonl"],
                          max_delay=1.0, timeout=300)
    assert "checkpoint/policy.safetensors" in res["compared"]
    steps = [json.loads(x)["step"] for x in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 10  # each step once


def test_checkpoint_is_atomic_and_restores_every_rng(tiny_lm, tmp_path, monkeypatch):
    import numpy as np

    from iclr25.sharpening.training import PolicyTrainer, TrainConfig, apply_lora

    model, _ = tiny_lm
    cfg = TrainConfig(lora_r=4, batch_size=2, epochs=1, lr=1e-3)
    import copy

    def trainer():
        return PolicyTrainer(apply_lora(copy.deepcopy(model), cfg), lambda m, idx: (sum(
            p.square().sum() for p in m.parameters() if p.requires_grad), {}), 4, cfg, accelerate=False)

    t = trainer()
    ck = tmp_path / "checkpoint"
    t.save_checkpoint(ck)
    want = (torch.rand(3).tolist(), np.random.rand(2).tolist())
    # a failing save (as a kill) keeps the previous checkpoint; nothing half-written is left in its place
    orig = torch.save
    monkeypatch.setattr(torch, "save", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        t.train_step(torch.arange(2))
        t.save_checkpoint(ck)
    monkeypatch.setattr(torch, "save", orig)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert torch.load(ck / "trainer_state.pt", weights_only=True)["step"] == 0
    t2 = trainer()
    torch.manual_seed(123), np.random.seed(123)
    t2.load_checkpoint(ck)
    assert (torch.rand(3).tolist(), np.random.rand(2).tolist()) == want


def test_fixed_length_base_reports_cpu_seconds_not_wall(tmp_path, caplog):
    """Issue #44 item 7: ``pretrain_cpu_seconds`` was the wall time of the fixed-length recipe."""
    from iclr25.sharpening.base import TrapBaseConfig, cached_trap_base
    from iclr25.sharpening.task import TrapArithmeticTask

    cfg = TrapBaseConfig(stop_kl=None, n_layer=1, n_embd=32, n_head=2, n_strings=64, epochs=1, batch_size=32, n_val=2)
    b = cached_trap_base(TrapArithmeticTask(), cfg, cache=tmp_path)
    train = json.loads((Path(b.info["path"]) / "tinylm_train.json").read_text())
    assert b.info["pretrain_cpu_seconds"] == train["cpu_seconds"] and b.info["pretrain_seconds"] == train["seconds"]
    # a base cached by an older version (wall time only): not measured, said so; never the wall time
    del train["cpu_seconds"]
    (Path(b.info["path"]) / "tinylm_train.json").write_text(json.dumps(train))
    b2 = cached_trap_base(TrapArithmeticTask(), cfg, cache=tmp_path)
    assert b2.info["cached"] and b2.info["pretrain_cpu_seconds"] is None
    assert "wall time only" in caplog.text
