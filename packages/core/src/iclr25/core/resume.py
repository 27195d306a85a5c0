"""The ``--resume`` settings guard: what a resumed run would change, and the refusal that names it.

Part of the core conventions (:mod:`iclr25.core.config` re-exports both functions)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["changed_settings", "guard_resume_settings"]

log = logging.getLogger("iclr25.core")


def changed_settings(saved: Mapping[str, Any], current: Mapping[str, Any], *, ignore: Sequence[str] = ()) -> str:
    """What a ``--resume`` would change: ``"key: old -> new, ..."`` over the keys of ``current``
    (not in ``ignore``) whose value differs from ``saved`` (a key missing from ``saved`` counts as
    changed, its old value ``None``); ``""`` when nothing differs.

    A resumed run must be the run that was stopped: commands compare the settings stored with a
    checkpoint against the new ones and refuse with this text (e.g. ``ValueError(f"--resume: ...
    ({changed_settings(old, new)})")``) instead of letting a saved optimiser or schedule silently
    override a new value.
    """
    skip = set(ignore)
    return ", ".join(f"{k}: {saved.get(k)} -> {v}" for k, v in current.items()
                     if k not in skip and saved.get(k) != v)


def _setting_changes(old: Any, new: Any, name: str = "") -> list[tuple[str, str, str]]:
    """``(dotted name, old, new)`` of every leaf that differs; nested objects (a runner job's settings) are
    walked, so a change is named where it is, and a whole object present on one side only is written ``{...}``."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: list[tuple[str, str, str]] = []
        for k in sorted(set(old) | set(new), key=str):
            sub = f"{name}.{k}" if name else str(k)
            if k not in old or k not in new:
                a, b = old.get(k), new.get(k)
                out.append((sub, "{...}" if isinstance(a, Mapping) else repr(a),
                            "{...}" if isinstance(b, Mapping) else repr(b)))
            elif old[k] != new[k]:
                out.extend(_setting_changes(old[k], new[k], sub))
        return out
    return [] if old == new else [(name, repr(old), repr(new))]


def guard_resume_settings(out: str | Path, settings: Mapping[str, Any], *, resume: bool, ignore: Sequence[str] = (),
                          write: bool = True, filename: str = "run_settings.json",
                          missing: str = "the settings of the run being resumed cannot be checked") -> None:
    """Record a fresh run's settings in ``OUT/<filename>``; on ``--resume``, refuse any changed setting.

    A checkpoint usually stores the optimiser and the weights, not what built the data or the loss, so
    ``--resume`` with a new ``--lr``, ``--beta`` or data file would silently mix two runs (or ignore
    the new value while ``config.json`` records it). Commands call this before loading a model.

    Args:
        out: the run folder.
        settings: JSON-ready ``{name: value}`` of everything that defines the run.
        resume: whether this is a ``--resume``.
        ignore: names that may change on resume (e.g. ``epochs``, which may grow).
        write: on a fresh run, write the file (``False`` on non-zero ranks of a distributed run).
        filename: the settings file inside ``out``.
        missing: what the warning says when a resumed run has no settings file (an older version).

    Raises:
        ValueError: ``--resume`` with changed settings, naming each ``name: old -> new`` (a name present
            on one side only counts, its other value ``None``), or a damaged settings file.
    """
    out = Path(out)
    f = out / filename
    skip = set(ignore)
    now = {k: v for k, v in settings.items() if k not in skip}
    if not resume:
        if write:
            out.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(dict(settings), indent=2) + "\n", encoding="utf-8")
        return
    if not f.is_file():
        log.warning("--resume: %s is missing (a run from an older version or none at all): %s", f, missing)
        return
    try:
        saved = json.loads(f.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise TypeError(f"expected a JSON object, got {type(saved).__name__}")
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"--resume: {f} is damaged ({e}); run without --resume (it starts over in the same "
                         "--out) or start a new --out") from None
    saved = {k: v for k, v in saved.items() if k not in skip}
    diff = _setting_changes(saved, now)
    if diff:
        changes = ", ".join(f"{k}: {old} -> {new}" for k, old, new in diff)
        raise ValueError(f"--resume: {out} was started with other settings ({changes}); resume with the same flags "
                         "and --config, or start a new --out")
