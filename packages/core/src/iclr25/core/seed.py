"""Seeding and device choice."""

from __future__ import annotations

import os
import random
import sys

import numpy as np

__all__ = ["seed_everything", "choose_device"]


def seed_everything(seed: int, *, deterministic: bool = False) -> np.random.Generator:
    """Seed ``random``, ``numpy`` and, when it is installed, ``torch`` (CPU and CUDA).

    Torch is seeded only if it is importable; it is never imported when it is absent.

    Args:
        seed: a non-negative integer.
        deterministic: also ask torch for deterministic algorithms (slower; CUDA needs
            ``CUBLAS_WORKSPACE_CONFIG``, which is set here when missing).

    Returns:
        A fresh ``numpy.random.Generator`` seeded with ``seed`` for callers that prefer one.

    Raises:
        ValueError: if ``seed`` is negative.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    random.seed(seed)
    np.random.seed(seed % (2**32))
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811
        except ImportError:
            torch = None
    if torch is not None:
        torch.manual_seed(seed)
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
    return np.random.default_rng(seed)


def choose_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when torch sees a GPU, else ``"mps"`` when available, else ``"cpu"``;
    any other value is returned unchanged (e.g. ``"cuda:1"``)."""
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"
