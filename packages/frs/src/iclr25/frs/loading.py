"""Load a saved classifier by name or path: the one place that knows every model kind.

It sits above :mod:`iclr25.frs.models` (the tiny encoder) and :mod:`iclr25.frs.hf` (Hugging Face and
MiniLM wrappers, which build on ``models``), so neither of those imports the other back.
"""

from __future__ import annotations

import json
from pathlib import Path

from .hf import HFClassifier, MiniLMClassifier
from .models import TinyClassifier, TorchTextClassifier

__all__ = ["load_classifier"]


def load_classifier(name_or_path: str, *, device: str = "cpu", **hf_kwargs) -> TorchTextClassifier:
    """Load a saved classifier: a tiny-encoder folder, a Hugging Face sequence-classification
    folder or hub id (offline unless allowed; extra ``[hf]``), or ``"minilm"`` (extra ``[minilm]``).

    Raises:
        FileNotFoundError: a missing path, or an HF id not available offline.
    """
    p = Path(name_or_path)
    if (p / "config.json").is_file():
        cfg = json.loads((p / "config.json").read_text())
        if cfg.get("kind") == "tiny-encoder":
            return TinyClassifier.load(p, device)
        if cfg.get("kind") == "minilm-head":
            return MiniLMClassifier.load(p, device=device)
    return HFClassifier.from_pretrained(name_or_path, device=device, **hf_kwargs)
