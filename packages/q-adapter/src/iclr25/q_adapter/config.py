"""Configuration of Q-Adapter (Li et al., ICLR 2025, arXiv 2407.03856).

:class:`QAdapterConfig` holds the method's hyper-parameters with the **paper's** form of the loss as
default (value of the *next* state, correctly shifted action mask, no length normalisation, no extra
regulariser). The official code (``LAMDA-RL/Q-Adapter``) differs in four places; each is a named
field, and :meth:`QAdapterConfig.official_code` turns all four on at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["QAdapterConfig"]

Normalize = Literal["padded", "tokens", "none"]
MaskAlignment = Literal["shifted", "code"]
ValueIndex = Literal["next", "same"]


@dataclass(frozen=True)
class QAdapterConfig:
    """Hyper-parameters of the Q-Adapter loss, policy and LoRA adapter.

    The customised policy is ``pi~(a|s) = softmax((Q(s,a) + alpha_0 log pi_1(a|s)) / alpha_tilde)``
    (paper Sec. 3, Eq. for the residual policy); ``Q`` is the base LM's logit vector with the LoRA
    adapter switched on and ``pi_1`` the same network with the adapter off.
    """

    alpha_tilde: float = 1.0
    """Temperature ``alpha~`` of the customised max-entropy policy (official default 1.0)."""
    alpha_0: float = 0.01
    """``alpha_0 = lambda * alpha_1``: weight of the base log-probs in the policy (official default 0.01)."""
    gamma: float = 1.0
    """Discount in the inverted residual Bellman equation ``r_2 = Q - gamma V(s')`` (1.0)."""
    reg_beta: float = 0.0
    """Weight of the official code's extra regulariser ``beta * mean_masked r_t^2`` (logged there as
    ``chi2_loss``; code default 0.1). The paper's loss has none, so the paper default is 0."""
    normalize: Normalize = "none"
    """Scaling of the summed rewards in the Bradley-Terry logit: ``"none"`` (paper), ``"padded"``
    (code: divided by the padded length of the batch), ``"tokens"`` (each sequence by its own number of
    response actions; invariant to padding)."""
    mask_alignment: MaskAlignment = "shifted"
    """Which actions are summed: ``"shifted"`` (correct: the action that *produces* each response
    token) or ``"code"`` (official: the mask at position t applied to the action at t+1, which drops the
    first response token and adds the token after the last one)."""
    value_index: ValueIndex = "next"
    """``"next"`` (paper: ``r_t = Q(s_t,a_t) - gamma V(s_{t+1})``, ``V(terminal) = 0``) or ``"same"``
    (code: ``r_t = Q(s_t,a_t) - gamma V(s_t)``)."""
    lora_r: int = 8
    """LoRA rank (official 8)."""
    lora_alpha: int = 16
    """LoRA scaling numerator (official 16)."""
    lora_dropout: float = 0.05
    """LoRA dropout (official 0.05)."""
    target_modules: tuple[str, ...] | None = None
    """Modules that get LoRA; ``None`` = peft's default for the architecture (q_proj/v_proj for Llama,
    c_attn for GPT-2)."""

    def __post_init__(self) -> None:
        for name in ("alpha_tilde", "alpha_0", "gamma", "reg_beta", "lora_dropout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"QAdapterConfig.{name} must be a finite number, got {v!r}")
        if self.alpha_tilde <= 0:
            raise ValueError(f"alpha_tilde must be > 0, got {self.alpha_tilde}")
        if self.alpha_0 < 0:
            raise ValueError(f"alpha_0 must be >= 0, got {self.alpha_0}")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.reg_beta < 0:
            raise ValueError(f"reg_beta must be >= 0, got {self.reg_beta}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout must be in [0, 1) (a dropout probability), got {self.lora_dropout}")
        checks = {"normalize": ("padded", "tokens", "none"), "mask_alignment": ("shifted", "code"),
                  "value_index": ("next", "same")}
        for name, allowed in checks.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.lora_r < 1:
            raise ValueError(f"lora_r must be >= 1, got {self.lora_r}")
        if self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha must be > 0, got {self.lora_alpha}")
        if self.target_modules is not None:
            object.__setattr__(self, "target_modules", tuple(self.target_modules))

    @classmethod
    def paper(cls, **overrides: Any) -> QAdapterConfig:
        """The loss as written in the paper (the defaults of this class)."""
        return cls(**overrides)

    @classmethod
    def official_code(cls, **overrides: Any) -> QAdapterConfig:
        """Parity with ``LAMDA-RL/Q-Adapter`` (``utils/q_adapter.py``): value at the same index,
        off-by-one mask, division by the padded length, regulariser 0.1."""
        kw: dict[str, Any] = dict(value_index="same", mask_alignment="code", normalize="padded", reg_beta=0.1)
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def variant(cls, name: str, **overrides: Any) -> QAdapterConfig:
        """``"paper"`` or ``"code"`` (see :meth:`paper`, :meth:`official_code`)."""
        if name == "paper":
            return cls.paper(**overrides)
        if name == "code":
            return cls.official_code(**overrides)
        raise ValueError(f"variant must be 'paper' or 'code', got {name!r}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["target_modules"] is not None:
            d["target_modules"] = list(d["target_modules"])
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> QAdapterConfig:
        """Read a config written by :meth:`save`; unknown keys raise ``ValueError``."""
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"{path}: unknown QAdapterConfig key(s) {unknown}")
        if d.get("target_modules") is not None:
            d["target_modules"] = tuple(d["target_modules"])
        return cls(**d)
