"""uv and a clean environment for the cross-package tests that build wheels and fresh venvs
(tests/test_wheels.py, tests/test_readme_install.py, tests/test_workspace.py)."""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["uv_command", "clean_env"]


def uv_command() -> list[str]:
    """The uv command: ``$UV``, ``uv`` on PATH, else ``python -m uv``; skips the test when there is none."""
    exe = os.environ.get("UV") or shutil.which("uv")
    if exe:
        return [exe]
    try:
        import uv  # noqa: F401
    except ImportError:
        import pytest

        pytest.skip("uv is not installed")
    return [sys.executable, "-m", "uv"]


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without the workspace's venv and path settings, one thread, offline hubs, Agg plots."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT", "PYTHONHOME")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    env.update(extra)
    return env
