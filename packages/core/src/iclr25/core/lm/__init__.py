"""Causal-LM helpers shared by the LLM papers (extra ``iclr25-core[lm]``).

- :func:`sequence_logprobs`, :func:`token_logprobs` — log-probabilities of response tokens.
- :func:`bradley_terry_loss`, :func:`dpo_loss` — preference losses.
- :func:`byte_tokenizer` — an offline byte-level tokenizer that is a Hugging Face fast tokenizer.
- :func:`tiny_causal_lm` — a GPT-2-architecture model built from a config (no download).
- :func:`load_causal_lm`, :class:`ModelLoadOptions` — any local/hub model with dtype,
  quantisation, ``device_map`` and clean errors (:class:`ModelNotFoundError`).
- :class:`TinyLMSpec`, :func:`pretrain_tiny_lm`, :func:`cached_tiny_lm`,
  :func:`train_bpe_tokenizer` — a tiny pre-trained GPT-2, cached per spec and corpus.
- :class:`TextGenerator` protocol with :class:`TransformersGenerator` (local, batched) and
  :class:`OpenAIChatGenerator` / :class:`OpenAICompletionGenerator` (any OpenAI-compatible
  chat-completions or completions server: vLLM, hosted APIs).

Attributes are imported lazily, so ``from iclr25.core.lm.generation import OpenAIChatGenerator``
works without torch installed (extra ``iclr25-core[http]``).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "sequence_logprobs": "logprobs",
    "token_logprobs": "logprobs",
    "bradley_terry_loss": "losses",
    "dpo_loss": "losses",
    "byte_tokenizer": "tokenizer",
    "ByteTokenizerSpec": "tokenizer",
    "tiny_causal_lm": "models",
    "TextGenerator": "generation",
    "GenerationConfig": "generation",
    "TransformersGenerator": "generation",
    "OpenAIChatGenerator": "generation",
    "OpenAICompletionGenerator": "generation",
    "load_causal_lm": "loading",
    "ModelLoadOptions": "loading",
    "ModelNotFoundError": "loading",
    "TinyLMSpec": "pretrain",
    "train_bpe_tokenizer": "pretrain",
    "pretrain_tiny_lm": "pretrain",
    "cached_tiny_lm": "pretrain",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
