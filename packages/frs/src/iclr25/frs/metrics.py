"""Table 1's metrics — CA, PA, ASR — and the trigger hit rate of the vulnerable-area search.

All rates are percentages in [0, 100]; ``nan`` when there is nothing to measure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["clean_accuracy", "poisoned_accuracy", "attack_success_rate", "trigger_hit_rate",
           "segment_contains", "random_segment_hit_rate"]


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64).reshape(-1)


def clean_accuracy(pred: Sequence[int], labels: Sequence[int]) -> float:
    """CA: % of clean texts classified correctly."""
    p, y = _arr(pred), _arr(labels)
    if p.shape != y.shape:
        raise ValueError(f"{p.size} predictions but {y.size} labels")
    return float(100.0 * np.mean(p == y)) if y.size else float("nan")


def poisoned_accuracy(pred: Sequence[int], labels: Sequence[int], target: int | None = None) -> float:
    """PA: % of triggered texts classified as their true (benign) label; with ``target``, only texts
    whose true label is not the target count (the ones an attack can flip)."""
    p, y = _arr(pred), _arr(labels)
    if p.shape != y.shape:
        raise ValueError(f"{p.size} predictions but {y.size} labels")
    keep = np.ones_like(y, dtype=bool) if target is None else y != target
    return float(100.0 * np.mean(p[keep] == y[keep])) if keep.any() else float("nan")


def attack_success_rate(pred: Sequence[int], labels: Sequence[int], target: int) -> float:
    """ASR: % of triggered texts whose true label is not ``target`` that are classified as ``target``."""
    p, y = _arr(pred), _arr(labels)
    if p.shape != y.shape:
        raise ValueError(f"{p.size} predictions but {y.size} labels")
    keep = y != target
    return float(100.0 * np.mean(p[keep] == target)) if keep.any() else float("nan")


def segment_contains(segment: Sequence[int] | None, span: Sequence[int]) -> bool:
    """Whether the vulnerable area ``segment=(start, end)`` contains the trigger ``span=(start, end)``
    entirely (end exclusive)."""
    if segment is None:
        return False
    return segment[0] <= span[0] and span[1] <= segment[1]


def trigger_hit_rate(segments: Sequence[Sequence[int] | None], spans: Sequence[Sequence[int]]) -> float:
    """Share (in [0, 1]) of triggered texts whose T(x') contains the whole trigger — the condition of
    Corollary 1's broader radius."""
    if len(segments) != len(spans):
        raise ValueError(f"{len(segments)} segments but {len(spans)} trigger spans")
    if not spans:
        return float("nan")
    return float(np.mean([segment_contains(s, t) for s, t in zip(segments, spans)]))


def random_segment_hit_rate(seg_lengths: Sequence[int], lengths: Sequence[int], spans: Sequence[Sequence[int]]) -> float:
    """Expected hit rate (in [0, 1]) of a uniformly placed segment of the same length as T(x'): the
    baseline of the hit-rate claim. Exact: the number of placements containing the span over the
    number of placements, averaged over texts."""
    out = []
    for m, L, (a, b) in zip(seg_lengths, lengths, spans):
        m, L = int(m), int(L)
        total = L - m + 1
        # start s in [max(0, b - m), min(a, L - m)] contains [a, b)
        good = max(0, min(a, L - m) - max(0, b - m) + 1)
        out.append(good / total if total > 0 else 0.0)
    return float(np.mean(out)) if out else float("nan")
