"""Pick points of the methods' training curves by validation accuracy only (pure functions, no torch).

Every method is trained on the same learning-rate grid and evaluated at the same checkpoint grid
(:mod:`iclr25.q_adapter.dsp`); a *point* is one (learning rate, checkpoint) with its validation accuracy,
test accuracy and general-text NLL. :func:`best_point` tunes a method (the point of highest validation
accuracy); :func:`matched_forgetting` compares two methods' forgetting at matched preference success: the
highest validation accuracy *both* reach, and for each method the least forgetting among its points that
reach it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["best_point", "matched_forgetting"]


def _check(points: Sequence[dict], who: str) -> None:
    if not points:
        raise ValueError(f"{who}: no curve points (did the method's jobs run?)")
    for p in points:
        for k in ("val_accuracy", "test_accuracy", "general_nll"):
            if p.get(k) is None:
                raise ValueError(f"{who}: point at step {p.get('step')} has no {k}")


def best_point(points: Sequence[dict], who: str = "method") -> dict:
    """The point of highest validation accuracy (ties: the lower general NLL, then the earlier step)."""
    _check(points, who)
    return min(points, key=lambda p: (-p["val_accuracy"], p["general_nll"], p["step"]))


def matched_forgetting(a: Sequence[dict], b: Sequence[dict], base_nll: float, *, who: tuple[str, str] = ("a", "b"),
                       tol: float = 1e-9) -> dict:
    """Forgetting of methods ``a`` and ``b`` at matched validation accuracy.

    Args:
        a, b: every point of each method for one seed (all learning rates and checkpoints).
        base_nll: the base model's general-text NLL (forgetting = a point's NLL minus it).
        who: names for error messages.
        tol: accuracy tolerance when comparing with the target.

    Returns:
        ``{"target", "a": point, "b": point, "forgetting_a", "forgetting_b"}`` where ``target`` is
        ``min(max val acc of a, max val acc of b)`` and each chosen point is the one of least NLL among
        that method's points with validation accuracy >= ``target``.
    """
    _check(a, who[0])
    _check(b, who[1])
    target = min(max(p["val_accuracy"] for p in a), max(p["val_accuracy"] for p in b))
    pick = lambda pts: min((p for p in pts if p["val_accuracy"] >= target - tol),  # noqa: E731
                           key=lambda p: (p["general_nll"], p["step"]))
    pa, pb = pick(a), pick(b)
    return {"target": target, "a": pa, "b": pb, "forgetting_a": pa["general_nll"] - base_nll,
            "forgetting_b": pb["general_nll"] - base_nll}
