"""TEMPORARY shim until core ``iclr25.core.progress`` lands on main (then this file goes)."""

from __future__ import annotations


def progress_bar(iterable, *, desc="", total=None, unit="it", enabled=True):
    try:
        from iclr25.core.progress import progress
    except ImportError:
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, total=total, unit=unit, disable=not enabled, leave=False)
    if not enabled:
        return iterable
    return progress(iterable, desc=desc, total=total, unit=unit)
