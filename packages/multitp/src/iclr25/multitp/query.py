"""Querying a model (MultiTP §3.2 step 1): each language's translated system prompt + the vignette, T = 0,
at most 1024 new tokens.

Any :class:`~iclr25.core.lm.generation.TextGenerator` works. The core's generators hold one system
prompt each, so a language gets its own generator: :func:`with_system_prompt` makes one from a template
generator (an ``OpenAIChatGenerator`` copy with ``system_prompt`` set; a ``TransformersGenerator`` wrapped
so that its chat template renders the system turn), or ``backend`` is a factory ``(lang, system_prompt)
-> TextGenerator`` (e.g. a :class:`~iclr25.multitp.agents.ScriptedAgent`).
"""

from __future__ import annotations

import copy
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from iclr25.core.lm.generation import GenerationConfig

from .spec import PAPER_MAX_TOKENS, PAPER_TEMPERATURE, SYSTEM_PROMPTS

__all__ = ["PAPER_GENERATION", "with_system_prompt", "backend_for", "query_model", "ChatTemplateGenerator"]

log = logging.getLogger(__name__)

#: The paper's decoding for the model under test: temperature 0, max_tokens 1024.
PAPER_GENERATION = GenerationConfig(max_new_tokens=PAPER_MAX_TOKENS, temperature=PAPER_TEMPERATURE)


class ChatTemplateGenerator:
    """Wrap a local ``TransformersGenerator`` so that prompts are rendered as (system, user) chat turns.

    With a tokenizer that has no chat template, the prompt is ``system + "\\n\\n" + user``.
    """

    def __init__(self, inner: Any, system_prompt: str | None) -> None:
        self.inner = copy.copy(inner)
        self.inner.chat_template = False
        self.system_prompt = system_prompt
        self.name = getattr(inner, "name", type(inner).__name__)

    def render(self, prompt: str) -> str:
        tok = self.inner.tokenizer
        msgs = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return f"{self.system_prompt}\n\n{prompt}" if self.system_prompt else prompt

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        return self.inner.generate([self.render(p) for p in prompts], config)


class _Prefixed:
    def __init__(self, inner: Any, system_prompt: str) -> None:
        self.inner, self.system_prompt = inner, system_prompt
        self.name = getattr(inner, "name", type(inner).__name__)

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        return self.inner.generate([f"{self.system_prompt}\n\n{p}" for p in prompts], config)


def with_system_prompt(generator: Any, system_prompt: str | None) -> Any:
    """A generator that sends ``system_prompt`` before each prompt.

    - an object with a ``system_prompt`` attribute (``OpenAIChatGenerator``): a shallow copy with it set;
    - a ``TransformersGenerator`` (has ``tokenizer`` and ``model``): :class:`ChatTemplateGenerator`;
    - anything else: the system prompt is prepended to the prompt text (logged once).
    """
    if hasattr(generator, "system_prompt"):
        g = copy.copy(generator)
        g.system_prompt = system_prompt
        return g
    if hasattr(generator, "tokenizer") and hasattr(generator, "model"):
        return ChatTemplateGenerator(generator, system_prompt)
    if not system_prompt:
        return generator
    log.info("%s has no system-prompt support: the system prompt is prepended to the prompt",
             getattr(generator, "name", type(generator).__name__))
    return _Prefixed(generator, system_prompt)


def backend_for(backend: Any, lang: str, system_prompt: str | None) -> Any:
    """The generator for one language: ``backend(lang, system_prompt)`` for a factory, else
    :func:`with_system_prompt`."""
    if hasattr(backend, "generate"):
        return with_system_prompt(backend, system_prompt)
    if callable(backend):
        return backend(lang, system_prompt)
    raise TypeError(f"backend must be a TextGenerator or a factory (lang, system_prompt) -> TextGenerator, got {backend!r}")


def query_model(vignettes: Sequence[Any], backend: Any | Callable[[str, str], Any], *,
                system_prompts: Mapping[str, str] | str | None = None, role: str = "normal",
                config: GenerationConfig = PAPER_GENERATION, batch_size: int = 8) -> list[str]:
    """Ask a model every vignette (MultiTP §3.2 step 1), in memory (see :mod:`~iclr25.multitp.runner` for the
    resumable, concurrent, cached version).

    Args:
        vignettes: (translated) :class:`~iclr25.multitp.vignettes.Vignette` records, any languages.
        backend: a ``TextGenerator`` or a factory ``(lang, system_prompt) -> TextGenerator``.
        system_prompts: ``{lang: translated system prompt}`` or one prompt for all; default: the English
            prompt of ``role`` (paper: ``"normal"``) — translate it with
            :func:`~iclr25.multitp.translation.translate_system_prompt`.
        role: system role when ``system_prompts`` is not given.
        config: decoding (default :data:`PAPER_GENERATION`: T = 0, 1024 tokens).
        batch_size: prompts per ``generate`` call.

    Returns:
        One answer per vignette, in input order.

    Raises:
        ValueError: an unknown role or ``batch_size < 1``; RuntimeError: a backend returning the wrong count.
    """
    if role not in SYSTEM_PROMPTS:
        raise ValueError(f"role={role!r}; choose one of {list(SYSTEM_PROMPTS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    by_lang: dict[str, list[int]] = defaultdict(list)
    for i, v in enumerate(vignettes):
        by_lang[v.lang].append(i)
    out: list[str | None] = [None] * len(vignettes)
    for lang, idx in by_lang.items():
        if isinstance(system_prompts, str):
            sp = system_prompts
        elif system_prompts is not None and lang in system_prompts:
            sp = system_prompts[lang]
        else:
            sp = SYSTEM_PROMPTS[role]
        gen = backend_for(backend, lang, sp)
        for s in range(0, len(idx), batch_size):
            chunk = idx[s:s + batch_size]
            res = gen.generate([vignettes[i].prompt for i in chunk], config)
            if len(res) != len(chunk):
                raise RuntimeError(f"backend returned {len(res)} answers for {len(chunk)} prompts")
            for i, r in zip(chunk, res):
                out[i] = r if isinstance(r, str) else ""
    return [o or "" for o in out]
