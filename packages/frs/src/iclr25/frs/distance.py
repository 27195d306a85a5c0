"""Damerau–Levenshtein distance and trigger insertion (the threat model's text space, Sec. 3).

The paper measures how far a (possibly triggered) input x' is from a benign x by the
Damerau–Levenshtein distance d_DL over tokens: insertions, deletions, substitutions and
transpositions of adjacent tokens, each of cost 1. The certified radius (Eq. 1) is a number of
such edits. Both the *unrestricted* distance (Lowrance–Wagner: a transposed pair may be edited
again) and the *restricted* one (optimal string alignment, OSA: no substring edited twice) are
given; they differ e.g. on ``("ca", "abc")``: 2 vs 3.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

__all__ = ["damerau_levenshtein", "insert_trigger", "trigger_tokens"]


def _as_seq(x: str | Sequence[Hashable], name: str) -> Sequence[Hashable]:
    if isinstance(x, str):
        return x
    if not isinstance(x, Sequence):
        raise TypeError(f"{name} must be a str or a sequence of tokens, got {type(x).__name__}")
    return x


def damerau_levenshtein(a: str | Sequence[Hashable], b: str | Sequence[Hashable],
                        restricted: bool = False) -> int:
    """Damerau–Levenshtein distance between two sequences (characters of a ``str`` or tokens).

    Args:
        a, b: strings (compared character by character) or sequences of hashable tokens
            (e.g. ``"the cf movie".split()``).
        restricted: ``False`` (default) = the true DL distance (Lowrance & Wagner 1975; adjacent
            transpositions, substrings may be edited more than once); ``True`` = optimal string
            alignment (OSA), the "restricted" variant.

    Returns:
        The minimum number of insertions, deletions, substitutions and adjacent transpositions
        (each cost 1) turning ``a`` into ``b`` (``int`` >= 0).

    Complexity: O(|a|·|b|) time and memory.
    """
    a, b = _as_seq(a, "a"), _as_seq(b, "b")
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return n + m
    if restricted:
        d = np.zeros((n + 1, m + 1), dtype=np.int64)
        d[:, 0] = np.arange(n + 1)
        d[0, :] = np.arange(m + 1)
        for i in range(1, n + 1):
            for j in range(1, m + 1):
                cost = 0 if a[i - 1] == b[j - 1] else 1
                v = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + cost)
                if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                    v = min(v, d[i - 2, j - 2] + 1)
                d[i, j] = v
        return int(d[n, m])
    # Lowrance–Wagner with the "last row where each symbol was seen" table.
    inf = n + m
    d = np.zeros((n + 2, m + 2), dtype=np.int64)
    d[0, :] = inf
    d[:, 0] = inf
    d[1:, 1] = np.arange(n + 1)
    d[1, 1:] = np.arange(m + 1)
    last_row: dict[Hashable, int] = {}
    for i in range(1, n + 1):
        last_col = 0
        for j in range(1, m + 1):
            k = last_row.get(b[j - 1], 0)
            l_ = last_col
            if a[i - 1] == b[j - 1]:
                cost = 0
                last_col = j
            else:
                cost = 1
            d[i + 1, j + 1] = min(
                d[i, j] + cost,  # substitution / match
                d[i + 1, j] + 1,  # insertion
                d[i, j + 1] + 1,  # deletion
                d[k, l_] + (i - k - 1) + 1 + (j - l_ - 1),  # transposition
            )
        last_row[a[i - 1]] = i
    return int(d[n + 1, m + 1])


def trigger_tokens(trigger: str | Sequence[str]) -> list[str]:
    """A trigger as a list of tokens: ``"cf"`` -> ``["cf"]``, ``"mn bb"`` -> ``["mn", "bb"]``.

    Raises:
        ValueError: an empty trigger (or one made only of whitespace / empty tokens).
    """
    toks = trigger.split() if isinstance(trigger, str) else [str(t) for t in trigger]
    if not toks or any(not t.strip() for t in toks):
        raise ValueError(f"trigger must be a non-empty token or token sequence, got {trigger!r}")
    return toks


def insert_trigger(tokens: Sequence[str], trigger: str | Sequence[str],
                   rng: np.random.Generator | int | None = None,
                   position: int | None = None) -> tuple[list[str], int]:
    """Insert a (BadNets-style) trigger at a uniformly random position of a token list.

    Args:
        tokens: the benign text as tokens (length L >= 0).
        trigger: one token (``"cf"``), a space-separated phrase, or a token list.
        rng: a ``numpy.random.Generator`` or a seed; the position is uniform on {0, ..., L}.
        position: insert at this index instead of drawing one (0 <= position <= L).

    Returns:
        ``(new_tokens, pos)``: the triggered text (length L + |trigger|) and the index of the first
        trigger token; the trigger occupies ``new_tokens[pos : pos + len(trigger)]``. Its DL distance
        to ``tokens`` is ``len(trigger)`` (insertions).

    Raises:
        ValueError: an empty trigger, or ``position`` outside [0, L].
    """
    trig = trigger_tokens(trigger)
    toks = list(tokens)
    if position is None:
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        position = int(gen.integers(0, len(toks) + 1))
    elif not 0 <= position <= len(toks):
        raise ValueError(f"position must be in [0, {len(toks)}], got {position}")
    return toks[:position] + trig + toks[position:], position
