"""iclr25-tie: TIE — test-time translation of image embeddings against spurious features in
zero-shot vision-language models (Lu, Chai & Wang, ICLR 2025).

The method core (:mod:`.tie`) is numpy only: ``spurious_vectors``, ``infer_spurious_labels`` (TIE*),
``estimate_scales``, ``translate``, ``zero_shot_predict``, the ``TIE`` class, the projection baseline
``project_out`` and ``group_metrics``. :mod:`.synthetic` holds the paper-model (``make_synthetic``,
``oracle_translation``), :mod:`.embeddings` the ``EmbeddingSet`` npz format, prompt mappings and
metadata readers. The offline CLIP-style pair (:mod:`.offline_pair`, extra ``[offline]``) and the
open_clip / Hugging Face CLIP encoders (:mod:`.encoders`, extra ``[clip]``) import torch lazily.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_LAZY = {
    "ZeroVectorWarning": "tie",
    "check_embeddings": "tie",
    "normalize_rows": "tie",
    "spurious_vectors": "tie",
    "infer_spurious_labels": "tie",
    "estimate_scales": "tie",
    "translate": "tie",
    "zero_shot_scores": "tie",
    "zero_shot_predict": "tie",
    "projection_directions": "tie",
    "project_out": "tie",
    "group_metrics": "tie",
    "TIE": "tie",
    "SyntheticData": "synthetic",
    "make_synthetic": "synthetic",
    "oracle_translation": "synthetic",
    "EmbeddingSet": "embeddings",
    "PromptSet": "embeddings",
    "load_prompts": "embeddings",
    "evaluate_methods": "evaluate",
    "PairConfig": "offline_pair",
    "OfflinePair": "offline_pair",
    "MiniLMTextEncoder": "offline_pair",
    "render_frames": "offline_pair",
    "train_offline_pair": "offline_pair",
    "load_offline_pair": "offline_pair",
    "load_open_clip": "encoders",
    "load_hf_clip": "encoders",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
