"""Batched sampling of ``N`` responses per prompt, kept as token ids so the reference model can rescore them.

:class:`Samples` holds ``B x N`` sequences ``prompt + response`` (prompt left-padded, response right-padded,
EOS included in the response) with the masks core ``sequence_logprobs`` needs. Two sources:

- :func:`sample_responses`: a local Hugging Face model, all ``B x N`` draws in batched ``generate`` calls at
  the given temperature (default 1, no top-k / top-p truncation: ``pi_base`` itself).
- :func:`samples_from_texts`: responses that came back as text from any :class:`iclr25.core.lm.TextGenerator`
  (``OpenAIChatGenerator`` for vLLM, ``TransformersGenerator``), re-tokenised with EOS appended.

Neither returns generation scores: scores from a generation API are post-processed (temperature, top-k/top-p,
penalties) and are not ``log pi_base``. Self-rewards always come from a teacher-forced forward pass
(:mod:`iclr25.sharpening.rewards`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .exact import check_n

__all__ = ["Samples", "sample_responses", "samples_from_texts", "check_prompts", "eos_ids"]

log = logging.getLogger(__name__)


@dataclass
class Samples:
    """``N`` responses for each of ``B`` prompts, as text and as token ids.

    Attributes:
        prompts: the ``B`` prompt texts.
        n: responses per prompt.
        responses: ``B`` lists of ``N`` decoded responses (special tokens removed).
        input_ids: ``(B*N, L)`` long — row ``b*N + j`` is prompt ``b`` (left-padded) + response ``j``.
        attention_mask: ``(B*N, L)`` long, 1 on real tokens.
        response_mask: ``(B*N, L)`` long, 1 on response tokens (EOS included when it was produced).
        lengths: ``(B, N)`` long — response length in tokens (EOS included).
        finished: ``(B, N)`` bool — the response ended with EOS within ``max_new_tokens``.
    """

    prompts: list[str]
    n: int
    responses: list[list[str]]
    input_ids: object
    attention_mask: object
    response_mask: object
    lengths: object
    finished: object

    @property
    def batch_size(self) -> int:
        return len(self.prompts)

    def select(self, index) -> Samples:
        """The sub-batch of prompts ``index`` (a sequence of prompt positions)."""
        import torch

        idx = torch.as_tensor(list(index), dtype=torch.long)
        rows = (idx[:, None] * self.n + torch.arange(self.n)[None]).reshape(-1)
        return Samples([self.prompts[i] for i in idx.tolist()], self.n, [self.responses[i] for i in idx.tolist()],
                       self.input_ids[rows], self.attention_mask[rows], self.response_mask[rows],
                       self.lengths[idx], self.finished[idx])

    def row(self, b: int, j: int):
        """``(input_ids, attention_mask, response_mask)`` of response ``j`` of prompt ``b``, trimmed of padding."""
        r = b * self.n + j
        keep = self.attention_mask[r].bool()
        return self.input_ids[r][keep], self.attention_mask[r][keep], self.response_mask[r][keep]


def check_prompts(prompts: Sequence[str]) -> list[str]:
    """``prompts`` as a list; ``ValueError`` naming the first empty or non-string prompt."""
    if isinstance(prompts, str):
        raise ValueError("prompts must be a sequence of strings, not a single string")
    out = list(prompts)
    if not out:
        raise ValueError("no prompts given")
    for i, p in enumerate(out):
        if not isinstance(p, str) or not p.strip():
            raise ValueError(f"prompt {i} is empty or not a string: {p!r}")
    return out


def eos_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a response: the tokenizer's EOS plus ``generation_config.eos_token_id``."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gc = getattr(model, "generation_config", None)
    extra = getattr(gc, "eos_token_id", None) if gc is not None else None
    if extra is not None:
        ids += [int(e) for e in (extra if isinstance(extra, (list, tuple)) else [extra])]
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation config defines an EOS token")
    return list(dict.fromkeys(ids))


def _check_decoding(temperature: float, top_p: float, top_k: int, max_new_tokens: int) -> None:
    if isinstance(temperature, bool) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if not (math.isfinite(top_p) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0: no top-k truncation), got {top_k!r}")
    check_n(max_new_tokens, "max_new_tokens")


def _assemble(tokenizer, prompts, n, P, Pm, resp, resp_len, finished, pad):
    """Build :class:`Samples` from left-padded prompts ``P`` ``(B, Lp)`` and responses ``(B*N, T)``."""
    import torch

    T = resp.shape[1]
    rmask = (torch.arange(T)[None] < resp_len[:, None]).long()
    resp = torch.where(rmask.bool(), resp, torch.full_like(resp, pad))
    Prep, Pmrep = P.repeat_interleave(n, 0), Pm.repeat_interleave(n, 0)
    input_ids = torch.cat([Prep, resp], 1)
    attention = torch.cat([Pmrep, rmask], 1)
    response_mask = torch.cat([torch.zeros_like(Pmrep), rmask], 1)
    fin = finished.reshape(len(prompts), n)
    texts = tokenizer.batch_decode(resp, skip_special_tokens=True)
    responses = [texts[b * n:(b + 1) * n] for b in range(len(prompts))]
    return Samples(list(prompts), n, responses, input_ids, attention, response_mask,
                   resp_len.reshape(len(prompts), n), fin)


def check_context(model, prompt_mask, max_new_tokens: int) -> None:
    """Fail early when the longest prompt plus ``max_new_tokens`` exceeds the model's position count.

    Args:
        model: a causal LM whose ``config`` has ``max_position_embeddings`` (GPT-2: ``n_positions``); a model
            without one is not checked.
        prompt_mask: ``(B, Lp)`` attention mask of the left-padded prompts.
        max_new_tokens: the longest response.

    Raises:
        ValueError: names the first over-long prompt (0-based index), its token count and the fix; without this
            check GPT-2 indexes past its position table (an IndexError deep inside ``generate``).
    """
    conf = getattr(model, "config", None)
    n_pos = getattr(conf, "max_position_embeddings", None) or getattr(conf, "n_positions", None)
    if not isinstance(n_pos, int) or n_pos <= 0:
        return
    lengths = prompt_mask.sum(1)
    over = (lengths + max_new_tokens > n_pos).nonzero()
    if len(over):
        i = int(over[0, 0])
        raise ValueError(f"prompt {i} has {int(lengths[i])} tokens; with max_new_tokens={max_new_tokens} it exceeds "
                         f"the model's context of {n_pos} positions ({len(over)} prompt(s) too long): shorten the "
                         "prompts or lower --max-new-tokens")


def _left_pad(tokenizer, prompts):
    from .exact import _pad_prompts

    return _pad_prompts(tokenizer, prompts)


def sample_responses(model, tokenizer, prompts: Sequence[str], n: int, *, temperature: float = 1.0,
                     top_p: float = 1.0, top_k: int = 0, max_new_tokens: int = 64, batch_size: int = 256,
                     progress: bool = False) -> Samples:
    """Draw ``n`` responses per prompt from a local causal LM in batched ``generate`` calls.

    Args:
        model: a ``*ForCausalLM`` model (eval mode is set for the call and restored).
        tokenizer: its tokenizer; prompts are tokenised without special tokens and left-padded.
        prompts: ``B`` non-empty prompt texts.
        n: responses per prompt (>= 1).
        temperature: 1 samples ``pi`` itself (the paper's setting); 0 is greedy decoding.
        top_p, top_k: truncation (off by default: 1.0 and 0).
        max_new_tokens: the longest response; a response without EOS by then is cut and marked unfinished
            (its share is logged as a warning).
        batch_size: sequences per ``generate`` call.
        progress: show a progress bar over the calls.

    Returns:
        :class:`Samples`. Randomness comes from torch's global generator (seed it for reproducibility).

    Raises:
        ValueError: bad ``n``, decoding settings or prompts.
    """
    import torch

    from iclr25.core.progress import progress as progress_bar

    prompts = check_prompts(prompts)
    n = check_n(n)
    _check_decoding(temperature, top_p, top_k, max_new_tokens)
    check_n(batch_size, "batch_size")
    P, Pm, pad = _left_pad(tokenizer, prompts)
    check_context(model, Pm, max_new_tokens)
    stops = eos_ids(model, tokenizer)
    dev = next(model.parameters()).device
    rows = P.shape[0] * n
    Prep, Pmrep = P.repeat_interleave(n, 0), Pm.repeat_interleave(n, 0)
    resp = torch.full((rows, max_new_tokens), pad, dtype=torch.long)
    sample = temperature > 0
    kw = dict(do_sample=sample, max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=stops)
    if sample:
        kw.update(temperature=float(temperature), top_p=float(top_p), top_k=int(top_k))
    else:
        kw.update(temperature=None, top_p=None, top_k=None)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            starts = range(0, rows, batch_size)
            for s in progress_bar(starts, desc="sample", total=len(starts), unit="batch",
                                  quiet=None if progress else True):
                sl = slice(s, s + batch_size)
                am = Pmrep[sl].to(dev)
                gen = model.generate(input_ids=Prep[sl].to(dev), attention_mask=am, **kw)
                new = gen[:, P.shape[1]:].cpu()
                resp[sl, :new.shape[1]] = new
    finally:
        model.train(was_training)
    is_eos = torch.isin(resp, torch.tensor(stops))
    has = is_eos.any(1)
    first = torch.where(has, is_eos.float().argmax(1), torch.full((rows,), max_new_tokens))
    length = torch.where(has, first + 1, torch.full((rows,), max_new_tokens))
    n_unfinished = int((~has).sum())
    if n_unfinished:
        log.warning("%d of %d responses (%.2f%%) reached max_new_tokens=%d without EOS: kept as truncated, no EOS "
                    "scored", n_unfinished, rows, 100 * n_unfinished / rows, max_new_tokens)
    return _assemble(tokenizer, prompts, n, P, Pm, resp, length, has, pad)


def samples_from_texts(tokenizer, prompts: Sequence[str], responses: Sequence[Sequence[str]], *,
                       append_eos: bool = True, chat_template: bool = False) -> Samples:
    """:class:`Samples` from responses that a text-only backend returned (re-tokenised for rescoring).

    Args:
        tokenizer: the *reference* model's tokenizer.
        prompts: ``B`` prompts as sent to the backend.
        responses: ``B`` lists of ``N`` response texts each (the same ``N`` for every prompt).
        append_eos: append EOS to every response (a text backend stops at EOS without returning it).
        chat_template: wrap each prompt as one user turn with the tokenizer's chat template before scoring
            (do this when the backend is a chat endpoint that applied it).

    Raises:
        ValueError: ragged ``responses`` or empty prompts.
    """
    import torch

    prompts = check_prompts(prompts)
    if len(responses) != len(prompts):
        raise ValueError(f"{len(responses)} response lists for {len(prompts)} prompts")
    n = len(responses[0]) if responses else 0
    if n < 1 or any(len(r) != n for r in responses):
        raise ValueError("every prompt needs the same number (>= 1) of responses")
    scored = prompts
    if chat_template:
        scored = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                                add_generation_prompt=True) for p in prompts]
    P, Pm, pad = _left_pad(tokenizer, scored)
    eos = tokenizer.eos_token_id
    if append_eos and eos is None:
        raise ValueError("append_eos=True but the tokenizer has no eos_token_id")
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + ([eos] if append_eos else [])
           for row in responses for t in row]
    T = max(1, max(map(len, ids)))
    resp = torch.full((len(ids), T), pad, dtype=torch.long)
    for i, r in enumerate(ids):
        resp[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    length = torch.tensor([len(r) for r in ids], dtype=torch.long)
    if bool((length == 0).any()):
        raise ValueError("an empty response with append_eos=False cannot be scored")
    out = _assemble(tokenizer, prompts, n, P, Pm, resp, length, torch.full((len(ids),), bool(append_eos)), pad)
    out.responses = [list(r) for r in responses]
    return out


def response_lengths(samples: Samples) -> np.ndarray:
    """``(B, N)`` int response lengths in tokens (EOS included)."""
    return samples.lengths.numpy()
