"""Sampling ``N`` responses per prompt through the core :class:`~iclr25.core.lm.TextGenerator`
(Algorithm line 3): :class:`~iclr25.core.lm.TransformersGenerator` locally, or a vLLM /
OpenAI-compatible server through :class:`~iclr25.core.lm.OpenAIChatGenerator` /
:class:`~iclr25.core.lm.OpenAICompletionGenerator`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .pairs import Sample

__all__ = ["make_generator", "sample_responses", "check_context"]

log = logging.getLogger(__name__)


def check_context(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int,
                  chat_template: bool = False) -> None:
    """Raise ``ValueError`` when the longest prompt plus ``max_new_tokens`` exceeds the model's
    context (``max_position_embeddings`` / ``n_positions``), instead of an index error inside torch."""
    cfg = getattr(model, "config", None)
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if not limit or not prompts:
        return
    if chat_template:
        lengths = [len(tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                                     add_generation_prompt=True)) for p in prompts]
    else:
        lengths = [len(x) for x in tokenizer(list(prompts))["input_ids"]]
    i = max(range(len(lengths)), key=lengths.__getitem__)
    if lengths[i] + max_new_tokens > limit:
        raise ValueError(f"prompt {i} has {lengths[i]} tokens; with max_new_tokens={max_new_tokens} it exceeds the "
                         f"model's context of {limit} tokens (lower --max-new-tokens or shorten the prompts)")


def make_generator(backend: str = "transformers", *, model: Any = None, tokenizer: Any = None,
                   served_model: str | None = None, base_url: str | None = None, batch_size: int = 16,
                   chat_template: bool = False, concurrency: int = 8, system_prompt: str | None = None):
    """A core ``TextGenerator``.

    Args:
        backend: ``"transformers"`` (``model`` and ``tokenizer`` objects), ``"openai-chat"`` or
            ``"openai-completions"`` (``served_model`` on the server at ``base_url``).
        model, tokenizer: the local model (transformers backend).
        served_model: the model name the server expects.
        base_url: the server's ``/v1`` URL (default ``$OPENAI_BASE_URL``).
        batch_size: prompts per ``generate`` call (transformers).
        chat_template: wrap prompts in the tokenizer's chat template (transformers).
        concurrency: requests in flight (HTTP backends).
        system_prompt: a system message (openai-chat only).

    Raises:
        ValueError: an unknown backend or missing arguments. ImportError: an HTTP backend without
            the ``openai`` package (``pip install 'iclr25-cream[http]'``).
    """
    if backend == "transformers":
        if model is None or tokenizer is None:
            raise ValueError("the transformers backend needs a model and a tokenizer")
        from iclr25.core.lm import TransformersGenerator

        return TransformersGenerator(model, tokenizer, batch_size=batch_size, chat_template=chat_template)
    if backend in ("openai-chat", "openai-completions"):
        if not served_model:
            raise ValueError(f"the {backend} backend needs the served model's name (--served-model or --model)")
        try:
            import openai  # noqa: F401
        except ImportError:
            raise ImportError("sampling from a server needs openai: pip install 'iclr25-cream[http]'") from None
        from iclr25.core.lm import OpenAIChatGenerator, OpenAICompletionGenerator

        if backend == "openai-chat":
            return OpenAIChatGenerator(served_model, base_url=base_url, concurrency=concurrency,
                                       system_prompt=system_prompt)
        return OpenAICompletionGenerator(served_model, base_url=base_url, concurrency=concurrency)
    raise ValueError(f"backend must be transformers, openai-chat or openai-completions, got {backend!r}")


def sample_responses(generator: Any, prompts: Sequence[str], n: int, config: Any, *,
                     ids: Sequence[str] | None = None, drop_empty: bool = True) -> list[Sample]:
    """Draw ``n`` responses for every prompt with one batched ``generate`` call.

    Args:
        generator: a core ``TextGenerator``.
        prompts: the prompts.
        n: responses per prompt (``>= 2``).
        config: a core ``GenerationConfig`` (``seed`` seeds the local backend once per call; for
            HTTP backends a fixed seed would make the ``n`` copies identical, so it is not sent).
        ids: prompt ids (default ``"0", "1", ...``).
        drop_empty: drop empty (whitespace-only) responses, and then prompts left with fewer than 2
            responses, with a logged count (the samples file format forbids empty responses).

    Returns:
        One :class:`~iclr25.cream.pairs.Sample` per kept prompt.

    Raises:
        ValueError: ``n < 2``, ids of the wrong length or duplicated, a generator returning the
            wrong number of texts.
    """
    from dataclasses import replace

    if n < 2:
        raise ValueError(f"n must be >= 2 (pairs need two responses), got {n}")
    ids = [str(i) for i in range(len(prompts))] if ids is None else [str(i) for i in ids]
    if len(ids) != len(prompts):
        raise ValueError(f"{len(ids)} ids for {len(prompts)} prompts")
    if len(set(ids)) != len(ids):
        raise ValueError("prompt ids must be unique")
    cfg = config
    if getattr(generator, "_client", None) is not None and getattr(config, "seed", None) is not None:
        cfg = replace(config, seed=None)
    flat = [p for p in prompts for _ in range(n)]
    texts = generator.generate(flat, cfg)
    if len(texts) != len(flat):
        raise ValueError(f"generator returned {len(texts)} texts for {len(flat)} prompts")
    out, n_empty, n_dropped = [], 0, 0
    for j, (pid, p) in enumerate(zip(ids, prompts)):
        rs = texts[j * n:(j + 1) * n]
        if drop_empty:
            kept = [r for r in rs if r.strip()]
            n_empty += len(rs) - len(kept)
            if len(kept) < 2:
                n_dropped += 1
                continue
            rs = kept
        out.append(Sample(pid, p, tuple(rs)))
    if n_empty:
        log.warning("sample: dropped %d empty response(s); %d prompt(s) left with fewer than 2 responses were "
                    "dropped", n_empty, n_dropped)
    return out
