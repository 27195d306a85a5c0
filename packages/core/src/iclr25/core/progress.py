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

__all__ = ["progress", "configure_logging", "progress_disabled", "setup_logging", "THIRD_PARTY_LOGGERS"]


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
    if not tty:
        kwargs.setdefault("file", _LineFile(sys.stderr))  # a log file: one line per draw, never shared
    if not tty and os.environ.get("ICLR25_PROGRESS", "auto") != "always":
        kwargs.setdefault("mininterval", 60.0)
        kwargs.setdefault("maxinterval", 600.0)
        kwargs.setdefault("ascii", True)
        cls = _quiet_postfix_class(tqdm)
    kwargs.setdefault("file", sys.stderr)
    return cls(iterable, desc=desc, total=total, unit=unit, leave=leave,
               disable=progress_disabled(quiet), dynamic_ncols=tty, **kwargs)


class _LineFile:
    """The stream a bar writes to when stderr is not a terminal: each draw becomes one whole line, and
    tqdm's in-place clearing (carriage returns, blank padding, cursor-up escapes of nested bars) is
    dropped, so a log line written between two draws never lands on a bar's line. Not ``sys.stderr``
    itself, so ``tqdm.write`` (the log handler) does not clear and redraw bars around each message."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, s: str) -> int:
        for part in s.replace("\x1b[A", "").replace("\n", "\r").split("\r"):
            if part.strip():
                self.stream.write(part.rstrip() + "\n")
        return len(s)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


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


#: Third-party loggers that log a line per request or file at INFO (httpx logs every POST of an
#: evaluation run): kept at WARNING whatever the root level, so a run's log says what the run did.
THIRD_PARTY_LOGGERS = ("httpx", "httpcore", "openai", "urllib3", "requests", "filelock", "fsspec", "asyncio",
                       "matplotlib", "PIL", "huggingface_hub", "datasets", "ray", "flwr", "grpc")


class _TqdmHandler(logging.StreamHandler):
    """A stderr handler that writes through ``tqdm.write``: a log line never lands on a progress
    bar's line (tqdm clears the bar, prints the line, redraws the bar)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def setup_logging(level: int) -> None:
    """Root logging at ``level`` on stderr through :class:`_TqdmHandler` (one handler, however often
    this is called), third-party loggers (:data:`THIRD_PARTY_LOGGERS`) at WARNING, and Hugging Face's
    own bars ("Loading weights", downloads) off when stderr is not a terminal or bars are off."""
    root = logging.getLogger()
    if not any(isinstance(h, _TqdmHandler) for h in root.handlers):
        for h in list(root.handlers):
            if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stderr, sys.__stderr__):
                root.removeHandler(h)
        h = _TqdmHandler()
        h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
    root.setLevel(level)
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
    if progress_disabled() or not tty:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by transformers' bars too
        if "transformers" in sys.modules:
            try:
                sys.modules["transformers"].utils.logging.disable_progress_bar()
            except AttributeError:  # pragma: no cover - an old transformers
                pass


def configure_logging(quiet: bool = False, *, debug: bool = False) -> None:
    """Root logging for a command: INFO (WARNING when quiet, DEBUG with ``debug``) on stderr
    (:func:`setup_logging`: third-party loggers at WARNING, log lines never on a bar's line)."""
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    if quiet:
        os.environ["ICLR25_QUIET"] = "1"
    setup_logging(level)
