"""Per-sample LM loss of SEAL (the released code's ``batch_GPTLMLoss`` with ``sequence_reduce="mean"``).

Two computations of the same quantity:

* the **reference path**: core :func:`iclr25.core.lm.token_logprobs` on the full ``(B, T, V)`` logits;
* the **response-head path** (default where it applies): the model body's last hidden states, the output
  head applied to the response positions only, and ``cross_entropy(reduction="none")`` there. Prompt and
  padding positions never enter the loss, so their logits are not needed; on the real-text variant
  (vocabulary 5,000, prompts longer than the answers) the vocabulary projection and its log-softmax were
  most of a step's time. It is used only for plain Hugging Face causal LMs whose logits are exactly
  ``head(body(x).last_hidden_state)`` (:data:`HEAD_ONLY_MODEL_TYPES`); peft, accelerate/DeepSpeed wrappers
  and any other model take the reference path.

Both give the same values up to float rounding (``tests/test_seal_fastpath.py`` checks losses, gradients
and the selection against the reference path). :func:`reference_path` forces the reference path (tests,
``benchmarks/bench_fast_path.py``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from iclr25.core.lm import token_logprobs

__all__ = ["per_sample_lm_loss", "token_mean_lm_loss", "reference_path", "fuse_gelu", "HEAD_ONLY_MODEL_TYPES",
           "HEAD_ONLY_MIN_VOCAB"]

HEAD_ONLY_MODEL_TYPES = ("gpt2", "llama", "mistral", "qwen2")
"""``config.model_type`` values whose ``*ForCausalLM`` logits are ``lm_head(last_hidden_state)`` with no
scaling or soft-capping (the response-head path is exact for them)."""

HEAD_ONLY_MIN_VOCAB = 1024
"""The response-head path is taken from this vocabulary size on; below it the output head is a small
share of a step and the gather costs more than it saves (synthetic task: vocabulary 102)."""

_REFERENCE = contextvars.ContextVar("seal_reference_path", default=False)


@contextlib.contextmanager
def reference_path() -> Iterator[None]:
    """Within the block, losses use the reference path (full logits through core ``token_logprobs``) and
    :func:`iclr25.seal.bilevel.train_selector` runs D_safe and D_ft in two forwards, as before the
    optimisation."""
    tok = _REFERENCE.set(True)
    try:
        yield
    finally:
        _REFERENCE.reset(tok)


def use_reference() -> bool:
    """Whether :func:`reference_path` is active."""
    return _REFERENCE.get()


def _n_response(attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return (response_mask[:, 1:] * attention_mask[:, 1:]).sum(-1)


def _body_and_head(model: Any) -> tuple[Any, Any] | None:
    if _REFERENCE.get():
        return None
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover - transformers is a dependency
        return None
    if not isinstance(model, PreTrainedModel):
        return None
    if getattr(model.config, "model_type", None) not in HEAD_ONLY_MODEL_TYPES:
        return None
    body = getattr(model, model.base_model_prefix, None)
    head = model.get_output_embeddings()
    if body is None or head is None or body is model:
        return None
    if int(getattr(head, "out_features", 0) or head.weight.shape[0]) < HEAD_ONLY_MIN_VOCAB:
        return None
    return body, head


def _response_token_nll(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(rows, nll)``: the batch row and the NLL (float32) of every scored response token, or None when
    the model does not qualify for the response-head path."""
    parts = _body_and_head(model)
    if parts is None:
        return None
    body, head = parts
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape or response_mask.shape != input_ids.shape:
        return None  # let the reference path raise its shape errors
    if bool(response_mask[:, 0].any()):
        return None
    pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos).last_hidden_state
    rows, cols = torch.nonzero(response_mask[:, 1:] * attention_mask[:, 1:], as_tuple=True)
    logits = head(hidden[rows, cols]).float()  # position t predicts token t + 1
    nll = F.cross_entropy(logits, input_ids[rows, cols + 1], reduction="none")
    return rows, nll


def fuse_gelu(model: Any) -> int:
    """Swap GPT-2's ``gelu_new`` modules (tanh-approximate GELU written as six elementwise ops) for
    torch's fused ``gelu(approximate="tanh")`` — the same function (max difference ~2e-7), one kernel
    forward and backward. The model's config is unchanged (``save_pretrained`` still writes
    ``gelu_new``, which computes the same function).

    Returns:
        The number of modules swapped (0 for models without ``gelu_new``).
    """
    from transformers.activations import ACT2FN, NewGELUActivation

    n = 0
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if type(child) is NewGELUActivation:
                setattr(mod, name, ACT2FN["gelu_pytorch_tanh"])
                n += 1
    return n


def per_sample_lm_loss(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       response_mask: torch.Tensor) -> torch.Tensor:
    """ℓ(θ; z_i): the mean negative log-likelihood of each sample's response tokens (spec §1.2, item 2 of §2).

    Reference path: :func:`iclr25.core.lm.token_logprobs`; plain HF causal LMs take the response-head path
    (module docstring), which gives the same values. Prompt tokens never count.

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
    fast = _response_token_nll(model, input_ids, attention_mask, response_mask)
    if fast is not None:
        rows, nll = fast
        total = torch.zeros(input_ids.shape[0], dtype=nll.dtype, device=nll.device).index_add(0, rows, nll)
        return total / n.to(nll.dtype)
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
    fast = _response_token_nll(model, input_ids, attention_mask, response_mask)
    if fast is not None:
        return fast[1].sum(), n
    lp = token_logprobs(model, input_ids, attention_mask, response_mask)
    return -lp.sum(), n
