"""Certification of the smoothed classifier, with abstentions, and the empirical radius (Table 2).

:func:`certify` turns each text's votes into a certificate: the Clopper–Pearson lower bound p_A
of the top class over the N independent votes (see the vote designs of
:mod:`~iclr25.frs.smoothing`), ``p_B = 1 − p_A`` (as in the spec), **abstention when p_A <= 1/2**, and otherwise the radius ``R_r = ln(1 − (p_A − p_B)/2) / (L ln ω)`` (a fraction of L;
``R_r·L`` edited tokens). For FRS a trigger longer than |T(x')| cannot lie inside T(x'), so the
radius in tokens beyond |T| continues with ω_L (:func:`~iclr25.frs.bounds.segment_radius_tokens`,
[design]); it equals the formula whenever that gives at most |T| tokens.

**One sample selects and bounds the class** [design, issue #40]. Cohen et al. choose the class on a
separate sample (n0) and bound it on another (n). Here the same N votes do both, which is valid
because the bound is taken at level α/C (C classes, Bonferroni): the C one-sided bounds then hold
*simultaneously* with probability >= 1 − α, so the bound of whichever class the votes select holds
too. At level α (the previous code) the selected class's bound fails with probability up to
≈ C·α when classes are near-tied (binary p_A = 1/2: ≈ 2α). ``p_a_lower`` is this α/C bound;
coverage tests (``tests/test_frs_coverage.py``) check ``P(p_a_lower <= true p) >= 1 − α``.

How conditional the radius is: for FRS, ω = ω_H (or the lowered short-text value) — valid only if
the trigger lies inside the vulnerable area T(x') found by MCTS (Corollary 1), and under
Assumption 1 (the smoothed ensemble agrees with the clean fine-tuned model on benign inputs).
Every certificate therefore also carries ``radius_unconditional``, the radius with the smallest
per-token probability the text actually got (ω_L for FRS, which is 0 — no certificate — for short
texts; ω_M for the uniform smoother, whose radius needs no location assumption).

:func:`empirical_radius` measures, by binary search, the largest fraction of tokens that can be
randomly substituted while the smoothed prediction stays correct in at least 95 % of the draws.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from .bounds import (
    certified_edits,
    certified_radius,
    check_alpha,
    check_num_votes,
    clopper_pearson_lower,
    segment_radius_tokens,
)

__all__ = ["Certificate", "certify", "summarize_certificates", "empirical_radius"]

log = logging.getLogger(__name__)


@dataclass
class Certificate:
    """One text's certificate (all probabilities in [0, 1]; radius as a fraction of L).

    ``abstain`` is True when the lower bound ``p_a_lower <= 1/2``; an abstention has radius 0 and
    is not certified. ``label`` is the plain majority vote (used for CA / PA / ASR either way).
    """

    index: int
    label: int
    p_a: float
    p_b: float
    p_a_lower: float
    p_b_upper: float
    abstain: bool
    radius: float
    radius_tokens: float
    certified_edits: int
    omega: float | None
    conditional: bool
    radius_unconditional: float
    length: int
    num_votes: int
    counts: list[int]
    segment: list[int] | None
    short_text: bool
    true_label: int | None = None
    correct: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def certify(clf, texts: Sequence[Sequence[str]], labels: Sequence[int] | None = None, alpha: float = 0.05,
            *, votes=None, offset: int = 0, indices: Sequence[int] | None = None) -> list[Certificate]:
    """Certify each text with the smoothed classifier ``clf`` (Theorem 1 / Corollary 1).

    Args:
        clf: an :class:`~iclr25.frs.smoothing.FRSClassifier`.
        texts: B token lists.
        labels: optional true labels (sets ``true_label`` / ``correct``).
        alpha: one-sided error level of the Clopper–Pearson bound, in (0, 1).
        votes: precomputed ``clf.predict_many(texts)`` (reuses them instead of voting again).
        offset: added to the certificate indices (for sharded / resumed runs).
        indices: the texts' indices in the data (default ``offset + 0..B-1``): each text's
            randomness is seeded by ``(clf.seed, index)``, so chunked / resumed runs give identical
            certificates. The certificates carry these indices.

    Returns:
        One :class:`Certificate` per text.

    Raises:
        ValueError: alpha outside (0, 1), labels of another length, an empty text.

    Warns:
        FewVotesWarning / NoCertificatePossibleWarning when N = K·n is too small for ``alpha``.
    """
    alpha = check_alpha(alpha)
    if labels is not None and len(labels) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    idx = [offset + i for i in range(len(texts))] if indices is None else [int(i) for i in indices]
    if len(idx) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(idx)} indices")
    a_sel = alpha / clf.num_classes  # Bonferroni over the classes: the selected class's bound holds
    if clf.certifiable:
        check_num_votes(clf.num_votes, alpha, stacklevel=2, classes=clf.num_classes)
    if votes is None:
        votes = clf.predict_many(texts, indices=idx)
    out = []
    for i, v in enumerate(votes):
        k = int(v.counts[v.label])
        lower = float(clopper_pearson_lower(k, v.num_votes, a_sel))
        upper_b = 1.0 - lower
        abstain = not lower > 0.5
        if abstain or v.omega is None or not clf.certifiable:
            r = 0.0
        elif v.segment is not None and v.rates is not None:  # targeted: at most |T| tokens at ω_in
            seg_len = int(v.segment[1] - v.segment[0])
            r = segment_radius_tokens(lower, upper_b, v.omega, v.rates.w_out, seg_len, v.length) / v.length
        else:
            r = float(certified_radius(lower, upper_b, v.omega, v.length))
        r_unc = 0.0
        if not abstain and v.omega_out is not None and v.omega_out > 0 and clf.certifiable:
            r_unc = float(certified_radius(lower, upper_b, min(v.omega_out, v.omega), v.length))
        y = None if labels is None else int(labels[i])
        out.append(Certificate(
            index=idx[i], label=int(v.label), p_a=float(v.p_a), p_b=float(v.p_b), p_a_lower=lower,
            p_b_upper=upper_b, abstain=abstain, radius=r, radius_tokens=r * v.length,
            certified_edits=int(certified_edits(r, v.length)), omega=v.omega,
            conditional=clf.randomization == "targeted", radius_unconditional=r_unc, length=int(v.length),
            num_votes=int(v.num_votes), counts=[int(c) for c in v.counts],
            segment=None if v.segment is None else [int(v.segment[0]), int(v.segment[1])],
            short_text=v.short_text, true_label=y, correct=None if y is None else bool(v.label == y)))
    return out


def summarize_certificates(certs: Sequence[Certificate]) -> dict:
    """Aggregates: abstention rate, mean radius (abstentions and wrong labels count as 0), mean
    radius in tokens, share certified, short-text count; ``nan`` for an empty list.

    Keys: ``n``, ``abstention_rate``, ``mean_radius`` (over all texts; an abstained or wrong text
    counts 0), ``mean_radius_tokens``, ``mean_radius_unconditional``, ``certified_rate``
    (correct and not abstained), ``short_texts``, ``num_votes``.
    """
    n = len(certs)
    if n == 0:
        return {"n": 0, "abstention_rate": float("nan"), "mean_radius": float("nan"),
                "mean_radius_tokens": float("nan"), "mean_radius_unconditional": float("nan"),
                "certified_rate": float("nan"), "short_texts": 0, "num_votes": None}

    def ok(c: Certificate) -> bool:
        return (not c.abstain) and (c.correct is None or c.correct)

    return {
        "n": n,
        "abstention_rate": 100.0 * sum(c.abstain for c in certs) / n,
        "mean_radius": float(np.mean([c.radius if ok(c) else 0.0 for c in certs])),
        "mean_radius_tokens": float(np.mean([c.radius_tokens if ok(c) else 0.0 for c in certs])),
        "mean_radius_unconditional": float(np.mean([c.radius_unconditional if ok(c) else 0.0 for c in certs])),
        "certified_rate": 100.0 * sum(ok(c) and c.radius > 0 for c in certs) / n,
        "short_texts": int(sum(c.short_text for c in certs)),
        "num_votes": int(certs[0].num_votes),
    }


def _perturb(tokens: list[str], m: int, pool: Sequence[str], rng: np.random.Generator) -> list[str]:
    pos = rng.choice(len(tokens), size=m, replace=False) if m else []
    out = list(tokens)
    for p in pos:
        out[p] = pool[int(rng.integers(0, len(pool)))]
    return out


def empirical_radius(clf, texts: Sequence[Sequence[str]], labels: Sequence[int], *, pool: Sequence[str],
                     num_samples: int = 20, confidence: float = 0.95, seed: int = 0) -> np.ndarray:
    """Empirical robustness radius per text (Table 2's measurement, reconstructed).

    For each text (L tokens) the largest m in [0, L] such that the smoothed prediction on a text
    with m random positions substituted by random ``pool`` tokens is correct in at least
    ``confidence`` of ``num_samples`` draws, found by binary search (assuming monotonicity in m);
    returned as m / L. A text whose unperturbed prediction is already wrong gets 0. All texts are
    searched in lock-step (one batched smoothed prediction per search step).

    Args:
        clf: an :class:`~iclr25.frs.smoothing.FRSClassifier`.
        texts, labels: the texts (token lists) and their true labels.
        pool: replacement tokens (e.g. the model vocabulary without special tokens).
        num_samples: draws per (text, m), >= 1.
        confidence: required share of correct draws, in (0, 1].
        seed: seed of the perturbations.

    Returns:
        ``float64[B]`` radii in [0, 1] (fraction of tokens).

    Raises:
        ValueError: lengths differ, empty pool, num_samples < 1, confidence outside (0, 1].
    """
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    if not pool:
        raise ValueError("pool of replacement tokens is empty")
    if int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    if not (0 < confidence <= 1):
        raise ValueError(f"confidence must be in (0, 1], got {confidence!r}")
    rng = np.random.default_rng([seed, 7])
    texts = [list(t) for t in texts]
    y = np.asarray(labels)
    B = len(texts)
    lo = np.full(B, -1)  # largest m known to pass (-1: not even m = 0)
    hi = np.array([len(t) + 1 for t in texts])  # smallest m known to fail
    # m = 0 first (the unperturbed prediction must be correct in the same sense)
    cand = np.zeros(B, dtype=int)
    while True:
        todo = [b for b in range(B) if hi[b] - lo[b] > 1]
        if not todo:
            break
        batch, owner = [], []
        for b in todo:
            for _ in range(num_samples):
                batch.append(_perturb(texts[b], int(cand[b]), pool, rng))
                owner.append(b)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = clf.predict(batch)
        owner_arr = np.asarray(owner)
        for b in todo:
            acc = float(np.mean(pred[owner_arr == b] == y[b]))
            if acc >= confidence:
                lo[b] = cand[b]
            else:
                hi[b] = cand[b]
            if lo[b] < 0 and hi[b] == 0:  # wrong already at m = 0
                lo[b], hi[b] = 0, 1
                continue
            cand[b] = (lo[b] + hi[b]) // 2 if lo[b] >= 0 else 0
    out = np.array([max(lo[b], 0) / len(texts[b]) for b in range(B)], dtype=np.float64)
    # texts wrong at m = 0 were marked lo = 0 with hi = 1 — radius 0
    return out
