"""An offline byte-level tokenizer usable as a Hugging Face fast tokenizer.

Every UTF-8 byte is one token (ids 0..255, GPT-2's byte-to-unicode alphabet), so any text —
non-Latin scripts, emoji, control characters — round-trips exactly, and nothing is downloaded.
Special tokens follow the bytes: ``<|endoftext|>`` (256; BOS and EOS) and ``<pad>`` (257).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ByteTokenizerSpec", "byte_tokenizer", "bytes_to_unicode"]


@dataclass(frozen=True)
class ByteTokenizerSpec:
    """Ids of the byte tokenizer: bytes are ``0..255``; then the special tokens."""

    eos_token: str = "<|endoftext|>"
    pad_token: str = "<pad>"
    eos_token_id: int = 256
    pad_token_id: int = 257
    vocab_size: int = 258


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_tokenizer(model_max_length: int = 1024, padding_side: str = "right"):
    """Build the byte-level tokenizer as a ``transformers.PreTrainedTokenizerFast``.

    Args:
        model_max_length: the maximum sequence length recorded in the tokenizer.
        padding_side: ``"right"`` (training) or ``"left"`` (batched generation).

    Returns:
        A ``PreTrainedTokenizerFast`` with ``vocab_size == 258``; save it with
        ``save_pretrained(dir)`` and load it with ``AutoTokenizer.from_pretrained(dir)`` or
        ``PreTrainedTokenizerFast.from_pretrained(dir)``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    spec = ByteTokenizerSpec()
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    vocab[spec.eos_token] = spec.eos_token_id
    vocab[spec.pad_token] = spec.pad_token_id
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec.eos_token,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        model_max_length=model_max_length,
        padding_side=padding_side,
        clean_up_tokenization_spaces=False,
    )
    return fast
