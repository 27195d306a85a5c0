"""Samples and preference pairs (CREAM spec §1.3, Algorithm line 7-8).

``y+ = argmax_i r_t(x, y_i)``, ``y- = argmin_i r_t(x, y_i)``, first index on ties; a prompt whose
rewards are all equal (``argmax == argmin``) gives no pair. Each pair carries the consistency weight
``c``: ``1`` for SRLM (no consistency given), the set-level mean for ``mode="avg"``, or the prompt's
own ``C_j`` for ``mode="dyn"`` (a prompt without a ``C_j`` gets the mean). Pairs whose chosen and
rejected texts are identical are dropped and counted, never left as a silent zero gradient.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["Sample", "PreferencePair", "build_pairs", "pair_c_values"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One prompt with its ``N`` sampled responses (a line of ``samples.jsonl``)."""

    id: str
    prompt: str
    responses: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "responses": list(self.responses)}


@dataclass(frozen=True)
class PreferencePair:
    """A self-labelled DPO pair (a line of ``pairs.jsonl``).

    Attributes:
        prompt, chosen, rejected: texts.
        c: consistency weight in ``[0, 1]`` (1 = plain DPO).
        id: the prompt id.
        chosen_index, rejected_index: positions among the prompt's responses (``-1`` if unknown).
        c_avg: the set-level mean C of the file (lets ``dpo --mode avg`` use the same value the
            loop uses); ``None`` when unknown.
    """

    prompt: str
    chosen: str
    rejected: str
    c: float = 1.0
    id: str = ""
    chosen_index: int = -1
    rejected_index: int = -1
    c_avg: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["c_avg"] is None:
            del d["c_avg"]
        return d


def build_pairs(samples: Sequence[Sample], rewards: Mapping[Hashable, Sequence[float]],
                consistency: Mapping[Hashable, float] | None = None,
                mode: Literal["avg", "dyn"] = "dyn", *,
                stats: MutableMapping[str, Any] | None = None) -> list[PreferencePair]:
    """Turn each prompt's reward vector into one (best, worst) pair with its weight ``c``.

    Args:
        samples: the prompts with their responses.
        rewards: ``{id: (N,) rewards}`` of the current iteration, one per response (or the true
            utilities, for oracle-ranked DPO).
        consistency: ``{id: C_j}`` (from :func:`~iclr25.cream.consistency.consistency_rates`);
            ``None`` gives ``c = 1`` for every pair (SRLM).
        mode: ``"avg"``: every pair gets the mean of ``consistency`` (over all prompts that have a
            value); ``"dyn"``: each pair gets its prompt's ``C_j``, the mean when it has none.
        stats: optional dict filled with ``n_prompts``, ``n_pairs``, ``n_tied`` (all rewards
            equal), ``n_identical`` (chosen text == rejected text), ``n_filled`` (dyn: C filled
            with the mean) and ``c_avg``.

    Returns:
        The pairs, in the order of ``samples``.

    Raises:
        ValueError: a sample without rewards (naming the first missing id), a reward vector whose
            length differs from the number of responses, non-finite rewards or consistency values,
            an unknown mode, or an empty ``consistency``.
    """
    if mode not in ("avg", "dyn"):
        raise ValueError(f"mode must be 'avg' or 'dyn', got {mode!r}")
    missing = [s.id for s in samples if s.id not in rewards]
    if missing:
        raise ValueError(f"no rewards for sample id {missing[0]!r} ({len(missing)} of {len(samples)} samples "
                         "lack rewards); the reward file must come from the same samples file")
    c_avg = None
    if consistency is not None:
        vals = np.asarray(list(consistency.values()), dtype=np.float64)
        if len(vals) == 0:
            raise ValueError("consistency is empty; pass None for SRLM (c = 1) or compute it first")
        if not np.all(np.isfinite(vals)) or (vals < 0).any() or (vals > 1).any():
            raise ValueError("consistency values must be finite and in [0, 1]")
        c_avg = float(vals.mean())
    n_tied = n_identical = n_filled = 0
    pairs: list[PreferencePair] = []
    for s in samples:
        r = np.asarray(rewards[s.id], dtype=np.float64)
        if r.shape != (len(s.responses),):
            raise ValueError(f"sample {s.id!r}: {r.size} rewards for {len(s.responses)} responses")
        if not np.all(np.isfinite(r)):
            raise ValueError(f"sample {s.id!r}: non-finite reward {r.tolist()}")
        hi, lo = int(np.argmax(r)), int(np.argmin(r))  # first index on ties
        if hi == lo:
            n_tied += 1
            continue
        if s.responses[hi] == s.responses[lo]:
            n_identical += 1
            continue
        if consistency is None:
            c = 1.0
        elif mode == "avg":
            c = c_avg  # type: ignore[assignment]
        elif s.id in consistency:
            c = float(consistency[s.id])
        else:
            c = c_avg  # type: ignore[assignment]
            n_filled += 1
        pairs.append(PreferencePair(prompt=s.prompt, chosen=s.responses[hi], rejected=s.responses[lo], c=c,
                                    id=s.id, chosen_index=hi, rejected_index=lo, c_avg=c_avg))
    if n_identical:
        log.info("build_pairs: dropped %d pair(s) whose chosen and rejected texts are identical", n_identical)
    if n_tied:
        log.info("build_pairs: dropped %d prompt(s) whose rewards are all equal", n_tied)
    if n_filled:
        log.info("build_pairs: %d prompt(s) had no consistency value; they get the mean %.4f", n_filled, c_avg)
    if stats is not None:
        stats.update(n_prompts=len(samples), n_pairs=len(pairs), n_tied=n_tied, n_identical=n_identical,
                     n_filled=n_filled, c_avg=c_avg)
    return pairs


def pair_c_values(pairs: Sequence[PreferencePair], mode: Literal["avg", "dyn", "srlm"]) -> list[float]:
    """The ``c`` each pair trains with under ``mode`` (what ``dpo --mode`` applies to a pairs file).

    ``"dyn"``: the pair's own ``c``; ``"avg"``: the file's set-level mean (``c_avg`` when the pairs
    carry it, else the mean of their ``c``); ``"srlm"``: 1.

    Raises:
        ValueError: an unknown mode, or no pairs.
    """
    if not pairs:
        raise ValueError("no pairs")
    if mode == "dyn":
        return [p.c for p in pairs]
    if mode == "srlm":
        return [1.0] * len(pairs)
    if mode == "avg":
        avgs = {p.c_avg for p in pairs if p.c_avg is not None}
        if len(avgs) == 1:
            return [avgs.pop()] * len(pairs)
        m = float(np.mean([p.c for p in pairs]))
        return [m] * len(pairs)
    raise ValueError(f"mode must be 'avg', 'dyn' or 'srlm', got {mode!r}")
