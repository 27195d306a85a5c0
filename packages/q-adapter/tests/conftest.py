from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

DATA = Path(os.environ.get("ICLR25_DATA", "/nonexistent")) / "q-adapter"


def need(path: str) -> Path:
    """Skip (naming the file) when a mirrored file is absent."""
    p = DATA / path
    if not p.is_file():
        pytest.skip(f"mirrored file q-adapter/{path} not found under ICLR25_DATA")
    return p


@pytest.fixture
def tiny_lm():
    """A tiny random GPT-2 and the core byte tokenizer (no download)."""
    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    torch.manual_seed(0)
    return tiny_causal_lm(n_embd=32, n_layer=2, n_head=2, n_positions=128, seed=0), byte_tokenizer()


def randomize_lora(model, scale: float = 0.5, seed: int = 1) -> None:
    """Give LoRA's B matrices non-zero values so that the adapter changes the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


@pytest.fixture
def need_file():
    return need


@pytest.fixture
def lora_randomizer():
    return randomize_lora
