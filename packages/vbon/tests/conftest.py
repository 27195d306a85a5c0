"""Shared fixtures: a tiny LM pre-trained in a second on synthetic sentences, and a word-count reward."""

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

WORDS_POS = ["good", "great", "fine", "lovely", "fun"]
WORDS_NEG = ["bad", "dull", "awful", "boring", "weak"]
FILLER = ["the", "movie", "film", "is", "a", "very", "plot", "and", "story", "cast"]


def synthetic_texts(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(FILLER + WORDS_POS + WORDS_NEG) for _ in range(rng.randint(4, 9))]
        out.append(" ".join(words) + " .")
    return out


def _count_reward(prompts, continuations):
    """#positive words - #negative words in prompt + continuation (+ a tiny length term to break ties)."""
    out = []
    for p, c in zip(prompts, continuations):
        toks = (p + c).split()
        out.append(sum(t in WORDS_POS for t in toks) - sum(t in WORDS_NEG for t in toks) + 1e-3 * len(c))
    return np.asarray(out, dtype=np.float64)


@pytest.fixture(scope="session")
def tiny_lm():
    from iclr25.core.lm import pretrain_tiny_lm
    from iclr25.vbon.reflm import reference_lm_spec

    torch.set_num_threads(1)
    spec = reference_lm_spec(vocab_size=300, n_layer=1, n_embd=32, n_head=2, seq_len=16, epochs=1.0, batch_size=32,
                             lr=5e-3)
    model, tok, _ = pretrain_tiny_lm(synthetic_texts(), spec, progress=False)
    return model, tok


@pytest.fixture(scope="session")
def data_dir():
    root = os.environ.get("ICLR25_DATA", "")
    for r in root.split(os.pathsep):
        if r and (Path(r) / "vbon" / "rt-polarity.pos").is_file():
            return Path(r)
    pytest.skip("mirrored file vbon/rt-polarity.pos not found under ICLR25_DATA (set ICLR25_DATA to the folder of data mirrors)")


@pytest.fixture(scope="session")
def count_reward():
    return _count_reward


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One iclr25 cache folder for the real-data tests of a session (the TF-IDF reward is trained once)."""
    return tmp_path_factory.mktemp("iclr25-cache")
