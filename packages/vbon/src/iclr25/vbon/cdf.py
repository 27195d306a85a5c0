"""The empirical reward CDF ``F̂`` estimated from reference samples (paper §3.2, official code).

For each prompt ``x`` we draw ``M`` responses from ``pi_ref(.|x)``, score them, and keep the sorted
rewards. ``F(x, y) = P[r(x, y') < r(x, y)]`` is then estimated by

* ``smoothing="add_one"`` (official ``load_bon_dict``): ``F̂ = (1 + #{m: r_m < r}) / (M + 1)``,
  in ``[1/(M+1), 1]``, so ``log F̂`` is never ``-inf``;
* ``smoothing="none"``: ``F̂ = #{m: r_m < r} / M`` (``log 0 = -inf``).

Ties count as "not less" (``searchsorted(side="left")``), as in the official code.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["empirical_log_cdf", "normalize_prompt", "RewardCDFCache"]

log = logging.getLogger(__name__)

_SMOOTHINGS = ("add_one", "none")


def empirical_log_cdf(sorted_ref_rewards: torch.Tensor, rewards: torch.Tensor,
                      smoothing: str = "add_one", counts: torch.Tensor | None = None) -> torch.Tensor:
    """``log F̂(r)`` from sorted reference rewards (§3.2).

    Args:
        sorted_ref_rewards: ``(M,)`` or ``(B, M)`` float, sorted ascending along the last axis
            (one row of reference rewards per element of ``rewards`` when 2-D). Ragged rows are padded
            at the end with ``+inf`` (never "less" than a finite reward) and give their sizes in ``counts``.
        rewards: ``(B,)`` float rewards to transform (or a scalar with 1-D references).
        smoothing: ``"add_one"`` (official code) or ``"none"``.
        counts: optional ``(B,)`` long, the number of real references in each row (``1 <= M_b <= M``);
            default: every row has ``M``.

    Returns:
        ``(B,)`` float64 ``log F̂`` in nats.

    Raises:
        ValueError: unknown smoothing, empty references, references not sorted ascending, shape
            mismatch, NaN or infinite rewards.
    """
    if smoothing not in _SMOOTHINGS:
        raise ValueError(f"smoothing must be one of {_SMOOTHINGS}, got {smoothing!r}")
    ref = torch.as_tensor(sorted_ref_rewards, dtype=torch.float64)
    r = torch.as_tensor(rewards, dtype=torch.float64)
    scalar = r.dim() == 0
    r = r.reshape(-1)
    if ref.shape[-1] == 0:
        raise ValueError("empirical_log_cdf needs at least one reference reward (M >= 1)")
    if torch.isnan(r).any() or torch.isnan(ref).any():
        raise ValueError("rewards contain NaN; check the reward function")
    if torch.isinf(r).any():
        raise ValueError("rewards contain inf; check the reward function")
    if ref.dim() in (1, 2) and (ref[..., 1:] < ref[..., :-1]).any():
        raise ValueError("sorted_ref_rewards must be sorted ascending along the last axis "
                         "(searchsorted on unsorted references gives a wrong F); pass torch.sort(ref).values")
    if ref.dim() == 1:
        less = torch.searchsorted(ref.contiguous(), r, side="left")
    elif ref.dim() == 2:
        if ref.shape[0] != r.shape[0]:
            raise ValueError(f"sorted_ref_rewards has {ref.shape[0]} rows but rewards has {r.shape[0]} entries")
        less = torch.searchsorted(ref.contiguous(), r[:, None], side="left").squeeze(1)
    else:
        raise ValueError(f"sorted_ref_rewards must be (M,) or (B, M), got {tuple(ref.shape)}")
    if counts is None:
        m = torch.tensor(float(ref.shape[-1]), dtype=torch.float64)
    else:
        m = torch.as_tensor(counts, dtype=torch.float64).reshape(-1)
        if m.shape != r.shape or (m < 1).any() or (m > ref.shape[-1]).any():
            raise ValueError(f"counts must be ({r.numel()},) with 1 <= M_b <= {ref.shape[-1]}, got {m.tolist()}")
        m = m.to(ref.device)
    less = less.to(torch.float64)
    out = torch.log((1 + less) / (m + 1)) if smoothing == "add_one" else torch.log(less / m)
    return out[0] if scalar else out


def _cap(groups: dict[str, list[float]], max_m: int) -> tuple[dict[str, list[float]], int]:
    """At most ``max_m`` rewards per prompt, and how many prompts were cut. A list in sampling order keeps its
    first ``max_m`` (the official cap); a list sorted ascending (our ``to_jsonl``) keeps ``max_m`` evenly spaced
    order statistics, since its first ``max_m`` are the lowest rewards, which would bias ``F-hat`` up."""
    out, cut = {}, 0
    for k, v in groups.items():
        if len(v) > max_m:
            cut += 1
            if all(a <= b for a, b in zip(v, v[1:])):
                v = [v[int((i + 0.5) * len(v) / max_m)] for i in range(max_m)]
            else:
                v = v[:max_m]
        out[k] = v
    return out, cut


def normalize_prompt(prompt: str) -> str:
    """Key used for CDF look-ups: whitespace collapsed and stripped (the official code re-decodes
    prompts before using them as keys; a mismatch there fails silently — here it raises)."""
    return " ".join(prompt.split())


@dataclass
class RewardCDFCache:
    """Per-prompt sorted reference rewards, i.e. the empirical ``F̂(x, .)`` of every training prompt.

    Args:
        prompts: the ``P`` prompt strings (normalised with :func:`normalize_prompt`).
        sorted_rewards: ``(P, M)`` float64, each row sorted ascending. A ragged cache (prompts with
            different sample counts ``M_p``) pads each row at the end with ``+inf``.
        smoothing: ``"add_one"`` or ``"none"`` (see :func:`empirical_log_cdf`).
        counts: ``(P,)`` long, the real samples ``M_p`` of each row; default: all ``M`` (no padding).

    Raises:
        ValueError: duplicated prompts, shape mismatch, NaN rewards, infinite rewards outside the padding.
    """

    prompts: list[str]
    sorted_rewards: torch.Tensor
    smoothing: str = "add_one"
    counts: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.prompts = [normalize_prompt(p) for p in self.prompts]
        sr = torch.as_tensor(self.sorted_rewards, dtype=torch.float64)
        if sr.dim() != 2 or sr.shape[0] != len(self.prompts) or sr.shape[1] == 0:
            raise ValueError(f"sorted_rewards must be (P={len(self.prompts)}, M>=1), got {tuple(sr.shape)}")
        if torch.isnan(sr).any():
            raise ValueError("reference rewards contain NaN")
        if self.counts is None:
            self.counts = torch.full((sr.shape[0],), sr.shape[1], dtype=torch.long)
        self.counts = torch.as_tensor(self.counts, dtype=torch.long).reshape(-1)
        if self.counts.shape[0] != sr.shape[0] or (self.counts < 1).any() or (self.counts > sr.shape[1]).any():
            raise ValueError(f"counts must be (P={sr.shape[0]},) with 1 <= M_p <= {sr.shape[1]}")
        pad = torch.arange(sr.shape[1])[None, :] >= self.counts[:, None]
        if torch.isinf(sr[~pad]).any():
            raise ValueError("reference rewards contain inf; check the reward function")
        sr = sr.masked_fill(pad, float("inf"))
        self.sorted_rewards = torch.sort(sr, dim=1).values
        self.index = {p: i for i, p in enumerate(self.prompts)}
        if len(self.index) != len(self.prompts):
            raise ValueError("RewardCDFCache: duplicated prompts; keep one entry per prompt")
        if self.smoothing not in _SMOOTHINGS:
            raise ValueError(f"smoothing must be one of {_SMOOTHINGS}, got {self.smoothing!r}")

    @property
    def m(self) -> int:
        """Number of reference samples per prompt (the largest ``M_p`` of a ragged cache)."""
        return int(self.sorted_rewards.shape[1])

    @property
    def ragged(self) -> bool:
        """Whether prompts have different sample counts ``M_p``."""
        return bool((self.counts != self.sorted_rewards.shape[1]).any())

    def rows(self, prompts: Sequence[str]) -> torch.Tensor:
        """Row indices of ``prompts``. Raises ``KeyError`` naming the first unknown prompt."""
        idx = []
        for p in prompts:
            k = normalize_prompt(p)
            if k not in self.index:
                raise KeyError(f"prompt {p!r} is not in the reward-CDF cache ({len(self.prompts)} prompts); "
                               "build the cache on the training prompts (RewardCDFCache.build)")
            idx.append(self.index[k])
        return torch.tensor(idx, dtype=torch.long)

    def log_cdf(self, prompts: Sequence[str], rewards) -> torch.Tensor:
        """``log F̂(x_b, r_b)`` for each ``(prompt, reward)`` pair: ``(B,)`` float64."""
        r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
        if r.numel() != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {r.numel()} rewards")
        rows = self.rows(prompts)
        return empirical_log_cdf(self.sorted_rewards[rows], r, self.smoothing, self.counts[rows])

    @classmethod
    def from_samples(cls, prompts: Sequence[str], rewards, smoothing: str = "add_one") -> RewardCDFCache:
        """From ``(P, M)`` rewards of ``M`` reference samples for each of ``P`` prompts."""
        return cls(list(prompts), torch.as_tensor(rewards, dtype=torch.float64), smoothing)

    @classmethod
    def build(cls, sample_fn: Callable[[Sequence[str], int], list[list[str]]],
              reward_fn: Callable[[Sequence[str], Sequence[str]], object], prompts: Sequence[str], m: int,
              smoothing: str = "add_one") -> RewardCDFCache:
        """Draw ``m`` reference samples per prompt with ``sample_fn(prompts, m) -> [P][m] texts``, score
        them with ``reward_fn(prompts, texts) -> (P*m,)`` and keep the sorted rewards.

        Raises:
            ValueError: empty prompt set, ``m < 1``.
        """
        from .rewards import call_reward

        prompts = list(prompts)
        if not prompts:
            raise ValueError("RewardCDFCache.build: the prompt set is empty")
        if m < 1:
            raise ValueError(f"m (reference samples per prompt) must be >= 1, got {m}")
        texts = sample_fn(prompts, m)
        flat_p = [p for p in prompts for _ in range(m)]
        flat_t = [t for row in texts for t in row]
        r = call_reward(reward_fn, flat_p, flat_t)
        return cls(prompts, r.reshape(len(prompts), m), smoothing)

    # ---- persistence (the official sentiment format: one {"prompt","text","reward"} per line, or the
    # ---- summarisation format {"prompt","responses","rewards"}) --------------------------------------
    def to_jsonl(self, path: str | Path) -> Path:
        """Write one ``{"prompt", "rewards"}`` line per prompt (sorted rewards)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8") as fh:
            for pr, row, c in zip(self.prompts, self.sorted_rewards.tolist(), self.counts.tolist()):
                fh.write(json.dumps({"prompt": pr, "rewards": row[:c]}) + "\n")
        return p

    @classmethod
    def from_jsonl(cls, path: str | Path, smoothing: str = "add_one", max_m: int | None = None,
                   ragged: bool = False) -> RewardCDFCache:
        """Read a cache from JSONL lines of either official format (or ours):
        ``{"prompt", "reward"}`` (one sample per line, grouped by prompt) or
        ``{"prompt", "rewards": [...]}``. ``max_m`` keeps at most ``max_m`` rewards per prompt, with a warning
        (the official code caps M at ~300): the first ``max_m`` of a list in sampling order, ``max_m`` evenly
        spaced order statistics of a list sorted ascending (as :meth:`to_jsonl` writes; its first ``max_m``
        would be the lowest rewards).

        Prompts with unequal sample counts are never cut to a common size: with ``ragged=False``
        (default) they raise, naming the prompt with the fewest samples and its count; with
        ``ragged=True`` each prompt keeps its own ``M_p`` (``F̂`` of prompt ``p`` uses its ``M_p``).

        Raises:
            ValueError: naming the file and line of a malformed record (or a non-finite reward), or
                unequal per-prompt counts when ``ragged=False``.
        """
        from iclr25.core.jsonl import read_jsonl

        if max_m is not None and max_m < 1:
            raise ValueError(f"max_m must be >= 1, got {max_m}")
        groups: dict[str, list[float]] = {}
        for ln, rec in enumerate(read_jsonl(path, required=("prompt",)), 1):
            try:
                key = normalize_prompt(rec["prompt"])
                vals = rec["rewards"] if "rewards" in rec else [rec["reward"]]
                vals = [float(v) for v in vals]
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"{path}: record {ln}: expected a JSON object with 'prompt' and 'reward' or "
                                 f"'rewards' ({type(e).__name__}: {e})") from e
            if not all(math.isfinite(v) for v in vals):
                raise ValueError(f"{path}: record {ln}: non-finite reward for prompt {key!r}")
            groups.setdefault(key, []).extend(vals)
        if not groups:
            raise ValueError(f"{path}: no records")
        if max_m is not None:
            groups, thinned = _cap(groups, max_m)
            if thinned:
                log.warning("%s: %d prompt(s) have more than max_m=%d reference rewards (--vbon.m); using %d of them "
                            "(sorted lists: evenly spaced order statistics, not the lowest %d; lists in sampling "
                            "order: the first %d). Pass a larger --vbon.m to use them all", path, thinned, max_m,
                            max_m, max_m, max_m)
        sizes = {k: len(v) for k, v in groups.items()}
        lo, hi = min(sizes, key=sizes.get), max(sizes.values())
        if sizes[lo] == 0:
            raise ValueError(f"{path}: prompt {lo!r} has no rewards")
        if sizes[lo] != hi and not ragged:
            raise ValueError(f"{path}: prompts have unequal reference-sample counts (M from {sizes[lo]} to {hi}); "
                             f"prompt {lo!r} has {sizes[lo]} sample(s). Pass ragged=True (CLI --ragged-cdf) to "
                             f"keep each prompt's own M, or max_m={sizes[lo]} to use {sizes[lo]} for all")
        counts = torch.tensor(list(sizes.values()), dtype=torch.long)
        table = torch.full((len(groups), hi), float("inf"), dtype=torch.float64)
        for i, v in enumerate(groups.values()):
            table[i, :len(v)] = torch.tensor(v, dtype=torch.float64)
        return cls(list(groups), table, smoothing, counts)
