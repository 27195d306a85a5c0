"""The smoothed classifier: fuzzed text randomisation × BMPS parameter copies, majority vote (Sec. 4).

For a text x' (L tokens) the :class:`FRSClassifier`

1. finds the vulnerable area T(x') with the MCTS fuzzer (``randomization="targeted"``; skipped for
   ``"uniform"`` and ``"none"``);
2. draws n randomised copies of x' (Eq. 11: ω_H inside T, budget-preserving ω_L outside; or ω_M
   everywhere);
3. collects N votes that are **independent draws** from the smoothed distribution, so that the
   Clopper–Pearson bound of :func:`~iclr25.frs.certification.certify` is valid (issue #40):

   * ``vote_design="iid"`` (default): N = K·n votes, each on its own freshly randomised text,
     cast by a parameter copy drawn uniformly from the K copies. The smoothed classifier is the
     mixture over (copy, randomisation); the votes are i.i.d. Bernoulli draws of its class
     probabilities.
   * ``vote_design="grid"``: n randomised texts, every copy votes on every text, and **each text
     counts once** with the majority of its K copies (ties -> lower index): N = n. The smoothed
     classifier is the randomisation-smoothing of the K-copy ensemble. The spec's reading — the
     K·n grid votes counted as N = K·n independent trials — is *not* a valid certificate (the
     copies agree on ~99 % of texts at σ = 0.01; simulated coverage 75 % instead of 95 %) and is
     not offered;
4. returns the majority label (ties -> the lower class index), p_A and p_B (vote shares of the top
   and runner-up classes).

**Randomness per text** [design, issue #40]: the randomisation, the MCTS mutations and the iid copy
draws of a text come from a generator seeded by ``(seed, index)``, where ``index`` is the text's
position in the data (``predict_many(..., indices=...)``; default its position in the call). So
certificates do not depend on how the texts are chunked, sharded or resumed.

The **arms** of the paper's comparisons (:func:`make_arm`): ``none`` (the fine-tuned model, no
smoothing), ``uniform`` (BMPS copies + ω_M everywhere: the −FTR ablation and the RanMASK-style
baseline), ``frs`` (BMPS + MCTS + targeted randomisation), ``ftr-only`` (FRS with σ = 0: the −BMPS
ablation) and ``bmps-only`` (BMPS copies, no text randomisation).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .bounds import check_alpha, check_num_votes
from .mcts import MCTSFuzzer, SearchTrace
from .models import check_proba
from .randomize import FuzzRates, check_omegas, randomize_variants, token_probabilities

__all__ = ["ARMS", "Vote", "FRSClassifier", "make_arm"]

log = logging.getLogger(__name__)

ARMS = ("none", "uniform", "frs", "ftr-only", "bmps-only")


@dataclass
class Vote:
    """The vote of the smoothed classifier on one text.

    Attributes:
        label: majority class (ties -> lower index).
        p_a, p_b: vote shares of the top and runner-up classes (in [0, 1]).
        counts: ``int64[C]`` votes per class; ``num_votes`` = N.
        length: L, tokens of the text.
        segment: T(x') ``(start, end)`` for targeted randomisation, else ``None``.
        rates: the per-token probabilities used inside/outside T (targeted), else ``None``.
        omega: ω of the radius — ``rates.w_in`` (conditional on the trigger lying in T) for
            targeted, ω_M for uniform, ``None`` without text randomisation.
        omega_out: ω_L (targeted; the unconditional ω), ω_M (uniform), ``None`` otherwise.
        trace: the MCTS trace (targeted).
        copy_agreement: share of the randomised texts on which all K copies vote alike (1 for K = 1;
            how much the BMPS copies actually change votes).
    """

    label: int
    p_a: float
    p_b: float
    counts: np.ndarray
    num_votes: int
    length: int
    segment: tuple[int, int] | None = None
    rates: FuzzRates | None = None
    omega: float | None = None
    omega_out: float | None = None
    trace: SearchTrace | None = None
    copy_agreement: float = 1.0

    @property
    def short_text(self) -> bool:
        return bool(self.rates is not None and self.rates.short_text)


class FRSClassifier:
    """Fuzzed randomized smoothing of a text classifier.

    Args:
        model: a :class:`~iclr25.frs.models.TorchTextClassifier` (or any object with
            ``predict_proba(list[list[str]]) -> [B, C]``, ``num_classes`` and ``mask_token``).
        copies: :class:`~iclr25.frs.bmps.ParameterCopies` (K BMPS copies) or ``None`` (K = 1: the
            model itself). Copies with σ = 0 are identical and count as one (K_eff = 1), so they do
            not inflate N.
        randomization: ``"targeted"`` (FTR, Eq. 11), ``"uniform"`` (ω_M everywhere) or ``"none"``.
        w_high, w_mid: ω_H and ω_M, 0 < ω_M < ω_H < 1 (defaults 0.9 / 0.3, reconstructed).
        n_random: n, randomised copies of each text (default 2); forced to 1 without randomisation.
        fuzzer: an :class:`~iclr25.frs.mcts.MCTSFuzzer`; default one over ``model.predict_proba``
            with ``max_span``, ``iterations``, ``c`` and ``seed``.
        max_span, iterations, c: Λ, I and C of the default fuzzer (3, 32, 0.5).
        alpha: the certification level used for the few-votes warning (default 0.05).
        vote_design: ``"iid"`` (default; N = K·n votes, each on its own randomised text and a copy
            drawn uniformly: independent draws from the smoothed distribution) or ``"grid"`` (every
            copy votes on every one of n randomised texts; each text counts once with its copies'
            majority: N = n). Both give valid certificates (module docstring).
        seed: run seed of the per-text generators (text randomisation, copy draws, MCTS).

    Raises:
        ValueError: ω not satisfying 0 < ω_M < ω_H < 1, n_random / iterations / max_span < 1,
            alpha outside (0, 1), an unknown randomisation or vote design.

    Warns:
        FewVotesWarning / NoCertificatePossibleWarning: N too small for ``alpha`` (see
        :func:`~iclr25.frs.bounds.check_num_votes`); the message is kept in :attr:`warnings`.
    """

    def __init__(self, model, copies=None, *, randomization: Literal["targeted", "uniform", "none"] = "targeted",
                 w_high: float = 0.9, w_mid: float = 0.3, n_random: int = 2, fuzzer: MCTSFuzzer | None = None,
                 max_span: int = 3, iterations: int = 32, c: float = 0.5, alpha: float = 0.05,
                 vote_design: Literal["iid", "grid"] = "iid", seed: int = 0):
        if randomization not in ("targeted", "uniform", "none"):
            raise ValueError(f"randomization must be targeted, uniform or none, got {randomization!r}")
        if vote_design not in ("grid", "iid"):
            raise ValueError(f"vote_design must be iid or grid, got {vote_design!r}")
        self.w_high, self.w_mid = check_omegas(w_high, w_mid)
        if int(n_random) != n_random or n_random < 1:
            raise ValueError(f"n_random (n, randomised copies per text) must be an integer >= 1, got {n_random!r}")
        self.alpha = check_alpha(alpha)
        self.model, self.copies, self.randomization = model, copies, randomization
        self.n_random = int(n_random) if randomization != "none" else 1
        self.vote_design = vote_design
        self.mask_token = getattr(model, "mask_token", "[MASK]")
        self.num_classes = int(model.num_classes)
        if randomization == "targeted" and fuzzer is None:
            fuzzer = MCTSFuzzer(model.predict_proba, max_span=max_span, iterations=iterations, c=c, seed=seed,
                                mask_token=self.mask_token)
        self.fuzzer = fuzzer
        self.seed = int(seed)
        self.warnings: list[str] = []
        if self.certifiable:
            msg = check_num_votes(self.num_votes, self.alpha, stacklevel=2, classes=self.num_classes)
            if msg:
                self.warnings.append(msg)

    @property
    def k_effective(self) -> int:
        """K copies that differ (1 without copies or with σ = 0)."""
        if self.copies is None or self.copies.sigma == 0:
            return 1
        return int(self.copies.k)

    @property
    def num_votes(self) -> int:
        """N independent votes per text: K_eff · n (iid design) or n (grid design)."""
        return self.n_random if self.vote_design == "grid" else self.k_effective * self.n_random

    def text_rng(self, index: int) -> np.random.Generator:
        """The generator of text ``index`` (randomisation and copy draws): seeded by ``(seed, index)``."""
        return np.random.default_rng([self.seed, 1, int(index)])

    @property
    def certifiable(self) -> bool:
        """Whether a radius can be certified (needs text randomisation)."""
        return self.randomization != "none"

    def _copy_probs(self, variants: list[list[str]]) -> np.ndarray:
        """``float[K_eff, V, C]`` probabilities of the (distinct) copies on the variants."""
        if self.copies is None or self.copies.sigma == 0:
            return check_proba(self.model.predict_proba(variants), len(variants), self.num_classes)[None]
        out = self.model.predict_proba_copies(variants, self.copies)
        return np.stack([check_proba(o, len(variants), self.num_classes, source="predict_proba (copy)")
                         for o in out])

    def predict_many(self, texts: Sequence[Sequence[str]], indices: Sequence[int] | None = None) -> list[Vote]:
        """Votes for many texts at once (one MCTS lock-step search, one batched vote pass).

        Args:
            texts: B token lists (each non-empty).
            indices: the texts' positions in the data (default ``0..B-1``): text ``indices[b]``
                draws its randomness from ``(seed, indices[b])``, so a text's vote does not depend
                on the other texts of the call (chunking / resuming give identical votes).

        Raises:
            ValueError: an empty text (its index is given), or ``indices`` of another length.
        """
        texts = [list(t) for t in texts]
        for i, t in enumerate(texts):
            if len(t) == 0:
                raise ValueError(f"text {i} is empty (after tokenisation); FRS needs at least one token")
        if not texts:
            return []
        keys = list(range(len(texts))) if indices is None else [int(i) for i in indices]
        if len(keys) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(keys)} indices")
        segs: list[tuple[tuple[int, int], SearchTrace] | None] = [None] * len(texts)
        if self.randomization == "targeted":
            segs = self.fuzzer.search_many(texts, keys=keys)
        rngs = [self.text_rng(k) for k in keys]
        per_text = self.n_random * (self.k_effective if self.vote_design == "iid" else 1)
        variants: list[list[str]] = []
        meta = []
        for t, s, rng in zip(texts, segs, rngs):
            if self.randomization == "none":
                variants += [t] * per_text
                meta.append((None, None, None, None))
                continue
            seg = s[0] if s is not None else None
            probs, rates = token_probabilities(len(t), seg, self.w_high, self.w_mid)
            v, _ = randomize_variants(t, probs, per_text, self.mask_token, rng)
            variants += v
            if rates is None:
                meta.append((None, None, self.w_mid, self.w_mid))
            else:
                meta.append((seg, rates, rates.w_in, rates.w_out))
        probs_all = self._copy_probs(variants)  # [K, V, C]
        pred = probs_all.argmax(-1)  # [K, V]
        out = []
        off = 0
        K = pred.shape[0]
        for b, t in enumerate(texts):
            block = pred[:, off: off + per_text]  # [K, per_text]
            off += per_text
            agree = float(np.mean(np.all(block == block[:1], axis=0)))
            if K == 1:
                votes = block[0]
            elif self.vote_design == "iid":  # one copy per randomised text, drawn uniformly
                who = rngs[b].integers(0, K, size=per_text)
                votes = block[who, np.arange(per_text)]
            else:  # grid: each text counts once, with the majority of its K copies (ties -> lower index)
                votes = np.array([int(np.argmax(np.bincount(block[:, j], minlength=self.num_classes)))
                                  for j in range(per_text)], dtype=np.int64)
            counts = np.bincount(votes, minlength=self.num_classes).astype(np.int64)
            n = int(counts.sum())
            label = int(np.argmax(counts))  # ties -> lower class index
            rest = np.delete(counts, label)
            seg, rates, om, om_out = meta[b]
            out.append(Vote(label=label, p_a=counts[label] / n, p_b=float(rest.max()) / n, counts=counts,
                            num_votes=n, length=len(t), segment=seg, rates=rates, omega=om, omega_out=om_out,
                            trace=segs[b][1] if segs[b] is not None else None, copy_agreement=agree))
        return out

    def predict_with_votes(self, tokens: Sequence[str]) -> tuple[int, float, float]:
        """``(label, p_A, p_B)`` for one text (see :meth:`predict_many` for the full :class:`Vote`)."""
        v = self.predict_many([tokens])[0]
        return v.label, float(v.p_a), float(v.p_b)

    def predict(self, texts: Sequence[Sequence[str]]) -> np.ndarray:
        """Majority-vote labels ``int64[B]``."""
        return np.array([v.label for v in self.predict_many(texts)], dtype=np.int64)

    @property
    def certified_classifier(self) -> str:
        """What the N votes are draws of, i.e. which smoothed classifier the certificate is about."""
        if self.randomization == "none":
            return "no text randomisation: no certificate"
        if self.vote_design == "grid" and self.k_effective > 1:
            return (f"grid: the majority of the K = {self.k_effective} copies on a randomised text; each of the "
                    f"n = {self.n_random} texts counts once (N = n = {self.num_votes} votes)")
        return (f"iid: a copy drawn uniformly from K = {self.k_effective} on a freshly randomised text per vote "
                f"(N = K*n = {self.num_votes} independent votes)")

    def describe(self) -> dict:
        d = {"randomization": self.randomization, "w_high": self.w_high, "w_mid": self.w_mid,
             "n_random": self.n_random, "k": self.copies.k if self.copies is not None else 1,
             "k_effective": self.k_effective, "num_votes": self.num_votes, "alpha": self.alpha,
             "bound_alpha": self.alpha / self.num_classes,
             "vote_design": self.vote_design, "certifies": self.certified_classifier, "sigma": self.copies.sigma if self.copies is not None else 0.0,
             "top_layers": self.copies.top_layers if self.copies is not None else None}
        if self.fuzzer is not None:
            d.update(max_span=self.fuzzer.max_span, iterations=self.fuzzer.iterations, c=self.fuzzer.c)
        return d


def make_arm(arm: str, model, copies=None, **kw) -> FRSClassifier:
    """The classifier of one arm: ``none``, ``uniform``, ``frs``, ``ftr-only`` or ``bmps-only``.

    ``frs`` and ``uniform`` use ``copies`` (BMPS); ``ftr-only`` ignores them (σ = 0: the model
    itself — pass the model fine-tuned with σ = 0); ``bmps-only`` votes with the copies on the
    unrandomised text; ``none`` is the model alone (N = 1). ``kw`` goes to :class:`FRSClassifier`.

    Raises:
        ValueError: an unknown arm (the valid ones are listed), or ``copies`` missing for an arm
            that needs them.
    """
    if arm not in ARMS:
        raise ValueError(f"defense must be one of {list(ARMS)}, got {arm!r}")
    if arm in ("uniform", "frs", "bmps-only") and copies is None:
        raise ValueError(f"defense {arm!r} needs BMPS parameter copies (sample_parameter_copies)")
    if arm == "none":
        return FRSClassifier(model, None, randomization="none", **kw)
    if arm == "bmps-only":
        return FRSClassifier(model, copies, randomization="none", **kw)
    if arm == "uniform":
        return FRSClassifier(model, copies, randomization="uniform", **kw)
    if arm == "ftr-only":
        return FRSClassifier(model, None, randomization="targeted", **kw)
    return FRSClassifier(model, copies, randomization="targeted", **kw)
