"""Answer extractors for majority vote and accuracy (the paper does not publish its own; README deviation 3).

``answer_extractor(spec)`` turns a name or a regular expression into ``callable(text) -> str | None``:

- ``"last-number"``: the last number in the text (``-1,234.50`` -> ``"-1234.5"``).
- ``"gsm8k"``: the number after the last ``####`` (GSM8K's answer marker); when the response has no marker,
  the last number (what common GSM8K harnesses do).
- any other string: a regular expression; the answer is group 1 of the last match (the whole match when
  the pattern has no group).

Numbers are canonicalised (commas dropped, ``3.50`` -> ``3.5``, ``4.0`` -> ``4``) so that equal numbers vote
together; a regex answer is stripped of surrounding whitespace only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["answer_extractor", "canonical_number", "EXTRACTORS"]

_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")

EXTRACTORS = ("last-number", "gsm8k")


def canonical_number(text: str) -> str | None:
    """``"1,234.50"`` -> ``"1234.5"``; ``None`` if ``text`` is not a number."""
    t = text.replace(",", "").strip()
    try:
        v = float(t)
    except ValueError:
        return None
    if v != v or v in (float("inf"), float("-inf")):
        return None
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _last_number(text: str) -> str | None:
    found = _NUM.findall(text)
    return canonical_number(found[-1]) if found else None


def _gsm8k(text: str) -> str | None:
    if "####" in text:
        tail = text.rsplit("####", 1)[1]
        m = _NUM.search(tail)
        return canonical_number(m.group(0)) if m else None
    return _last_number(text)


def answer_extractor(spec: str | Callable[[str], str | None] | None) -> Callable[[str], str | None]:
    """A callable ``text -> answer | None`` from a name (``last-number``, ``gsm8k``), a regex, or a callable.

    Raises:
        ValueError: ``spec`` is ``None``/empty, or an invalid regular expression.
    """
    if spec is None or spec == "":
        raise ValueError("an answer extractor is required: 'last-number', 'gsm8k' or a regular expression")
    if callable(spec):
        return spec
    if spec == "last-number":
        return _last_number
    if spec == "gsm8k":
        return _gsm8k
    try:
        pat = re.compile(spec)
    except re.error as e:
        raise ValueError(f"answer extractor {spec!r} is neither 'last-number', 'gsm8k' nor a valid regular "
                         f"expression ({e})") from None

    def _regex(text: str) -> str | None:
        ms = list(pat.finditer(text))
        if not ms:
            return None
        m = ms[-1]
        return (m.group(1) if pat.groups else m.group(0)).strip()

    _regex.__name__ = f"regex({spec})"
    return _regex
