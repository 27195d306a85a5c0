"""Progress bars: the core's ``iclr25.core.progress`` when present, else tqdm on stderr."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["progress"]


def progress(iterable: Iterable[Any], desc: str = "", total: int | None = None, unit: str = "it",
             disable: bool = False) -> Iterable[Any]:
    if disable:
        return iterable
    try:
        from iclr25.core.progress import progress as core_progress  # type: ignore[import-not-found]

        return core_progress(iterable, desc=desc, total=total, unit=unit)
    except ImportError:
        import sys

        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False,
                    mininterval=1.0 if sys.stderr.isatty() else 60.0)
