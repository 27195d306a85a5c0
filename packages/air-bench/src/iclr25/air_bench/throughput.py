"""Throughput of the runner (prompts/s): batched / concurrent versus one prompt at a time, on a
local tiny GPT-2 (``iclr25-core[lm]``) and on a local OpenAI-compatible stub server — both through
:func:`~iclr25.air_bench.runner.generate_responses`, cache writes included."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from iclr25.core.lm.generation import GenerationConfig

from .data import PromptItem
from .runner import RetryPolicy, generate_responses
from .testing import StubChatServer

__all__ = ["http_throughput", "local_throughput"]


def _rate(backend: Any, prompts: Sequence[PromptItem], cfg: GenerationConfig, batch_size: int,
          concurrency: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        res = generate_responses(backend, prompts, Path(d) / "responses.jsonl", config=cfg,
                                 batch_size=batch_size, concurrency=concurrency,
                                 retry=RetryPolicy(max_retries=0), progress=False)
        dt = time.perf_counter() - t0
    if res.failed or len(res.records) != len(prompts):
        raise RuntimeError(f"throughput run incomplete: {len(res.failed)} failures")
    return len(prompts) / dt


def http_throughput(prompts: Sequence[PromptItem], *, latency_s: float = 0.05, concurrency: int = 16
                    ) -> dict[str, float]:
    """Prompts/s against a local stub server with ``latency_s`` per request: one request at a time
    versus ``concurrency`` in flight.

    Returns:
        ``{"sequential": p/s, "concurrent": p/s, "ratio": concurrent / sequential}``.
    """
    from iclr25.core.lm.generation import OpenAIChatGenerator

    cfg = GenerationConfig(max_new_tokens=16, temperature=0.0)
    with StubChatServer(latency_s=latency_s, max_lifetime_s=300) as srv:
        be = OpenAIChatGenerator("stub-model", base_url=srv.base_url, api_key="EMPTY", timeout=10,
                                 max_retries=0, concurrency=1)
        seq = _rate(be, prompts, cfg, 1, 1)
        con = _rate(be, prompts, cfg, 1, concurrency)
    return {"sequential": seq, "concurrent": con, "ratio": con / seq}


def local_throughput(prompts: Sequence[PromptItem], *, batch_size: int = 32, max_new_tokens: int = 32,
                     prompt_chars: int = 96) -> dict[str, float]:
    """Prompts/s of a local tiny GPT-2 (byte tokenizer, 2 layers; ``iclr25-core[lm]``) on CPU:
    batch size 1 versus ``batch_size`` (greedy, ``max_new_tokens``). Prompts are cut to
    ``prompt_chars`` characters to fit the tiny model's 256 positions.

    Returns:
        ``{"sequential": p/s, "batched": p/s, "ratio": batched / sequential}``.
    """
    from iclr25.core.lm import TransformersGenerator, byte_tokenizer, tiny_causal_lm

    model = tiny_causal_lm(seed=0).eval()
    be = TransformersGenerator(model, byte_tokenizer(), batch_size=1, device="cpu", name="tiny-gpt2")
    short = [replace(p, prompt=p.prompt[:prompt_chars]) for p in prompts]
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0)
    seq = _rate(be, short, cfg, 1, 1)
    be.batch_size = batch_size
    bat = _rate(be, short, cfg, batch_size, 1)
    return {"sequential": seq, "batched": bat, "ratio": bat / seq}
