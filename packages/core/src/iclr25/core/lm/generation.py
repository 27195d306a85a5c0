"""Text generation backends behind one protocol.

- :class:`TransformersGenerator`: a local Hugging Face causal LM, batched, left-padded.
- :class:`OpenAIChatGenerator`: any OpenAI-compatible chat-completions server (vLLM's
  ``vllm serve``, hosted APIs), with timeouts, retries and concurrent requests.
- :class:`OpenAICompletionGenerator`: the same server's plain ``/v1/completions`` endpoint,
  for raw continuations of a prompt (no chat template), as sampling from a base model needs. The API key comes
  from the argument or the environment and is never logged or shown in ``repr``.

Neither backend is imported until used; the HTTP backend needs only ``openai``
(extra ``iclr25-core[http]``), not torch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["GenerationConfig", "TextGenerator", "TransformersGenerator", "OpenAIChatGenerator",
           "OpenAICompletionGenerator"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationConfig:
    """Decoding settings shared by the backends.

    Args:
        max_new_tokens: the most tokens generated per prompt.
        temperature: sampling temperature (``0`` = greedy).
        top_p: nucleus-sampling mass in ``(0, 1]``.
        seed: seed for sampling (local backend: torch; HTTP: passed to the server when set).
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@runtime_checkable
class TextGenerator(Protocol):
    """Anything that turns a batch of prompts into one completion each."""

    name: str

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        """Return one completion (the new text only) per prompt, in order."""
        ...


class TransformersGenerator:
    """A local ``transformers`` causal LM as a :class:`TextGenerator`.

    Args:
        model: a ``*ForCausalLM`` model.
        tokenizer: its tokenizer (a pad token is required; EOS is used when pad is missing).
        batch_size: prompts per forward batch.
        device: ``"cpu"``, ``"cuda"``... (default: the model's device).
        chat_template: wrap each prompt as a single user turn with the tokenizer's chat template.
        name: the name recorded in results (default: the model's ``name_or_path``).
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 8, device: str | None = None,
                 chat_template: bool = False, name: str | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.device = device or str(next(model.parameters()).device)
        self.chat_template = chat_template
        self.name = name or getattr(model.config, "name_or_path", None) or type(model).__name__
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str = "auto", torch_dtype: str = "auto",
                        **kwargs: Any) -> TransformersGenerator:
        """Load a model and tokenizer by local path or Hugging Face id."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..seed import choose_device

        dev = choose_device(device)
        tok = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, torch_dtype=torch_dtype).to(dev)
        return cls(model, tok, device=dev, name=name_or_path, **kwargs)

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        import torch

        from ..progress import progress

        cfg = config or GenerationConfig()
        tok = self.tokenizer
        old_side = tok.padding_side
        tok.padding_side = "left"
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        texts = list(prompts)
        if self.chat_template:
            texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                             add_generation_prompt=True) for p in texts]
        out: list[str] = []
        self.model.eval()
        try:
            starts = range(0, len(texts), self.batch_size)
            for i in progress(starts, desc=f"generate[{self.name}]", quiet=True if len(texts) <= self.batch_size
                              else None):
                enc = tok(texts[i:i + self.batch_size], return_tensors="pt", padding=True).to(self.device)
                with torch.no_grad():
                    gen = self.model.generate(
                        **enc,
                        max_new_tokens=cfg.max_new_tokens,
                        do_sample=cfg.temperature > 0,
                        temperature=cfg.temperature if cfg.temperature > 0 else None,
                        top_p=cfg.top_p if cfg.temperature > 0 else None,
                        top_k=0 if cfg.temperature > 0 else None,  # no hidden top-k=50 truncation
                        pad_token_id=tok.pad_token_id,
                    )
                new = gen[:, enc["input_ids"].shape[1]:]
                out += tok.batch_decode(new, skip_special_tokens=True)
        finally:
            tok.padding_side = old_side
        return out


class OpenAIChatGenerator:
    """An OpenAI-compatible chat-completions endpoint as a :class:`TextGenerator`.

    Args:
        model: the model name the server expects (e.g. ``"meta-llama/Llama-3.1-8B-Instruct"``).
        base_url: the server's ``/v1`` URL; default ``$OPENAI_BASE_URL`` (else OpenAI's).
        api_key: the key; default ``$OPENAI_API_KEY`` (``"EMPTY"`` if unset, as vLLM accepts).
            It is never logged and never part of ``repr``.
        timeout: seconds per request.
        max_retries: retries on connection errors, 408/409/429 and 5xx (exponential backoff,
            by the ``openai`` client).
        concurrency: requests in flight at once.
        system_prompt: an optional system message sent before each prompt.
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, concurrency: int = 4,
                 system_prompt: str | None = None) -> None:
        from openai import OpenAI

        self.name = model
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self.concurrency = max(1, concurrency)
        self.system_prompt = system_prompt
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = OpenAI(base_url=self.base_url, api_key=key, timeout=timeout, max_retries=max_retries)

    def __repr__(self) -> str:
        return f"OpenAIChatGenerator(model={self.model!r}, base_url={self.base_url!r})"

    def _one(self, prompt: str, cfg: GenerationConfig) -> str:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        kw: dict[str, Any] = {}
        if cfg.seed is not None:
            kw["seed"] = cfg.seed
        resp = self._client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature, top_p=cfg.top_p, **kw,
        )
        return resp.choices[0].message.content or ""

    def generate(self, prompts: Sequence[str], config: GenerationConfig | None = None) -> list[str]:
        cfg = config or GenerationConfig()
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda p: self._one(p, cfg), prompts))


class OpenAICompletionGenerator(OpenAIChatGenerator):
    """An OpenAI-compatible *completions* endpoint (``/v1/completions``) as a :class:`TextGenerator`.

    The prompt is continued as raw text, with no chat template and no system message — what
    sampling continuations from a base model needs (vLLM serves this endpoint for every model).
    Arguments as :class:`OpenAIChatGenerator` (``system_prompt`` is not accepted).

    Extra:
        stop: optional stop strings sent with each request.
    """

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 3, concurrency: int = 4,
                 stop: Sequence[str] | None = None) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, timeout=timeout,
                         max_retries=max_retries, concurrency=concurrency)
        self.stop = list(stop) if stop else None

    def __repr__(self) -> str:
        return f"OpenAICompletionGenerator(model={self.model!r}, base_url={self.base_url!r})"

    def _one(self, prompt: str, cfg: GenerationConfig) -> str:
        kw: dict[str, Any] = {}
        if cfg.seed is not None:
            kw["seed"] = cfg.seed
        if self.stop:
            kw["stop"] = self.stop
        resp = self._client.completions.create(
            model=self.model, prompt=prompt, max_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature, top_p=cfg.top_p, **kw,
        )
        return resp.choices[0].text or ""
