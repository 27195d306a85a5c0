import pytest
import torch

# Small shared CPUs: one intra-op thread (results do not depend on it).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def world():
    from iclr25.prereq_tune import make_world

    return make_world(20, 10, 3, seed=0)


@pytest.fixture(scope="session")
def tok(world):
    from iclr25.prereq_tune import world_tokenizer

    return world_tokenizer(world)


def _tiny(tok, seed=0):
    from iclr25.core.lm import tiny_causal_lm

    m = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=96, n_layer=3, n_head=4, seed=seed,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return m.eval()


@pytest.fixture
def base(tok):
    """A fresh, randomly initialised spec-sized GPT-2 (3 layers, d 96, 4 heads, 32 positions)."""
    return _tiny(tok)


@pytest.fixture
def make_base(tok):
    return lambda seed=0: _tiny(tok, seed)
