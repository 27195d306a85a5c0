"""Answer extraction for evaluation (spec §1.6, own wording of the official rules).

- GSM8K: the first number after ``####``, ``answer:`` or ``answer is`` (case-insensitive), else the
  last number in the text; thousands separators removed (``1,234`` -> ``1234``), a trailing ``.0``
  dropped.
- Multiple choice: the letter after ``Answer:``, else the last standalone capital letter A-D (A-E
  with five choices, ...).
"""

from __future__ import annotations

import re

__all__ = ["extract_gsm8k_answer", "extract_choice_answer", "normalize_number", "GSM8K_INSTRUCTION",
           "CHOICE_INSTRUCTION"]

#: our wording of the evaluation instruction (step-by-step reasoning ending in "Answer:")
GSM8K_INSTRUCTION = ("Solve the problem. Reason step by step, then give the final number on its own line "
                     "as 'Answer: <number>'.")
CHOICE_INSTRUCTION = ("Choose the correct option. Reason step by step, then give the letter of your choice "
                      "on its own line as 'Answer: <letter>'.")

_NUM = r"-?\$?\s?\d[\d,]*(?:\.\d+)?"
_MARKERS = re.compile(r"(?:####|answer\s*:|answer\s+is)\s*(?:[:=]\s*)?(" + _NUM + ")", re.IGNORECASE)
_ANY_NUM = re.compile(_NUM)


def normalize_number(text: str) -> str:
    """``"$1,234.50"`` -> ``"1234.5"``; ``"18.0"`` -> ``"18"``; ``"-3"`` -> ``"-3"``."""
    t = text.replace(",", "").replace("$", "").replace(" ", "").strip()
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    if t in ("-0", ""):
        t = "0" if t == "-0" else t
    return t


def extract_gsm8k_answer(text: str) -> str | None:
    """The final numeric answer of a GSM8K-style solution.

    Args:
        text: a model completion or a reference ``answer`` field (``... #### 18``).

    Returns:
        The normalised number as a string (``"18"``), or ``None`` if the text holds no number.
    """
    m = _MARKERS.search(text)
    if m:
        return normalize_number(m.group(1))
    nums = _ANY_NUM.findall(text)
    return normalize_number(nums[-1]) if nums else None


def extract_choice_answer(text: str, n_choices: int = 4) -> str | None:
    """The chosen option letter of a multiple-choice completion.

    Args:
        text: the completion.
        n_choices: number of options (letters ``A`` .. the ``n_choices``-th letter).

    Returns:
        ``"A"``, ``"B"``, ... or ``None``.

    Raises:
        ValueError: ``n_choices`` outside ``2..26``.
    """
    if not 2 <= n_choices <= 26:
        raise ValueError(f"n_choices must be in 2..26, got {n_choices}")
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n_choices]
    m = re.search(r"(?i:answer)\s*(?:(?i:is)\s*)?[:：]?\s*\(?([" + letters + r"])\)?(?![A-Za-z])", text)
    if m:
        return m.group(1).upper()
    found = re.findall(r"(?<![A-Za-z])([" + letters + r"])(?![A-Za-z])", text)
    return found[-1] if found else None
