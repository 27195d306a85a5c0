"""Log-probabilities of response tokens under a causal LM."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

__all__ = ["token_logprobs", "sequence_logprobs"]


def _check(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> None:
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, seq), got shape {tuple(input_ids.shape)}")
    for name, t in (("attention_mask", attention_mask), ("response_mask", response_mask)):
        if t.shape != input_ids.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != input_ids shape {tuple(input_ids.shape)}")


def _position_kwargs(model: torch.nn.Module, attention_mask: torch.Tensor) -> dict:
    """``position_ids`` counted over attended tokens, so left padding does not shift positions
    (models with absolute positions, e.g. GPT-2, do not derive them from the mask)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return {}
    takes = "position_ids" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    if not takes:
        return {}
    return {"position_ids": (attention_mask.long().cumsum(-1) - 1).clamp(min=0)}


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token log-probabilities ``log p(x_t | x_<t)`` of the response tokens.

    Args:
        model: a causal LM whose forward takes ``input_ids, attention_mask`` and returns an
            object with ``.logits`` of shape ``(batch, seq, vocab)`` (any HF ``*ForCausalLM``).
        input_ids: ``(batch, seq)`` long — prompt followed by response (right or left padding;
            ``position_ids`` are derived from ``attention_mask`` so both give the same values).
        attention_mask: ``(batch, seq)`` 0/1 — 1 on real tokens.
        response_mask: ``(batch, seq)`` 0/1 — 1 on the response tokens whose log-probability is
            wanted (they must be attended). Position 0 can never be scored (it has no prefix).
        logits: precomputed ``(batch, seq, vocab)`` logits (skips the forward pass).

    Returns:
        ``(batch, seq)`` float — ``log p(input_ids[:, t] | input_ids[:, :t])`` where
        ``response_mask[:, t] == 1``, and 0 elsewhere (position 0 is always 0).

    Raises:
        ValueError: on shape mismatches, or a response token at position 0.
    """
    _check(input_ids, attention_mask, response_mask)
    if bool(response_mask[:, 0].any()):
        raise ValueError("response_mask marks position 0, which has no prefix to condition on")
    if logits is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       **_position_kwargs(model, attention_mask)).logits
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    tgt = input_ids[:, 1:].unsqueeze(-1)
    lp = logp.gather(-1, tgt).squeeze(-1)
    mask = (response_mask[:, 1:] * attention_mask[:, 1:]).to(lp.dtype)
    out = torch.zeros(input_ids.shape, dtype=lp.dtype, device=lp.device)
    out[:, 1:] = lp * mask
    return out


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    average: bool = False,
    logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Summed (or, with ``average=True``, mean) log-probability of each sequence's response.

    Args: as :func:`token_logprobs`.

    Returns:
        ``(batch,)`` float — ``sum_t log p(y_t | x, y_<t)`` over response tokens (the quantity
        ``log pi(y|x)`` of DPO, Rafailov et al. 2023, Eq. 7).
    """
    tok = token_logprobs(model, input_ids, attention_mask, response_mask, logits=logits)
    total = tok.sum(-1)
    if average:
        n = (response_mask[:, 1:] * attention_mask[:, 1:]).sum(-1).clamp(min=1)
        return total / n
    return total
