"""Shared fixtures of the iclr25-seal tests: a small synthetic task, a word tokenizer, tiny random models."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def task():
    from iclr25.seal.tasks import make_synthetic_safety_task

    return make_synthetic_safety_task(36, n_safe=12, n_base_a=20, n_base_refusal=10, n_eval=6, seed=3)


@pytest.fixture(scope="session")
def tok(task):
    from iclr25.seal.tasks import word_tokenizer

    return word_tokenizer(task.vocab_texts, model_max_length=40)


def make_model(tok, seed: int = 0, n_embd: int = 16):
    from iclr25.core.lm import tiny_causal_lm

    m = tiny_causal_lm(vocab_size=len(tok), n_positions=40, n_embd=n_embd, n_layer=1, n_head=2, seed=seed,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    m.config.bos_token_id = tok.bos_token_id
    return m


@pytest.fixture
def model(tok):
    return make_model(tok)


@pytest.fixture
def new_model(tok):
    """Factory: ``new_model(seed=0, n_embd=16)`` -> a fresh tiny GPT-2 for ``tok``."""
    return lambda seed=0, n_embd=16: make_model(tok, seed, n_embd)


@pytest.fixture
def encoded(task, tok):
    from iclr25.seal.data import encode_pairs

    safe = encode_pairs(tok, task.safe, template=task.template, max_len=40)
    ft = encode_pairs(tok, task.ft, template=task.template, max_len=40)
    return safe, ft


@pytest.fixture
def saved_model(tmp_path, tok):
    d = tmp_path / "tiny_model"
    m = make_model(tok)
    m.save_pretrained(d)
    tok.save_pretrained(d)
    return d
