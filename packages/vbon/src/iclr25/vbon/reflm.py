"""The embedded tiny reference LM ``pi_ref``: a GPT-2-architecture model pre-trained from scratch on the
mirrored movie-review snippets by the core's :func:`iclr25.core.lm.cached_tiny_lm` and cached on disk
(``<iclr25 cache>/vbon/tinylm-<key>``), so later runs are offline and instant (stand-in for
``lvwerra/gpt2-imdb``).

Tokenizer: a byte-level BPE with a 2,048-token vocabulary trained on the same snippets (spec §4.2), or the
core's 258-token byte tokenizer (``tokenizer="byte"``). Both add ``<|endoftext|>`` as BOS to every encoded
text, so prompts are always conditioned on a start token. Each snippet is one training sequence
(``packing="sequences"``: BOS + text + EOS, truncated to ``seq_len`` tokens).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from iclr25.core.lm.pretrain import TinyLMSpec

__all__ = ["REFERENCE_LM_DEFAULTS", "reference_lm_spec", "vbon_cache_dir", "load_reference_lm"]

log = logging.getLogger(__name__)

#: vbon's schedule for the reference LM (spec §4.2: 1 epoch; quick 2 layers d=128, full 4 layers d=256):
#: one snippet per sequence with BOS, at most 64 tokens, 32 per step, AdamW lr 2e-3 with betas (0.9, 0.95),
#: 5 % linear warm-up then cosine decay.
REFERENCE_LM_DEFAULTS: dict[str, Any] = dict(
    tokenizer="bpe", vocab_size=2048, add_bos=True, n_layer=2, n_embd=128, n_head=4, n_positions=128,
    packing="sequences", seq_len=64, steps=None, epochs=1.0, batch_size=32, lr=2e-3, beta2=0.95, warmup_frac=0.05)


def reference_lm_spec(**overrides: Any) -> TinyLMSpec:
    """The core :class:`~iclr25.core.lm.TinyLMSpec` of the reference LM: :data:`REFERENCE_LM_DEFAULTS`
    with ``overrides`` (e.g. ``n_layer=4``). ``n_positions`` grows to ``seq_len`` when that is longer.

    Raises:
        ValueError: an unknown field, or a value ``TinyLMSpec`` rejects.
    """
    kw = {**REFERENCE_LM_DEFAULTS, **overrides}
    if "n_positions" not in overrides:
        kw["n_positions"] = max(kw["n_positions"], kw["seq_len"])
    try:
        return TinyLMSpec(**kw)
    except TypeError as e:
        raise ValueError(f"reference_lm_spec: {e}") from None


def vbon_cache_dir() -> Path:
    """``<iclr25 cache>/vbon`` (``$ICLR25_CACHE`` or ``~/.cache/iclr25``)."""
    from iclr25.core.data import cache_dir

    return cache_dir() / "vbon"


def load_reference_lm(spec: TinyLMSpec | None = None, data=None, *, max_snippets: int | None = None,
                      cache: str | Path | None = None, progress: bool = True):
    """The cached reference LM for ``spec``, pre-trained on the mirrored polarity train split.

    Args:
        spec: size and schedule (default :func:`reference_lm_spec`).
        data: a :class:`~iclr25.vbon.data.PolarityData` (default: :func:`~iclr25.vbon.data.load_polarity`).
        max_snippets: train on the first ``max_snippets`` training snippets only (tests); ``None``: all.
        cache: cache root (default the iclr25 cache); the model lives in ``<cache>/vbon/tinylm-<key>``.
        progress: progress bar while pre-training.

    Returns:
        ``(model, tokenizer)``, model in eval mode on CPU.

    Raises:
        iclr25.core.data.DataNotFoundError: when it must be trained and the mirror is missing.
        ValueError: ``max_snippets < 1``.
    """
    from iclr25.core.lm import cached_tiny_lm

    from .data import load_polarity

    if max_snippets is not None and max_snippets < 1:
        raise ValueError(f"max_snippets must be >= 1 (or None), got {max_snippets}")
    data = data or load_polarity()
    texts = data.train_texts if max_snippets is None else data.train_texts[:max_snippets]
    model, tok, _ = cached_tiny_lm("vbon", texts, spec or reference_lm_spec(), cache=cache, progress=progress)
    return model, tok
