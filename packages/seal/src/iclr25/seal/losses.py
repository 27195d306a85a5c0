"""Per-sample LM loss of SEAL (the released code's ``batch_GPTLMLoss`` with ``sequence_reduce="mean"``)."""

from __future__ import annotations

import torch

from iclr25.core.lm import token_logprobs

__all__ = ["per_sample_lm_loss", "token_mean_lm_loss"]


def _n_response(attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return (response_mask[:, 1:] * attention_mask[:, 1:]).sum(-1)


def per_sample_lm_loss(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       response_mask: torch.Tensor) -> torch.Tensor:
    """ℓ(θ; z_i): the mean negative log-likelihood of each sample's response tokens (spec §1.2, item 2 of §2).

    Built on :func:`iclr25.core.lm.token_logprobs`; prompt tokens never count.

    Args:
        model: a causal LM (any HF ``*ForCausalLM``, a peft model, or one wrapped by accelerate/DeepSpeed).
        input_ids: ``(B, T)`` long.
        attention_mask: ``(B, T)`` 0/1.
        response_mask: ``(B, T)`` 0/1 — 1 on the response tokens (and EOS) to score; never position 0.

    Returns:
        ``(B,)`` float32 — nats per response token, differentiable w.r.t. the model.

    Raises:
        ValueError: a row without response tokens (its mean is undefined), or shape mismatches.
    """
    n = _n_response(attention_mask, response_mask)
    if bool((n == 0).any()):
        rows = torch.nonzero(n == 0).flatten().tolist()
        raise ValueError(f"per_sample_lm_loss: row(s) {rows[:10]} have no response tokens; the mean loss is undefined")
    lp = token_logprobs(model, input_ids, attention_mask, response_mask)
    return -lp.sum(-1) / n.to(lp.dtype)


def token_mean_lm_loss(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed response-token NLL of a batch and its token count (the SFT loss is their ratio, as
    OpenRLHF's ``GPTLMLoss``: a token-weighted mean over the batch).

    Returns:
        ``(nll_sum, n_tokens)``: scalar float32 (differentiable) and scalar long.
    """
    n = _n_response(attention_mask, response_mask).sum()
    lp = token_logprobs(model, input_ids, attention_mask, response_mask)
    return -lp.sum(), n
