"""CPU thread limits for torch and the BLAS libraries, in one place.

``set_threads(n)`` is what ``--threads N`` does in every iclr25 command: it sets the usual
environment variables (read by libraries that are not loaded yet, torch included), calls
``torch.set_num_threads`` when torch is already imported, and limits already-loaded BLAS/OpenMP
pools through ``threadpoolctl`` when it is installed. torch is never imported here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["set_threads", "limited_threads", "THREAD_ENV_VARS"]

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

_pool_limit: object | None = None  # keeps a threadpoolctl limit alive


def set_threads(n: int | None) -> None:
    """Limit CPU threads to ``n`` for the rest of the process (``None``: leave as is).

    Raises:
        ValueError: ``n < 1``.
    """
    global _pool_limit
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be an integer >= 1, got {n!r}")
    for var in THREAD_ENV_VARS:
        os.environ[var] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    _pool_limit = threadpool_limits(limits=n)


@contextlib.contextmanager
def limited_threads(n: int | None) -> Iterator[None]:
    """Context manager: ``set_threads(n)`` inside, then restore the environment and torch's
    thread count (when torch was imported by then)."""
    if n is None:
        yield
        return
    saved_env = {v: os.environ.get(v) for v in THREAD_ENV_VARS}
    torch = sys.modules.get("torch")
    saved_torch = torch.get_num_threads() if torch is not None else None
    ctx = None
    try:
        from threadpoolctl import threadpool_limits

        ctx = threadpool_limits(limits=n)
    except ImportError:
        pass
    try:
        for var in THREAD_ENV_VARS:
            os.environ[var] = str(n)
        torch = sys.modules.get("torch")
        if torch is not None:
            if saved_torch is None:
                saved_torch = torch.get_num_threads()
            torch.set_num_threads(n)
        yield
    finally:
        for var, val in saved_env.items():
            if val is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = val
        torch = sys.modules.get("torch")
        if torch is not None and saved_torch is not None:
            torch.set_num_threads(saved_torch)
        if ctx is not None:
            ctx.restore_original_limits()
