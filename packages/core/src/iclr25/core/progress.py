"""Progress bars and logging set-up shared by every iclr25 command.

:func:`progress` is ``tqdm`` on stderr with the project's rules: off when quiet (``--quiet`` sets
``ICLR25_QUIET=1``), and when stderr is not a terminal (a CI log, a file) at most one line per
minute instead of one per update, so logs stay small. ``ICLR25_PROGRESS=always|never`` overrides.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["progress", "configure_logging", "progress_disabled"]


def progress_disabled(quiet: bool | None = None) -> bool:
    """Whether bars are off: ``quiet`` when given, else ``ICLR25_QUIET``/``ICLR25_PROGRESS``."""
    mode = os.environ.get("ICLR25_PROGRESS", "auto")
    if mode == "never":
        return True
    if mode == "always":
        return False
    if quiet is not None:
        return quiet
    return os.environ.get("ICLR25_QUIET") == "1"


def progress(iterable: Iterable[Any] | None = None, *, desc: str | None = None, total: int | None = None,
             unit: str = "it", leave: bool = False, quiet: bool | None = None, **kwargs: Any):
    """A ``tqdm`` bar following the project's rules (see the module docstring).

    Args:
        iterable: what to iterate (or ``None`` and call ``update`` yourself).
        desc, total, unit, leave: as in ``tqdm``.
        quiet: force the bar off (``True``) or on (``False``); ``None`` reads the environment.
        **kwargs: more ``tqdm`` options (e.g. ``postfix``).
    """
    from tqdm.auto import tqdm

    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    cls = tqdm
    if not tty and os.environ.get("ICLR25_PROGRESS", "auto") != "always":
        kwargs.setdefault("mininterval", 60.0)
        kwargs.setdefault("maxinterval", 600.0)
        kwargs.setdefault("ascii", True)
        cls = _quiet_postfix_class(tqdm)
    return cls(iterable, desc=desc, total=total, unit=unit, leave=leave, file=sys.stderr,
                disable=progress_disabled(quiet), dynamic_ncols=tty, **kwargs)


_QUIET_POSTFIX: dict[type, type] = {}


def _quiet_postfix_class(base: type) -> type:
    """``base`` whose ``set_postfix``/``set_postfix_str`` do not force a redraw (tqdm's default
    ``refresh=True`` would print a line per call and defeat ``mininterval`` in a log file)."""
    if base not in _QUIET_POSTFIX:
        class _Bar(base):  # type: ignore[misc, valid-type]
            def set_postfix(self, ordered_dict=None, refresh=False, **kwargs):
                return super().set_postfix(ordered_dict, refresh=refresh, **kwargs)

            def set_postfix_str(self, s="", refresh=False):
                return super().set_postfix_str(s, refresh=refresh)

        _QUIET_POSTFIX[base] = _Bar
    return _QUIET_POSTFIX[base]


def configure_logging(quiet: bool = False, *, debug: bool = False) -> None:
    """Root logging for a command: INFO (WARNING when quiet, DEBUG with ``debug``) on stderr."""
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    if quiet:
        os.environ["ICLR25_QUIET"] = "1"
