"""A tiny GPT-2-architecture causal LM built from a config (no download)."""

from __future__ import annotations

from .tokenizer import ByteTokenizerSpec

__all__ = ["tiny_causal_lm"]


def tiny_causal_lm(
    vocab_size: int = ByteTokenizerSpec.vocab_size,
    n_positions: int = 256,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 2,
    dropout: float = 0.0,
    seed: int | None = 0,
    eos_token_id: int = ByteTokenizerSpec.eos_token_id,
    pad_token_id: int = ByteTokenizerSpec.pad_token_id,
):
    """A randomly initialised ``transformers.GPT2LMHeadModel`` of the given size.

    Defaults fit :func:`~iclr25.core.lm.tokenizer.byte_tokenizer` (258 tokens) and train at
    thousands of tokens per second on one CPU core (about 0.13 M parameters).

    Args:
        vocab_size: number of token ids.
        n_positions: the maximum sequence length.
        n_embd, n_layer, n_head: width, depth, attention heads (``n_embd % n_head == 0``).
        dropout: residual, embedding and attention dropout.
        seed: seeds torch before initialisation for reproducible weights (``None``: not seeded).
        eos_token_id, pad_token_id: recorded in the config (used by ``generate``).

    Returns:
        ``GPT2LMHeadModel`` in train mode, on CPU, float32.

    Raises:
        ValueError: ``n_embd`` not divisible by ``n_head``.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if n_embd % n_head:
        raise ValueError(f"n_embd={n_embd} must be divisible by n_head={n_head}")
    cfg = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )
    if seed is not None:
        torch.manual_seed(seed)
    return GPT2LMHeadModel(cfg)
