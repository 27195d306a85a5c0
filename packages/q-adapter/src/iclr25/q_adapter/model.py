"""Q-Adapter on a PEFT LoRA adapter: adapter on = ``Q``, adapter off = ``pi_1`` (paper Sec. 4).

:class:`QAdapterModel` wraps any Hugging Face causal LM. The same network gives the residual
Q-function (LoRA switched on; the full logit vector is ``Q(s, .)``) and the frozen pre-trained policy
(LoRA switched off with ``peft``'s ``disable_adapter()``). The plain LoRA policy of the DPO and SFT baselines
is :class:`iclr25.q_adapter.baseline.LoRAPolicy`; decoding is in :mod:`~iclr25.q_adapter.decoding`, saving
and loading in :mod:`~iclr25.q_adapter.persistence`, the LoRA plumbing in :mod:`~iclr25.q_adapter.lora`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .config import QAdapterConfig
from .decoding import DecodingMixin, cache_kwarg, kv_decode
from .lora import check_causal_lm, forward_inputs, lora_config
from .losses import action_mask, implicit_scores, policy_logits, qadapter_loss, residual_rewards
from .persistence import QCONFIG_NAME, SaveLoadMixin
from .step_loss import preference_step_loss

__all__ = ["QAdapterModel", "check_causal_lm", "kv_decode", "cache_kwarg", "QCONFIG_NAME"]

log = logging.getLogger(__name__)


def _batch_key(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple:
    """A batch's identity for the base log-probs memo: shapes, dtypes and the bytes of ids and mask."""
    parts: list = [tuple(input_ids.shape), str(input_ids.dtype), input_ids.detach().cpu().numpy().tobytes()]
    if attention_mask is not None:
        parts += [str(attention_mask.dtype), attention_mask.detach().cpu().numpy().tobytes()]
    return tuple(parts)


class _PeftPolicy(DecodingMixin, SaveLoadMixin, torch.nn.Module):
    """Shared machinery: a PEFT LoRA model, forward with the adapter on/off, cached decoding, saving."""

    kind = "lora"
    _base_memo: dict | None = None

    def __init__(self, base_model: Any, cfg: QAdapterConfig | None = None, *, peft_model: Any = None) -> None:
        super().__init__()
        self.cfg = cfg or QAdapterConfig()
        if peft_model is None:
            check_causal_lm(base_model)
            from peft import get_peft_model

            for p in base_model.parameters():
                p.requires_grad_(False)
            peft_model = get_peft_model(base_model, lora_config(self.cfg, base_model))
        self.peft_model = peft_model

    # --- forwards -------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor, *,
                method: str = "q-adapter", dpo_beta: float = 0.1) -> tuple[torch.Tensor, dict[str, float]]:
        """The training loss of one collated batch (first half chosen, second half rejected), ``[2B, L]``
        each; returns ``(scalar loss, stats)`` (see :func:`iclr25.q_adapter.step_loss.preference_step_loss`).

        The loss is the module's forward so that a DDP wrapper (``accelerator.prepare``) sees it and
        all-reduces the LoRA gradients across processes.
        """
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask}
        return preference_step_loss(self, batch, method, dpo_beta)

    def adapter_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits with the adapter on, ``[B, L, V]`` float32 (``Q`` for Q-Adapter)."""
        return self.peft_model(**forward_inputs(input_ids, attention_mask)).logits.float()

    def base_log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi_1(. | x_{<=t})`` with the adapter off, no grad: ``[B, L, V]`` float32 (nats).

        Inside :meth:`reuse_base_log_probs` the result is looked up in (and stored into) its memo, keyed by
        the batch's token ids and attention mask: the base is frozen, so the same batch gives the same
        tensor (the same forward, bitwise) at every checkpoint evaluation."""
        memo = self._base_memo
        key = None
        if memo is not None:
            key = _batch_key(input_ids, attention_mask)
            hit = memo.get(key)
            if hit is not None:
                return hit
        with torch.no_grad(), self.peft_model.disable_adapter():
            z = self.peft_model(**forward_inputs(input_ids, attention_mask)).logits.float()
        out = F.log_softmax(z, dim=-1)
        if memo is not None:
            memo[key] = out
        return out

    @contextlib.contextmanager
    def reuse_base_log_probs(self, memo: dict) -> Iterator[dict]:
        """Within the block, :meth:`base_log_probs` of a batch already in ``memo`` is the stored tensor (no
        forward); new batches are added. For evaluations on fixed sets repeated along a training run (the base
        ``pi_1`` is frozen: its LoRA-off forward of the same batch never changes). Not for training batches
        (every batch would stay in memory). The memo may be shared by policies that wrap copies of the same
        base weights."""
        prev = self._base_memo
        self._base_memo = memo
        try:
            yield memo
        finally:
            self._base_memo = prev

    def log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-probs of the trained policy, ``[B, L, V]`` float32 (from a forward pass)."""
        return F.log_softmax(self.adapter_logits(input_ids, attention_mask), dim=-1)

    def scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """Implicit preference score of each sequence (higher = preferred), ``[B]``. Overridden."""
        raise NotImplementedError

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.peft_model.parameters() if p.requires_grad]



class QAdapterModel(_PeftPolicy):
    """The residual Q-function ``Q_theta`` (LoRA on) and the base policy ``pi_1`` (LoRA off).

    Args:
        base_model: a Hugging Face ``*ForCausalLM`` (frozen here; LoRA is injected in place by peft).
        cfg: :class:`QAdapterConfig` (alphas, loss variant, LoRA sizes).
        peft_model: an existing peft model (used by :meth:`from_pretrained`).

    Raises:
        ValueError: the base model has no causal-LM head.

    Example::

        qm = QAdapterModel(AutoModelForCausalLM.from_pretrained("gpt2"), QAdapterConfig())
        loss, stats = qm.loss(input_ids, attention_mask, response_mask)   # chosen rows first
        out = qm.generate(prompt_ids, max_new_tokens=32)                   # two KV caches
    """

    kind = "q-adapter"
    _policy_paths = ["adapter", "base"]

    def q_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``Q_theta(x_{<=t}, .)``: ``[B, L, V]`` float32 (the adapter-on logits)."""
        return self.adapter_logits(input_ids, attention_mask)

    def policy_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(Q + alpha_0 log pi_1) / alpha~``: ``[B, L, V]`` float32."""
        q = self.q_values(input_ids, attention_mask)
        return policy_logits(q, self.base_log_probs(input_ids, attention_mask), self.cfg.alpha_tilde, self.cfg.alpha_0)

    def log_probs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi~``: ``[B, L, V]`` float32 (forward passes, never processed generation scores)."""
        return F.log_softmax(self.policy_logits(input_ids, attention_mask), dim=-1)

    def token_rewards(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Residual rewards ``r_t`` of every response action and their mask, both ``[B, L-1]``.

        Two forwards: adapter on (with grad) and adapter off (no grad).
        """
        q = self.q_values(input_ids, attention_mask)
        base = self.base_log_probs(input_ids, attention_mask)
        mask = action_mask(response_mask, attention_mask, self.cfg.mask_alignment)
        r = residual_rewards(q, base, input_ids[:, 1:], mask, self.cfg)
        return r, mask

    def loss(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Q-Adapter loss of a batch whose first half are chosen and second half rejected sequences.

        Args:
            input_ids, attention_mask, response_mask: ``[2B, L]`` (right padding).
        Returns:
            ``(loss, stats)`` of :func:`~iclr25.q_adapter.losses.qadapter_loss`.
        """
        r, mask = self.token_rewards(input_ids, attention_mask, response_mask)
        return qadapter_loss(r, mask, self.cfg)

    def scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """``alpha~ log pi~(y|x) - alpha_0 log pi_1(y|x)`` per sequence, ``[B]`` (the learned reward up to
        the shared ``V(x)``)."""
        q = self.q_values(input_ids, attention_mask)
        base = self.base_log_probs(input_ids, attention_mask)
        lp = F.log_softmax(policy_logits(q, base, self.cfg.alpha_tilde, self.cfg.alpha_0), dim=-1)
        mask = action_mask(response_mask, attention_mask, "shifted")
        return implicit_scores(lp, base, input_ids[:, 1:], mask, self.cfg.alpha_tilde, self.cfg.alpha_0)

    def _combine(self, logits: dict[str, torch.Tensor], policy: str) -> torch.Tensor:
        if policy in ("base", "adapter"):
            return logits[policy]
        return policy_logits(logits["adapter"], F.log_softmax(logits["base"], dim=-1),
                             self.cfg.alpha_tilde, self.cfg.alpha_0)
