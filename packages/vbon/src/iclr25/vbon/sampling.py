"""Batched sampling from a causal LM and the Best-of-N sampler (paper §2).

Sampling is pure ancestral sampling (temperature 1, ``top_k=0``, ``top_p=1`` by default, as in the
official sentiment config) with Hugging Face ``generate`` and its KV cache, many prompts per batch.
Token ids are kept, so log-probabilities are computed on exactly the sampled tokens (no re-tokenisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .rewards import RewardFn, call_reward

__all__ = ["Samples", "sample", "sample_texts", "response_logprobs", "best_of_n", "BoNResult",
           "select_best", "best_of_n_generator"]


@dataclass
class Samples:
    """A batch of sampled continuations.

    Attributes:
        prompts: ``B`` prompt strings (row ``b`` continues ``prompts[b]``; samples of one prompt are contiguous).
        continuations: ``B`` decoded continuation strings (special tokens removed).
        input_ids: ``(B, L)`` long — left-padded prompt then continuation (right-padded after EOS).
        attention_mask: ``(B, L)`` long — 1 on real tokens.
        position_ids: ``(B, L)`` long — positions that ignore left padding.
        response_mask: ``(B, L)`` long — 1 on continuation tokens (up to and including the first EOS).
        prompt_mask: ``(B, L)`` long — 1 on prompt tokens after the first one (scorable prompt tokens).
    """

    prompts: list[str]
    continuations: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    prompt_mask: torch.Tensor


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def sample(model, tokenizer, prompts: Sequence[str], num_samples: int = 1, max_new_tokens: int = 24,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Samples:
    """Draw ``num_samples`` continuations per prompt in one batched ``generate`` call.

    Args:
        model: a ``*ForCausalLM`` (any device).
        tokenizer: its fast tokenizer (a pad token is required; BOS is added if its post-processor does).
        prompts: ``P`` prompt strings (non-empty).
        num_samples: samples per prompt; rows are ``[p0 s0, p0 s1, ..., p1 s0, ...]``.
        max_new_tokens: continuation length cap (tokens).
        temperature, top_k, top_p: sampling settings (``top_k=0``: no top-k filter).

    Returns:
        :class:`Samples` with ``B = P * num_samples`` rows (on the model's device).

    Raises:
        ValueError: empty prompt set or ``num_samples < 1``.
    """
    prompts = list(prompts)
    if not prompts:
        raise ValueError("sample(): the prompt set is empty")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    dev = _model_device(model)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    old = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = old
    ids = enc["input_ids"].repeat_interleave(num_samples, 0).to(dev)
    attn = enc["attention_mask"].repeat_interleave(num_samples, 0).to(dev)
    was_training = model.training
    model.eval()
    gen = model.generate(input_ids=ids, attention_mask=attn, do_sample=True, max_new_tokens=max_new_tokens,
                         temperature=temperature, top_k=top_k, top_p=top_p,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model.train(was_training)
    lp = ids.shape[1]
    new = gen[:, lp:]
    eos = (new == tokenizer.eos_token_id).long()
    resp = ((eos.cumsum(1) - eos) == 0).long()
    full_attn = torch.cat([attn, resp], 1)
    input_ids = torch.where(full_attn.bool(), gen, torch.full_like(gen, tokenizer.pad_token_id))
    pos = (full_attn.cumsum(1) - 1).clamp(min=0)
    response_mask = torch.cat([torch.zeros_like(attn), resp], 1)
    first = (attn.cumsum(1) == 1) & attn.bool()
    prompt_mask = torch.cat([(attn.bool() & ~first).long(), torch.zeros_like(resp)], 1)
    rows = new.masked_fill(resp == 0, tokenizer.pad_token_id).tolist()
    conts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    return Samples([p for p in prompts for _ in range(num_samples)], conts, input_ids, full_attn, pos,
                   response_mask, prompt_mask)


def response_logprobs(model, s: Samples, mask: torch.Tensor | None = None, temperature: float = 1.0) -> torch.Tensor:
    """Token log-probs ``(B, L)`` of ``s`` under ``model`` on ``mask`` (default: the response tokens),
    via :func:`iclr25.core.lm.token_logprobs` with padding-aware position ids. Keeps the graph when
    called with grad enabled.

    Args:
        temperature: score under ``softmax(logits / temperature)``, the distribution ``generate`` samples
            from at that temperature (``top_k=0``, ``top_p=1``); 1 is the model itself.
    """
    from iclr25.core.lm import token_logprobs

    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    mask = s.response_mask if mask is None else mask
    logits = model(input_ids=s.input_ids, attention_mask=s.attention_mask, position_ids=s.position_ids).logits
    if temperature != 1.0:
        logits = logits / temperature
    return token_logprobs(model, s.input_ids, s.attention_mask, mask, logits=logits)


def sample_texts(model, tokenizer, prompts: Sequence[str], num_samples: int, max_new_tokens: int = 24,
                 batch_size: int = 256, temperature: float = 1.0, progress: bool = False,
                 desc: str = "sample") -> list[list[str]]:
    """``[P][num_samples]`` continuation strings, generated ``batch_size`` sequences at a time."""
    from iclr25.core.progress import progress as progress_bar

    prompts = list(prompts)
    if not prompts:
        raise ValueError("sample_texts(): the prompt set is empty")
    flat = [p for p in prompts for _ in range(num_samples)]
    out: list[str] = []
    starts = range(0, len(flat), batch_size)
    for i in progress_bar(starts, desc=desc, quiet=None if progress else True):
        chunk = flat[i:i + batch_size]
        out += sample(model, tokenizer, chunk, 1, max_new_tokens, temperature).continuations
    return [out[j * num_samples:(j + 1) * num_samples] for j in range(len(prompts))]


@dataclass
class BoNResult:
    """Best-of-N output: the chosen continuation and reward per prompt, plus all ``(P, N)`` rewards."""

    prompts: list[str]
    best: list[str]
    best_reward: torch.Tensor
    candidates: list[list[str]]
    rewards: torch.Tensor


def best_of_n(model, tokenizer, reward_fn: RewardFn, prompts: Sequence[str], n: int, max_new_tokens: int = 24,
              batch_size: int = 256, temperature: float = 1.0) -> BoNResult:
    """Inference-time Best-of-N (§2): draw ``N`` samples per prompt from ``model`` (batched), score them
    with ``reward_fn`` and keep the highest-reward one (first among ties).

    Args:
        model, tokenizer: the reference policy.
        reward_fn: ``(prompts, continuations) -> (B,)`` floats.
        prompts: ``P`` prompts (non-empty).
        n: ``N >= 1``.

    Returns:
        :class:`BoNResult`.

    Raises:
        ValueError: ``n < 1``, empty prompts, a reward function returning NaN or a wrong shape.
    """
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"N must be an integer >= 1, got {n!r}")
    prompts = list(prompts)
    cands = sample_texts(model, tokenizer, prompts, n, max_new_tokens, batch_size, temperature)
    return select_best(prompts, cands, reward_fn)


def select_best(prompts: Sequence[str], cands: Sequence[Sequence[str]], reward_fn: RewardFn) -> BoNResult:
    """Score ``[P][N]`` candidates with one batched ``reward_fn`` call and keep each prompt's highest-reward
    one (first among ties) — the selection step of Best-of-N (§2).

    Raises:
        ValueError: rows of unequal length, a reward function returning NaN or a wrong shape.
    """
    prompts = list(prompts)
    n = len(cands[0]) if cands else 0
    if len(cands) != len(prompts) or n < 1 or any(len(row) != n for row in cands):
        raise ValueError(f"select_best(): need {len(prompts)} rows of N >= 1 candidates each, got row lengths "
                         f"{[len(row) for row in cands]}")
    flat_p = [p for p in prompts for _ in range(n)]
    r = call_reward(reward_fn, flat_p, [t for row in cands for t in row]).view(len(prompts), n)
    idx = r.argmax(1)
    best = [cands[j][int(idx[j])] for j in range(len(prompts))]
    return BoNResult(prompts, best, r.gather(1, idx[:, None]).squeeze(1), cands, r)


def best_of_n_generator(generator, reward_fn: RewardFn, prompts: Sequence[str], n: int, max_new_tokens: int = 24,
                        temperature: float = 1.0, seed: int | None = 0, progress: bool = False) -> BoNResult:
    """Best-of-N (§2) with candidates from any :class:`iclr25.core.lm.TextGenerator` — e.g. a vLLM server
    through :class:`iclr25.core.lm.OpenAICompletionGenerator` (raw continuations, no chat template).

    Candidate ``i`` of every prompt is requested with sampling seed ``seed * 1_000_003 + i`` (``seed=None``:
    no seed is sent), so the ``N`` candidates of a prompt are distinct draws, and a seeded run can be repeated
    against a server that honours per-request seeds (vLLM does).

    Args:
        generator: ``generate(prompts, GenerationConfig) -> list[str]`` (one continuation per prompt).
        reward_fn: ``(prompts, continuations) -> (B,)`` floats.
        prompts: ``P`` prompts (non-empty); n: ``N >= 1``; temperature: ``> 0`` (ancestral sampling, top_p 1).

    Returns:
        :class:`BoNResult` (``candidates[j][i]`` is candidate ``i`` of prompt ``j``).

    Raises:
        ValueError: ``n < 1``, empty prompts, a generator returning the wrong number of texts, bad rewards.
    """
    from iclr25.core.lm import GenerationConfig
    from iclr25.core.progress import progress as progress_bar

    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"N must be an integer >= 1, got {n!r}")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("best_of_n_generator(): the prompt set is empty")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for Best-of-N sampling, got {temperature!r}")
    cols: list[list[str]] = []
    for i in progress_bar(range(n), desc="BoN candidates", unit="round", quiet=None if progress else True):
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0,
                               seed=None if seed is None else seed * 1_000_003 + i)
        texts = list(generator.generate(prompts, cfg))
        if len(texts) != len(prompts):
            raise ValueError(f"the generator returned {len(texts)} texts for {len(prompts)} prompts")
        cols.append(texts)
    cands = [[cols[i][j] for i in range(n)] for j in range(len(prompts))]
    return select_best(prompts, cands, reward_fn)
