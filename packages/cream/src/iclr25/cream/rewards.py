"""The DPO implicit reward used for self-rewarding (CREAM spec §1.1, Algorithm lines 4-5).

    r_t(x, y) = beta [log pi_t(y|x) - log pi_ref(y|x)]

with ``log pi(y|x)`` the *sum* of the response tokens' log-probabilities (prompt and padding tokens
never scored; :func:`iclr25.core.lm.sequence_logprobs`). For ranking the ``beta > 0`` factor is
irrelevant and the plain log-ratio is used (``beta=1``). The base model M0 has no reference; its
reward is the length-normalised log-likelihood ``(1/|y|) sum_k log pi_0(y_k|x, y_<k)``
(``average=True``).

Prompt and response are tokenised separately and concatenated (``prompt ids + response ids +
EOS``), so the prompt is never assumed to be a token prefix of prompt+response (the official code
assumed it); DPO training scores exactly the same token sequences.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["EncodedResponses", "encode_responses", "dpo_reward", "score_responses", "reward_vectors", "check_vocab"]

log = logging.getLogger(__name__)


@dataclass
class EncodedResponses:
    """Right-padded token ids of ``prompt + response (+ EOS)``.

    Attributes:
        input_ids: ``(B, T)`` long.
        attention_mask: ``(B, T)`` long, 1 on real tokens.
        response_mask: ``(B, T)`` long, 1 on the response tokens (and the appended EOS).
        n_truncated: responses cut to fit ``max_length``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    n_truncated: int = 0

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, idx: torch.Tensor | Sequence[int]) -> EncodedResponses:
        """Rows ``idx``, trimmed to their longest sequence."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        am = self.attention_mask[idx]
        width = int(am.sum(-1).max().item()) if len(idx) else 0
        return EncodedResponses(self.input_ids[idx, :width], am[:, :width], self.response_mask[idx, :width])

    def to(self, device: Any) -> EncodedResponses:
        return EncodedResponses(self.input_ids.to(device), self.attention_mask.to(device),
                                self.response_mask.to(device), self.n_truncated)


def _prompt_ids(tokenizer: Any, prompts: Sequence[str], chat_template: bool) -> list[list[int]]:
    if chat_template:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("chat_template=True but the tokenizer defines no chat template; pass a chat "
                             "model's tokenizer or drop --chat-template")
        return [list(tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                                   add_generation_prompt=True)) for p in prompts]
    return [list(x) for x in tokenizer(list(prompts), add_special_tokens=True)["input_ids"]]


def encode_responses(tokenizer: Any, prompts: Sequence[str], responses: Sequence[str], *,
                     append_eos: bool = True, chat_template: bool = False,
                     max_length: int | None = None) -> EncodedResponses:
    """Tokenise ``(prompt, response)`` pairs for scoring or DPO/SFT training.

    Args:
        tokenizer: a Hugging Face tokenizer with ``eos_token_id`` and ``pad_token_id``.
        prompts, responses: ``B`` strings each.
        append_eos: end each response with EOS (scored as part of the response).
        chat_template: wrap each prompt as one user turn with the tokenizer's chat template.
        max_length: the most tokens per sequence; longer responses are cut (counted in
            ``n_truncated`` and logged), a prompt that leaves no room is an error.

    Returns:
        :class:`EncodedResponses` (right padding with ``pad_token_id``).

    Raises:
        ValueError: length mismatch, a response that encodes to no tokens, a prompt of
            ``max_length`` tokens or more.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    p_ids = _prompt_ids(tokenizer, prompts, chat_template)
    r_ids = [list(x) for x in tokenizer(list(responses), add_special_tokens=False)["input_ids"]]
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    if append_eos and eos is None:
        raise ValueError("the tokenizer has no eos_token_id; pass append_eos=False")
    seqs, starts, n_trunc = [], [], 0
    for i, (p, r) in enumerate(zip(p_ids, r_ids)):
        if not r and not append_eos:
            raise ValueError(f"response {i} encodes to no tokens")
        r = r + [eos] if append_eos else r
        if max_length is not None:
            if len(p) >= max_length:
                raise ValueError(f"prompt {i} has {len(p)} tokens, at least max_length={max_length}; raise "
                                 "max_length or shorten the prompt")
            if len(p) + len(r) > max_length:
                r = r[:max_length - len(p)]
                n_trunc += 1
        if not p:  # position 0 has no prefix: a response must start after at least one token
            raise ValueError(f"prompt {i} encodes to no tokens; responses need a prompt to condition on")
        seqs.append(p + r)
        starts.append(len(p))
    if n_trunc:
        log.warning("encode_responses: %d of %d responses truncated to max_length=%s tokens", n_trunc, len(seqs),
                    max_length)
    width = max((len(s) for s in seqs), default=0)
    B = len(seqs)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    ids = torch.full((B, width), pad, dtype=torch.long)
    if B:
        flat = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
        pos = torch.arange(width).expand(B, width)
        real = pos < lengths[:, None]
        ids[real] = flat
        resp = real & (pos >= torch.tensor(starts)[:, None])
    else:
        real = resp = torch.zeros((0, 0), dtype=torch.bool)
    return EncodedResponses(ids, real.long(), resp.long(), n_trunc)


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)


def fit_max_length(model: Any, max_length: int | None) -> int | None:
    """``max_length`` capped at the model's context (``max_position_embeddings`` / GPT-2 ``n_positions``).

    A sequence longer than the position table ends in an IndexError inside the forward pass; capping here
    makes an over-long response go through :func:`encode_responses`' counted, logged truncation (and an
    over-long prompt through its ``ValueError``) instead. The cap is logged. A model without a context
    size in its config returns ``max_length`` unchanged.
    """
    cfg = getattr(_unwrap(model), "config", None)
    limit = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if not isinstance(limit, int) or limit <= 0 or (max_length is not None and max_length <= limit):
        return max_length
    log.info("max_length=%s exceeds the model's context of %d tokens; using %d", max_length, limit, limit)
    return limit


@torch.inference_mode()
def _batched_logps(model: Any, enc: EncodedResponses, batch_size: int, average: bool,
                   progress_desc: str | None = None) -> torch.Tensor:
    from iclr25.core.lm import sequence_logprobs
    from iclr25.core.progress import progress

    device = next(_unwrap(model).parameters()).device
    order = torch.argsort(enc.attention_mask.sum(-1), descending=True)  # length buckets: less padding
    out = torch.empty(len(enc), dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        starts = range(0, len(enc), batch_size)
        for s in progress(starts, desc=progress_desc or "score", unit="batch", total=len(starts),
                          quiet=True if progress_desc is None else None):
            idx = order[s:s + batch_size]
            b = enc.select(idx).to(device)
            lp = sequence_logprobs(model, b.input_ids, b.attention_mask, b.response_mask, average=average)
            out[idx] = lp.double().cpu()
    finally:
        model.train(was_training)
    return out


def dpo_reward(policy: Any, reference: Any | None, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               response_mask: torch.Tensor, *, average: bool = False, beta: float = 1.0) -> torch.Tensor:
    """The DPO implicit reward of a batch, ``beta [log pi(y|x) - log ref(y|x)]``.

    Args:
        policy: the current model ``pi_t`` (any HF ``*ForCausalLM``).
        reference: the reference model, or ``None`` for ``log pi(y|x)`` alone (the M0 reward).
        input_ids, attention_mask, response_mask: ``(B, T)`` as in
            :func:`iclr25.core.lm.sequence_logprobs` (prompt and padding positions are 0 in
            ``response_mask`` and never contribute).
        average: length-normalise both log-probabilities (``average=True`` with ``reference=None``
            is the length-normalised M0 reward of round 1).
        beta: positive scale (irrelevant for ranking; default 1 = the plain log-ratio).

    Returns:
        ``(B,)`` float (nats), no grad.

    Raises:
        ValueError: ``beta <= 0`` or shape mismatches.
    """
    from iclr25.core.lm import sequence_logprobs

    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    with torch.inference_mode():
        r = sequence_logprobs(policy, input_ids, attention_mask, response_mask, average=average)
        if reference is not None:
            r = r - sequence_logprobs(reference, input_ids, attention_mask, response_mask, average=average)
    return beta * r


def _embedding_rows(model: Any) -> int | None:
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    rows = getattr(emb, "num_embeddings", None)
    return rows if isinstance(rows, int) else None


def check_vocab(model: Any, tokenizer: Any, name: str = "model") -> None:
    """Fail early when ``tokenizer`` has more tokens than ``model``'s embedding has rows (a model paired
    with another model's tokenizer: an IndexError deep in the forward pass otherwise).

    Raises:
        ValueError: naming the model, both sizes and the fix.
    """
    rows = _embedding_rows(model)
    n = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    if rows is not None and n is not None and n > rows:
        raise ValueError(f"{name}: the tokenizer has {n} tokens but the model's embedding has {rows} rows (another "
                         "model's vocabulary); score every model with the tokenizer it was trained with")


def score_responses(model: Any, tokenizer: Any, prompts: Sequence[str], responses: Sequence[str], *,
                    average: bool = False, batch_size: int = 64, chat_template: bool = False,
                    append_eos: bool = True, max_length: int | None = None, dedupe: bool = True,
                    desc: str | None = None) -> torch.Tensor:
    """``log pi(y|x)`` (summed, or averaged per response token) for many pairs, batched.

    Identical ``(prompt, response)`` pairs are scored once (``dedupe``), so duplicates get exactly
    equal scores and ties are real ties. Sequences are batched by length.

    Args:
        model: a causal LM (eval mode is set during scoring and restored after).
        tokenizer: its tokenizer.
        prompts, responses: ``B`` strings each.
        average: length-normalise (mean over response tokens).
        batch_size: sequences per forward pass.
        chat_template, append_eos, max_length: as :func:`encode_responses`.
        dedupe: score each distinct pair once.
        desc: progress-bar label (``None``: no bar).

    Returns:
        ``(B,)`` float64 (nats), on CPU.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if dedupe:
        index: dict[tuple[str, str], int] = {}
        inverse = [index.setdefault((p, r), len(index)) for p, r in zip(prompts, responses)]
        uniq = list(index)
        up, ur = [u[0] for u in uniq], [u[1] for u in uniq]
    else:
        up, ur, inverse = list(prompts), list(responses), list(range(len(prompts)))
    enc = encode_responses(tokenizer, up, ur, append_eos=append_eos, chat_template=chat_template,
                           max_length=fit_max_length(model, max_length))
    rows = _embedding_rows(model)
    if rows is not None and enc.input_ids.numel() and int(enc.input_ids.max()) >= rows:
        raise ValueError(f"token id {int(enc.input_ids.max())} is outside the model's embedding of {rows} rows: the "
                         "tokenizer is not this model's (a reward/reference model with another vocabulary); use one "
                         "tokenizer shared by all models")
    scores = _batched_logps(model, enc, batch_size, average, desc)
    return scores[torch.tensor(inverse, dtype=torch.long)] if len(inverse) else scores


def reward_vectors(scores: torch.Tensor, ids: Sequence[str], n: Sequence[int]) -> dict[str, list[float]]:
    """Split a flat ``(sum n,)`` score vector into ``{id: [n_i scores]}`` (response order kept)."""
    out, k = {}, 0
    flat = scores.tolist()
    for pid, m in zip(ids, n):
        out[pid] = flat[k:k + m]
        k += m
    if k != len(flat):
        raise ValueError(f"{len(flat)} scores for {k} responses")
    return out
