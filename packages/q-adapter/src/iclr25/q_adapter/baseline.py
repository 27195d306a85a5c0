"""The DPO and SFT baselines' policy: a plain LoRA policy ``pi_theta`` on the same base (``pi_1`` = adapter off)."""

from __future__ import annotations

from typing import Any

import torch

from .config import QAdapterConfig
from .losses import action_mask
from .model import _PeftPolicy

__all__ = ["LoRAPolicy"]


class LoRAPolicy(_PeftPolicy):
    """A LoRA policy ``pi_theta`` on the same base (DPO and SFT baselines); ``pi_1`` = adapter off."""

    kind = "lora"
    # saved with the adapter: an SFT adapter is scored by log pi after loading, not by DPO's log pi - log pi_1
    _SAVED_ATTRS = ("score",)

    def __init__(self, base_model: Any, cfg: QAdapterConfig | None = None, *, peft_model: Any = None,
                 score: str = "dpo") -> None:
        super().__init__(base_model, cfg, peft_model=peft_model)
        self.score = score

    def scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """``log pi(y|x) - log pi_1(y|x)`` (``score="dpo"``) or ``log pi(y|x)`` (``"sft"``), ``[B]``."""
        mask = action_mask(response_mask, attention_mask, "shifted")
        acts = input_ids[:, 1:].unsqueeze(-1)
        lp = self.log_probs(input_ids, attention_mask)[:, :-1].gather(-1, acts).squeeze(-1)
        s = (lp * mask).sum(-1)
        if self.score == "dpo":
            lb = self.base_log_probs(input_ids, attention_mask)[:, :-1].gather(-1, acts).squeeze(-1)
            s = s - (lb * mask).sum(-1)
        return s
