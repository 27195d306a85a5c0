"""The offline pair's towers: the CNN image tower, the text head, and :class:`OfflinePair` (encode images / text)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from .minilm import MiniLMTextEncoder
from .pair_config import PairConfig, _need_torch

__all__ = ['OfflinePair', 'n_parameters']

log = logging.getLogger("iclr25.tie")


def _build_modules(cfg: PairConfig, text_dim: int = 384):
    torch = _need_torch()
    nn = torch.nn

    def block(i, o, stride=1):
        return nn.Sequential(nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(o),
                             nn.ReLU(inplace=True))

    w = cfg.widths
    # 32x32 -> stride-2 conv (16x16) -> conv (16x16) -> pool -> conv (8x8) -> pool -> conv (4x4) -> GAP
    image = nn.Sequential(block(3, w[0], 2), block(w[0], w[1]), nn.MaxPool2d(2),
                          block(w[1], w[2]), nn.MaxPool2d(2), block(w[2], w[3]),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w[3], cfg.dim))
    text_head = nn.Linear(text_dim, cfg.dim)
    logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / cfg.init_temperature)))
    return image, text_head, logit_scale


_MEAN = np.array([0.4911, 0.4808, 0.4442], dtype=np.float32)
_STD = np.array([0.247, 0.243, 0.261], dtype=np.float32)


def _to_tensor(images: np.ndarray):
    torch = _need_torch()
    x = (images.astype(np.float32) / 255.0 - _MEAN) / _STD
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


class OfflinePair:
    """A trained offline pair: ``encode_images`` and ``encode_text`` in the joint space.

    Created by :func:`train_offline_pair` or :func:`load_offline_pair`.
    """

    def __init__(self, cfg: PairConfig, image, text_head, logit_scale, text_encoder: MiniLMTextEncoder | None = None,
                 device: str = "cpu") -> None:
        self.cfg, self.image, self.text_head, self.logit_scale = cfg, image, text_head, logit_scale
        self._text = text_encoder
        self.device = device

    @property
    def text_encoder(self) -> MiniLMTextEncoder:
        if self._text is None:
            self._text = MiniLMTextEncoder()
        return self._text

    def encode_images(self, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """``[N, 32, 32, 3]`` uint8 → ``[N, dim]`` float32 (not normalised)."""
        torch = _need_torch()
        x = np.asarray(images)
        if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8:
            raise ValueError(f"images: expected uint8 [N, H, W, 3], got {x.dtype} {x.shape}")
        self.image.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, x.shape[0], batch_size):
                out.append(self.image(_to_tensor(x[i:i + batch_size]).to(self.device)).float().cpu().numpy())
        return np.concatenate(out)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Prompts → ``[n, dim]`` float32 (frozen MiniLM, then the trained linear head)."""
        torch = _need_torch()
        e = torch.from_numpy(self.text_encoder.encode(texts)).to(self.device)
        with torch.inference_mode():
            return self.text_head(e).float().cpu().numpy()


def n_parameters(pair: OfflinePair) -> dict[str, int]:
    """Trainable parameter counts of the image tower and the text head."""
    return {"image": sum(p.numel() for p in pair.image.parameters()),
            "text_head": sum(p.numel() for p in pair.text_head.parameters())}
