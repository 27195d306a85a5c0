"""Comparing two runs claim by claim: flipped verdicts, and numbers that moved by more than their
seed spread (or a relative tolerance).

Part of :mod:`iclr25.core.report` (see its docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..results import Claim, _fmt
from .load import PackageResults

#: Relative tolerance for "moved" when a number has no seed spread: |new - old| > rtol * max(|old|, |new|).
DEFAULT_RTOL = 0.05



def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def claim_spread(raw_claim: Mapping[str, Any], claim: Claim | None, key: str) -> float | None:
    """The seed spread (sd) of ``key`` (``"ours"`` or ``"baseline"``) of a claim, if given.

    ``spread`` is read from the :class:`Claim` when it has such a field, else from the JSON
    dict. A number is the spread of ``ours``; a mapping gives one per key. Negative or
    non-finite spreads are ignored (treated as absent).
    """
    s = getattr(claim, "spread", None) if claim is not None else None
    if s is None:
        s = raw_claim.get("spread")
    elif key != "ours":
        return None  # Claim.spread is the sd of the compared quantity (the gap, or ours), not of the baseline
    if isinstance(s, Mapping):
        v = _num(s.get(key))
    else:
        v = _num(s) if key == "ours" else None
    if v is None or not math.isfinite(v) or v < 0:
        return None
    return v


def _claim_seeds(raw_claim: Mapping[str, Any], claim: Claim | None) -> Any:
    s = getattr(claim, "seeds", None) if claim is not None else None
    return s if s is not None else raw_claim.get("seeds")


@dataclass(frozen=True)
class ClaimChange:
    """How one claim differs between an old and a new run.

    Args:
        status: ``"same"``, ``"changed"`` (flipped or moved), ``"new"`` (not in the old run)
            or ``"removed"`` (only in the old run).
        was_holds: ``holds`` in the old run (``None`` for a new claim).
        flipped: whether ``holds`` differs.
        moved: one text per number that moved, naming the rule (seed spread or relative
            tolerance), e.g. ``"ours 0.91 → 0.72: |Δ| 0.19 > spread 0.03 (seed sd)"``.
        old: the old claim (``None`` for a new claim).
    """

    status: str
    was_holds: bool | None = None
    flipped: bool = False
    moved: tuple[str, ...] = ()
    old: Claim | None = None


def _moved(key: str, old: float | None, new: float | None, s_old: float | None,
           s_new: float | None, rtol: float) -> str | None:
    def finite(x: float | None) -> bool:
        return x is not None and math.isfinite(x)

    if not finite(old) and not finite(new):
        return None  # unmeasured (or absent) in both runs
    if not finite(old) or not finite(new):
        return f"{key} {_fmt(old) or 'none'} → {_fmt(new) or 'none'}: measured in one run only"
    assert old is not None and new is not None
    diff = abs(new - old)
    spreads = [s for s in (s_old, s_new) if s is not None]
    if spreads:
        tol = max(spreads)
        if diff > tol:
            return f"{key} {_fmt(old)} → {_fmt(new)}: |Δ| {_fmt(diff)} > spread {_fmt(tol)} (seed sd)"
        return None
    tol = rtol * max(abs(old), abs(new))
    if diff > tol:
        return (f"{key} {_fmt(old)} → {_fmt(new)}: |Δ| {_fmt(diff)} > {rtol:.0%} relative tolerance "
                f"({_fmt(tol)}; no seed spread given)")
    return None


def compare_results(old: Sequence[PackageResults], new: Sequence[PackageResults], *,
                    rtol: float = DEFAULT_RTOL) -> dict[str, dict[str, ClaimChange]]:
    """Compare two runs claim by claim.

    Claims are matched by package slug and claim name. A number (``ours``, ``baseline``) has
    *moved* when ``|new - old|`` exceeds the larger of the two runs' seed spreads for it
    (:func:`claim_spread`), or, when neither run gives a spread, ``rtol * max(|old|, |new|)``;
    a number measured in one run only (NaN or absent in the other) has moved too.

    Args:
        old, new: :func:`load_results` of the two folders.
        rtol: relative tolerance for numbers without a spread (finite, ``>= 0``).

    Returns:
        ``{slug: {claim name: ClaimChange}}`` for every package of ``new``, including
        ``"removed"`` entries for claims only in ``old`` (a package only in ``old`` has all
        its claims removed).

    Raises:
        ValueError: ``rtol`` is negative or not finite.
    """
    if not (isinstance(rtol, (int, float)) and math.isfinite(rtol) and rtol >= 0):
        raise ValueError(f"rtol must be a finite number >= 0, got {rtol!r}")
    old_by = {p.slug: p for p in old}
    out: dict[str, dict[str, ClaimChange]] = {}
    slugs = list(dict.fromkeys([p.slug for p in new] + [p.slug for p in old]))
    new_by = {p.slug: p for p in new}
    for slug in slugs:
        changes: dict[str, ClaimChange] = {}
        o = old_by.get(slug)
        n = new_by.get(slug)
        o_claims = {c.name: (i, c) for i, c in enumerate(o.claims)} if o else {}
        for i, c in enumerate(n.claims if n else []):
            if c.name not in o_claims:
                changes[c.name] = ClaimChange("new")
                continue
            j, oc = o_claims[c.name]
            assert o is not None and n is not None
            moved = []
            for key in ("ours", "baseline"):
                m = _moved(key, getattr(oc, key), getattr(c, key),
                           claim_spread(o.claim_raw(j), oc, key), claim_spread(n.claim_raw(i), c, key), rtol)
                if m:
                    moved.append(m)
            flipped = oc.holds != c.holds
            changes[c.name] = ClaimChange("changed" if flipped or moved else "same", oc.holds,
                                          flipped, tuple(moved), oc)
        for name, (_, oc) in o_claims.items():
            if name not in changes:
                changes[name] = ClaimChange("removed", oc.holds, old=oc)
        out[slug] = changes
    return out


