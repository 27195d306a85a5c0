"""The training loss of one collated preference batch for each method (Q-Adapter, DPO, SFT): what the policy
module's ``forward`` returns (so a DDP wrapper sees it), shared by the model and the trainer."""

from __future__ import annotations

from typing import Any

import torch

from iclr25.core.lm import dpo_loss

from .losses import action_mask

__all__ = ["preference_step_loss"]


def preference_step_loss(policy: Any, batch: dict[str, torch.Tensor], method: str,
                         dpo_beta: float = 0.1) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one collated batch (first half chosen) for ``method``.

    Returns: ``(scalar loss, stats)``.
    """
    ids, attn, resp = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
    if method == "q-adapter":
        if getattr(policy, "kind", None) != "q-adapter":
            raise TypeError("method 'q-adapter' needs a QAdapterModel")
        return policy.loss(ids, attn, resp)
    mask = action_mask(resp, attn, "shifted")
    acts = ids[:, 1:].unsqueeze(-1)
    b = ids.shape[0] // 2
    if method == "sft":
        lp = policy.log_probs(ids[:b], attn[:b])[:, :-1].gather(-1, acts[:b]).squeeze(-1)
        loss = -(lp * mask[:b]).sum() / mask[:b].sum().clamp(min=1)
        return loss, {"nll": float(loss.detach())}
    if method == "dpo":
        lp = (policy.log_probs(ids, attn)[:, :-1].gather(-1, acts).squeeze(-1) * mask).sum(-1)
        lb = (policy.base_log_probs(ids, attn)[:, :-1].gather(-1, acts).squeeze(-1) * mask).sum(-1)
        loss, rw, rl = dpo_loss(lp[:b], lp[b:], lb[:b], lb[b:], beta=dpo_beta)
        return loss, {"pref_loss": float(loss.detach()), "accuracy": float((rw > rl).float().mean()),
                      "margin": float((rw - rl).mean())}
    raise ValueError(f"unknown method {method!r}")
