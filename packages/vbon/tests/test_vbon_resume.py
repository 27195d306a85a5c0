"""Training state you can trust (issue 44): kill -9 at a random moment + ``--resume`` ends with the same weights,
optimiser state and log as an uninterrupted run; a torn checkpoint write keeps the previous checkpoint."""

import json
import sys

import pytest
import torch

from iclr25.core.testing import kill_and_resume


def _lm_and_prompts(tiny_lm, tmp_path):
    model, tok = tiny_lm
    lm = tmp_path / "lm"
    model.save_pretrained(lm)
    tok.save_pretrained(lm)
    prompts = tmp_path / "p.txt"
    prompts.write_text("the movie is\na very\nthe plot and\ncast is a\n")
    return lm, prompts


@pytest.mark.slow  # three processes that each import torch, transformers and scikit-learn: ~50 CPU-s
@pytest.mark.realdata
def test_kill_and_resume_is_bit_identical(tiny_lm, data_dir, shared_cache, tmp_path):
    """SIGKILL a ``train`` run a random moment after its first checkpoint; ``--resume`` must give byte-identical
    weights, optimiser state and RNG state, and metrics.jsonl must hold each step once (it held the steps between
    the checkpoint and the kill twice: the log was appended without being cut back)."""
    lm, prompts = _lm_and_prompts(tiny_lm, tmp_path)
    cmd = [sys.executable, "-m", "iclr25.vbon", "train", "--policy", str(lm), "--prompts-file", str(prompts),
           "--vbon.m", "8", "--vbon.prompts-per-step", "2", "--vbon.samples-per-prompt", "2",
           "--vbon.max-new-tokens", "6", "--vbon.steps", "16", "--vbon.algo", "ppo", "--vbon.ppo-epochs", "2",
           "--vbon.temperature", "0.8", "--checkpoint-every", "4", "--quiet"]
    res = kill_and_resume(cmd, killed_out=tmp_path / "killed", reference_out=tmp_path / "ref",
                          ready=lambda out: (out / "checkpoint" / "trainer_state.pt").is_file(), max_delay=0.6,
                          compare=["checkpoint/*.safetensors", "checkpoint/trainer_state.pt",
                                   "checkpoint/rng_state.json"],
                          logs=["metrics.jsonl", "results.json"],
                          env={"ICLR25_DATA": str(data_dir), "ICLR25_CACHE": str(shared_cache)}, timeout=300)
    steps = [json.loads(x)["step"] for x in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 17)), steps
    assert len(res["compared"]) == 3


def test_torn_checkpoint_write_keeps_previous(tiny_lm, count_reward, tmp_path, monkeypatch):
    """A save that dies half-way (here: the optimiser file raises) leaves the previous checkpoint whole, and a
    resume from it restores the step it holds."""
    from iclr25.vbon.config import VBoNConfig
    from iclr25.vbon.runtime import clone_policy
    from iclr25.vbon.trainer import VBoNTrainer

    model, tok = tiny_lm
    prompts = ["the movie is", "a very", "the plot and", "cast is a"]
    cfg = VBoNConfig(method="rlhf", n=4, steps=2, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=4)
    tr = VBoNTrainer(clone_policy(model), model, tok, count_reward, prompts, cfg)
    tr.train(progress=False, checkpoint_dir=tmp_path / "ck", save_every=1)
    before = {p.name: p.read_bytes() for p in (tmp_path / "ck").iterdir()}
    tr.train_step()
    real_save = torch.save

    def dying_save(obj, f, *a, **k):
        real_save({"half": 1}, f)
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="disk full"):
        tr.save_checkpoint(tmp_path / "ck")
    monkeypatch.setattr(torch, "save", real_save)
    assert {p.name: p.read_bytes() for p in (tmp_path / "ck").iterdir()} == before
    assert not (tmp_path / "ck.tmp").exists()
    tr2 = VBoNTrainer(clone_policy(model), model, tok, count_reward, prompts, cfg)
    tr2.load_checkpoint(tmp_path / "ck")
    assert tr2.step == 2
