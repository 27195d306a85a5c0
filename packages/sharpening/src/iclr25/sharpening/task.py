"""The trap-arithmetic task of spec §4.1: exact ground truth for every sharpening quantity.

A prompt is ``"a+b="`` with ``a, b`` in ``{low..high}`` (default 10..49, so ``c = a + b`` has two
digits). The data-generating distribution answers with the correct two-digit sum ``c`` with
probability ``p_correct`` and otherwise with one of ``n_distractors`` two-character strings
``d'u`` (``u`` in 0..9) whose first digit ``d' = (c_1 + k) mod 10``, ``k = 1..n_distractors/10``,
each with probability ``(1 - p_correct) / n_distractors``. The *sequence* mode is the correct
answer, but the first-token marginal puts ``10 (1 - p_correct) / n_distractors`` on every
distractor digit, which is more than ``p_correct`` in the default setting: greedy decoding is
wrong, sampling is right ``p_correct`` of the time, and ``C_cov = 1 / p_correct`` (2.5 by default).

Every response is two characters followed by EOS; the response space the tools enumerate is the
100 strings ``"00".."99"`` (candidate index = the number they spell).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["TrapArithmeticTask", "CANDIDATES"]

#: The 100 two-digit answers; candidate ``i`` spells the number ``i`` (zero-padded).
CANDIDATES: tuple[str, ...] = tuple(f"{i:02d}" for i in range(100))

_PROMPT = re.compile(r"^\s*(\d+)\s*\+\s*(\d+)\s*=\s*$")


@dataclass(frozen=True)
class TrapArithmeticTask:
    """Trap arithmetic (spec §4.1) with ``p_correct`` and the number of distractors configurable.

    Args:
        p_correct: probability ``p_c`` of the correct answer, in (0, 1) (spec: 0.4; coverage
            sweep 0.4 / 0.2 / 0.1).
        n_distractors: number of distractor strings, a multiple of 10 in [10, 90] (spec: 10;
            sweep 10 / 20 / 40). They occupy ``n_distractors / 10`` wrong first digits.
        low, high: the operand range (inclusive); ``10 <= low <= high <= 49`` keeps every sum at
            two digits.

    Raises:
        ValueError: a value out of range, or ``p_correct`` not above a single distractor's
            probability (the correct answer must be the unique mode).
    """

    p_correct: float = 0.4
    n_distractors: int = 10
    low: int = 10
    high: int = 49

    def __post_init__(self) -> None:
        p = self.p_correct
        if not (isinstance(p, (int, float)) and math.isfinite(p) and 0.0 < p < 1.0):
            raise ValueError(f"p_correct must be a finite number in (0, 1), got {p!r}")
        nd = self.n_distractors
        if not (isinstance(nd, int) and 10 <= nd <= 90 and nd % 10 == 0):
            raise ValueError(f"n_distractors must be a multiple of 10 in [10, 90], got {nd!r}")
        if not (10 <= self.low <= self.high <= 49):
            raise ValueError(f"need 10 <= low <= high <= 49 (two-digit sums), got low={self.low}, high={self.high}")
        if not p > (1.0 - p) / nd:
            raise ValueError(
                f"p_correct={p} is not above one distractor's probability (1 - p_correct)/n_distractors="
                f"{(1 - p) / nd:.4g}: the correct answer would not be the unique mode; raise p_correct "
                "or n_distractors")

    # ----- the prompt space -----
    @property
    def candidates(self) -> tuple[str, ...]:
        """The 100 enumerated answers ``"00".."99"`` (each followed by EOS when scored)."""
        return CANDIDATES

    @property
    def distractor_mass(self) -> float:
        """Probability of one distractor string, ``(1 - p_c) / n_distractors``."""
        return (1.0 - self.p_correct) / self.n_distractors

    @property
    def is_trap(self) -> bool:
        """Whether a wrong first digit carries more first-token mass than the correct one."""
        return 10 * self.distractor_mass > self.p_correct

    @property
    def coverage_coefficient(self) -> float:
        """``C_cov = E_x[1 / pi(y*|x)] = 1 / p_c`` for the data-generating distribution (spec §6.6)."""
        return 1.0 / self.p_correct

    def pairs(self) -> np.ndarray:
        """All operand pairs, ``(n_pairs, 2)`` int64 (``a`` major)."""
        r = np.arange(self.low, self.high + 1)
        a, b = np.meshgrid(r, r, indexing="ij")
        return np.stack([a.ravel(), b.ravel()], 1).astype(np.int64)

    def split(self, n_train: int, n_test: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Disjoint random train / test operand pairs ``(n_train, 2)``, ``(n_test, 2)`` int64.

        Raises:
            ValueError: ``n_train + n_test`` exceeds the number of distinct prompts.
        """
        pairs = self.pairs()
        if n_train < 0 or n_test < 1 or n_train + n_test > len(pairs):
            raise ValueError(f"need n_train >= 0, n_test >= 1 and n_train + n_test <= {len(pairs)} "
                             f"distinct prompts, got n_train={n_train}, n_test={n_test}")
        perm = np.random.default_rng(seed).permutation(len(pairs))
        return pairs[perm[:n_train]], pairs[perm[n_train:n_train + n_test]]

    @staticmethod
    def prompt(a: int, b: int) -> str:
        """The prompt text ``"a+b="``."""
        return f"{int(a)}+{int(b)}="

    def prompts(self, pairs: np.ndarray) -> list[str]:
        """Prompt texts for ``pairs`` ``(B, 2)``."""
        return [self.prompt(a, b) for a, b in np.asarray(pairs)]

    @staticmethod
    def parse_prompt(text: str) -> tuple[int, int]:
        """``"a+b="`` -> ``(a, b)``. Raises ``ValueError`` on anything else."""
        m = _PROMPT.match(text)
        if m is None:
            raise ValueError(f"not a trap-arithmetic prompt 'a+b=': {text!r}")
        return int(m.group(1)), int(m.group(2))

    @staticmethod
    def correct_index(pairs: np.ndarray) -> np.ndarray:
        """Index of the correct answer among :data:`CANDIDATES`, ``(B,)`` int64 (= ``a + b``)."""
        p = np.asarray(pairs)
        return (p[:, 0] + p[:, 1]).astype(np.int64)

    # ----- the data-generating distribution -----
    def distractor_indices(self, pairs: np.ndarray) -> np.ndarray:
        """Candidate indices of the distractors, ``(B, n_distractors)`` int64."""
        c = self.correct_index(pairs)
        k = np.arange(1, self.n_distractors // 10 + 1)
        first = (c[:, None] // 10 + k[None, :]) % 10                       # (B, n_d/10)
        return (first[:, :, None] * 10 + np.arange(10)[None, None, :]).reshape(len(c), -1)

    def distribution(self, pairs: np.ndarray) -> np.ndarray:
        """Exact answer probabilities ``pi_data(candidate | a+b=)``, ``(B, 100)`` float64 (rows sum to 1)."""
        p = np.asarray(pairs)
        out = np.zeros((len(p), 100))
        rows = np.arange(len(p))
        out[rows[:, None], self.distractor_indices(p)] = self.distractor_mass
        out[rows, self.correct_index(p)] = self.p_correct
        return out

    def log_distribution(self, pairs: np.ndarray) -> np.ndarray:
        """``log`` of :meth:`distribution` (``-inf`` where the probability is 0), ``(B, 100)``."""
        with np.errstate(divide="ignore"):
            return np.log(self.distribution(pairs))

    def sample_answers(self, pairs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One answer per prompt from the data distribution, ``(B,)`` int64 candidate indices."""
        p = np.asarray(pairs)
        n = len(p)
        correct = rng.random(n) < self.p_correct
        which = rng.integers(0, self.n_distractors, n)
        dis = self.distractor_indices(p)[np.arange(n), which]
        return np.where(correct, self.correct_index(p), dis)

    def tilted_optimum_correct(self, beta: float) -> float:
        """``pi*_beta(c | x)`` for the data distribution: ``p_c^(1+1/b) / (p_c^(1+1/b) + n_d q^(1+1/b))``
        with ``q`` one distractor's mass (spec §4.2 item 3: 0.8163 / 0.9674 / 0.9992 at beta 1 / .5 / .25)."""
        if not (math.isfinite(beta) and beta > 0):
            raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
        e = 1.0 + 1.0 / beta
        num = self.p_correct ** e
        return num / (num + self.n_distractors * self.distractor_mass ** e)

    # ----- text -----
    def strings(self, pairs: np.ndarray, answers: np.ndarray) -> list[str]:
        """Training strings ``"a+b=cd"`` (EOS is appended by the tokenisation step)."""
        return [f"{a}+{b}={CANDIDATES[y]}" for (a, b), y in zip(np.asarray(pairs), np.asarray(answers))]

    @staticmethod
    def extract_answer(text: str) -> int | None:
        """The answer a response spells: its leading two digits as an int, else ``None``."""
        m = re.match(r"^\s*(\d\d)(?!\d)", text)
        return int(m.group(1)) if m else None
