"""Hyper-parameters of the offline pair (:class:`PairConfig`) and the torch import guard of the ``[offline]`` extra."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ['PairConfig']

log = logging.getLogger("iclr25.tie")


def _need_torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("the offline pair needs torch: pip install 'iclr25-tie[offline]'") from e
    return torch


@dataclass
class PairConfig:
    """Hyper-parameters of the offline pair (CPU scale; [design], issue #30).

    Attributes:
        dim: joint embedding width.
        widths: channels of the four conv blocks (≈0.3 M parameters with the defaults).
        epochs, batch_size, lr, weight_decay: AdamW training schedule (cosine decay, no warm-up).
        rho: P(frame colour = the superclass's colour) in training (animals green, vehicles blue).
        frame: frame width in pixels.
        caption_mix: probabilities of the caption templates (class, class + colour, colour).
        init_temperature: initial softmax temperature of InfoNCE (learnable; CLIP: 0.07).
        seed: seeds weights, colour draws, caption draws and batch order (each epoch from ``(seed, epoch)``).
    """

    dim: int = 64
    widths: tuple[int, int, int, int] = (32, 64, 128, 192)
    epochs: int = 6
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4
    rho: float = 0.95
    frame: int = 3
    caption_mix: dict[str, float] = field(default_factory=lambda: {"class": 0.5, "class_colour": 0.3, "colour": 0.2})
    init_temperature: float = 0.07
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "rho", "init_temperature"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {self.rho}")
        if self.lr <= 0 or self.weight_decay < 0 or self.init_temperature <= 0:
            raise ValueError("lr and init_temperature must be > 0 and weight_decay >= 0")
        if self.dim < 2 or self.epochs < 1 or self.batch_size < 2 or not 1 <= self.frame <= 15:
            raise ValueError("dim >= 2, epochs >= 1, batch_size >= 2 and 1 <= frame <= 15 are required")
        if len(self.widths) != 4 or min(self.widths) < 1:
            raise ValueError(f"widths: four positive channel counts, got {self.widths}")
        self.widths = tuple(int(w) for w in self.widths)
        keys = {"class", "class_colour", "colour"}
        if set(self.caption_mix) != keys:
            raise ValueError(f"caption_mix must have exactly the keys {sorted(keys)}, got {sorted(self.caption_mix)}")
        p = np.array([self.caption_mix[k] for k in ("class", "class_colour", "colour")], dtype=float)
        if not np.all(np.isfinite(p)) or (p < 0).any() or not abs(p.sum() - 1) < 1e-6:
            raise ValueError(f"caption_mix probabilities must be finite, >= 0 and sum to 1, got {self.caption_mix}")
