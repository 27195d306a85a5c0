"""Shared fixtures: a tiny GPT-2 briefly trained on the trap task (seconds, not the full pre-training)."""

import json

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_lm():
    """A 1-layer, d=32 GPT-2 + byte tokenizer (left padding), trained for 150 steps on trap strings, so it
    answers with two digits and EOS (not the trap itself: that needs the cached base)."""
    from iclr25.core.lm import TinyLMSpec, byte_tokenizer, pretrain_tiny_lm
    from iclr25.sharpening.base import trap_corpus, use_fused_gelu
    from iclr25.sharpening.task import TrapArithmeticTask

    spec = TinyLMSpec(tokenizer="byte", n_layer=1, n_embd=32, n_head=2, n_positions=32, packing="sequences",
                      seq_len=16, steps=150, batch_size=64, lr=1e-2, seed=0)
    model, _, _ = pretrain_tiny_lm(trap_corpus(TrapArithmeticTask(), 4000, 0), spec, progress=False)
    use_fused_gelu(model)
    return model.eval(), byte_tokenizer(padding_side="left")


@pytest.fixture(scope="session")
def trap_samples(tiny_lm):
    from iclr25.sharpening.sampling import sample_responses

    model, tok = tiny_lm
    torch.manual_seed(0)
    return sample_responses(model, tok, ["12+34=", "7+1=", "40+41=", "10+10="], 3, max_new_tokens=4)


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_lm, tmp_path_factory):
    """The tiny model saved with save_pretrained (a local 'Hugging Face model')."""
    model, tok = tiny_lm
    d = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture()
def prompts_file(tmp_path):
    """A 4-line trap-task prompt file (``prompt``, ``answer``) for the CLI tests."""
    p = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"{a}+{b}=", "answer": a + b} for a, b in [(12, 34), (20, 21), (40, 45), (11, 11)]]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p
