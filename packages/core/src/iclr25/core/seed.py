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
    any other value is checked and returned unchanged (e.g. ``"cuda:1"``).

    Raises:
        ValueError: ``device`` is not a torch device string (``"gpu"``), or names a device torch
            cannot use here (``"cuda"`` without a CUDA GPU, ``"cuda:3"`` with two GPUs, ``"mps"``
            off Apple silicon) -- before any work starts, instead of a traceback deep in a run.
    """
    try:
        import torch
    except ImportError:
        if device in ("auto", "cpu"):
            return "cpu"
        raise ValueError(f"device={device!r} needs torch, which is not installed; use 'cpu'") from None
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r} is not a device: use auto, cpu, cuda, cuda:N or mps ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} but torch sees no CUDA GPU here (torch.cuda.is_available() is "
                             "False); use --device cpu or --device auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device={device!r} but torch sees {torch.cuda.device_count()} CUDA GPU(s) "
                             f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")
    elif dev.type == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise ValueError(f"device={device!r} but MPS is not available here; use --device cpu or --device auto")
    return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"
