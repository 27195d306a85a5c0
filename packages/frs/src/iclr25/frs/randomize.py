"""Fuzzed text randomisation (FTR, Eq. 11) and the uniform baseline.

Each token of a text x' (length L) is randomised independently: with probability ω_H if it lies in
the vulnerable area T(x') found by the MCTS fuzzer, with probability ω_L otherwise. ω_L is chosen so
that the *expected number of randomised tokens equals the uniform smoother's* [design]:

    ω_H·|T| + ω_L·(L − |T|) = ω_M·L,   ω_L < ω_M < ω_H,

which makes FRS and the uniform smoother (every token with ω_M, RanMASK-style) spend the same
randomisation budget. Short texts [design]: when ω_H·|T| > ω_M·L the budget cannot be kept with
ω_L >= 0; then ω_L = 0 and ω_H is lowered to ω_M·L/|T| (the value used in the radius), and the text
is flagged ``short_text``. "Randomising" a token replaces it by the mask token (RanMASK-style
masking, our choice among the DL edits; see README deviations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FuzzRates", "check_omegas", "fuzz_rates", "token_probabilities", "targeted_randomize",
           "uniform_randomize", "randomize_variants"]


def check_omegas(w_high: float, w_mid: float) -> tuple[float, float]:
    """Validate ``0 < ω_M < ω_H < 1``; return them as floats.

    Raises:
        ValueError: naming ``w_mid`` / ``w_high`` and the rule.
    """
    wh, wm = float(w_high), float(w_mid)
    if not (math.isfinite(wh) and math.isfinite(wm) and 0.0 < wm < wh < 1.0):
        raise ValueError(f"randomisation probabilities must satisfy 0 < w_mid < w_high < 1 "
                         f"(omega_M < omega_H), got w_mid={w_mid!r}, w_high={w_high!r}")
    return wh, wm


@dataclass(frozen=True)
class FuzzRates:
    """Per-token randomisation probabilities of one text (Eq. 11).

    Attributes:
        w_in: probability inside T(x') — ω_H, or ω_M·L/|T| for a short text; the ω of the radius.
        w_out: probability outside T(x') — the budget-preserving ω_L (0 for a short text).
        short_text: whether the short-text rule fired (ω_H·|T| > ω_M·L).
        expected_randomised: ω_in·|T| + ω_out·(L − |T|) (= ω_M·L by construction).
    """

    w_in: float
    w_out: float
    short_text: bool
    expected_randomised: float


def fuzz_rates(length: int, seg_len: int, w_high: float = 0.9, w_mid: float = 0.3) -> FuzzRates:
    """ω_in / ω_out for a text of ``length`` tokens whose vulnerable area has ``seg_len`` tokens.

    Example (known answer): L = 20, |T| = 4, ω_M = 0.3, ω_H = 0.9 -> ω_L = (6 − 3.6)/16 = 0.15.

    Raises:
        ValueError: ω not satisfying 0 < ω_M < ω_H < 1, L < 1, or |T| outside [1, L].
    """
    wh, wm = check_omegas(w_high, w_mid)
    if int(length) != length or length < 1:
        raise ValueError(f"length (L) must be an integer >= 1, got {length!r}")
    if int(seg_len) != seg_len or not 1 <= seg_len <= length:
        raise ValueError(f"vulnerable-area length |T| must be in [1, L={length}], got {seg_len!r}")
    budget = wm * length
    if wh * seg_len > budget:
        w_in = budget / seg_len
        return FuzzRates(w_in=w_in, w_out=0.0, short_text=True, expected_randomised=w_in * seg_len)
    if seg_len == length:  # unreachable when wh > wm, kept for clarity
        return FuzzRates(w_in=wh, w_out=0.0, short_text=False, expected_randomised=wh * seg_len)
    w_out = (budget - wh * seg_len) / (length - seg_len)
    return FuzzRates(w_in=wh, w_out=w_out, short_text=False,
                     expected_randomised=wh * seg_len + w_out * (length - seg_len))


def token_probabilities(length: int, segment: tuple[int, int] | None, w_high: float = 0.9,
                        w_mid: float = 0.3) -> tuple[np.ndarray, FuzzRates | None]:
    """Per-token probabilities ``float64[L]``: targeted (Eq. 11) when ``segment=(start, end)`` is given
    (end exclusive), uniform ω_M when it is ``None``. Returns ``(probs, rates)`` (rates None if uniform)."""
    if segment is None:
        if not (math.isfinite(w_mid) and 0 < w_mid < 1):
            raise ValueError(f"w_mid must be in (0, 1), got {w_mid!r}")
        return np.full(int(length), float(w_mid)), None
    start, end = int(segment[0]), int(segment[1])
    if not 0 <= start < end <= length:
        raise ValueError(f"segment must satisfy 0 <= start < end <= L={length}, got {segment!r}")
    rates = fuzz_rates(length, end - start, w_high, w_mid)
    p = np.full(int(length), rates.w_out)
    p[start:end] = rates.w_in
    return p, rates


def randomize_variants(tokens: Sequence[str], probs: np.ndarray, n: int, mask_token: str,
                       rng: np.random.Generator) -> tuple[list[list[str]], np.ndarray]:
    """Draw ``n`` randomised copies of ``tokens``: token i is replaced by ``mask_token`` with prob. probs[i].

    Returns:
        ``(variants, masked)``: n token lists (same length L) and the bool mask ``[n, L]`` of the
        randomised positions.
    """
    L = len(tokens)
    masked = rng.random((int(n), L)) < np.asarray(probs)[None, :]
    arr = np.asarray(list(tokens), dtype=object)
    out = np.where(masked, mask_token, arr[None, :])
    return [list(row) for row in out], masked


def targeted_randomize(tokens: Sequence[str], segment: tuple[int, int], w_high: float = 0.9,
                       w_mid: float = 0.3, mask_token: str = "[MASK]",
                       rng: np.random.Generator | int | None = None, n: int | None = None):
    """Fuzzed (targeted) randomisation of one text (Eq. 11): ω_H inside ``segment``, ω_L outside.

    Args:
        tokens: the text (L >= 1 tokens).
        segment: the vulnerable area ``(start, end)``, end exclusive (e.g. from
            :meth:`MCTSFuzzer.search`).
        w_high, w_mid: ω_H and the uniform smoother's ω_M (ω_L follows from the budget).
        mask_token: what a randomised token becomes.
        rng: generator or seed.
        n: number of copies; ``None`` returns one token list, an int returns a list of lists.

    Raises:
        ValueError: empty text, bad segment, or ω not satisfying 0 < ω_M < ω_H < 1.
    """
    if len(tokens) == 0:
        raise ValueError("cannot randomise an empty text")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    probs, _ = token_probabilities(len(tokens), segment, w_high, w_mid)
    variants, _ = randomize_variants(tokens, probs, 1 if n is None else n, mask_token, gen)
    return variants[0] if n is None else variants


def uniform_randomize(tokens: Sequence[str], w_mid: float = 0.3, mask_token: str = "[MASK]",
                      rng: np.random.Generator | int | None = None, n: int | None = None):
    """Uniform randomisation (the −FTR ablation / RanMASK-style baseline): every token with ω_M."""
    if len(tokens) == 0:
        raise ValueError("cannot randomise an empty text")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    probs, _ = token_probabilities(len(tokens), None, w_mid=w_mid)
    variants, _ = randomize_variants(tokens, probs, 1 if n is None else n, mask_token, gen)
    return variants[0] if n is None else variants
