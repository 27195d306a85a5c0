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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["empirical_log_cdf", "normalize_prompt", "RewardCDFCache"]

_SMOOTHINGS = ("add_one", "none")


def empirical_log_cdf(sorted_ref_rewards: torch.Tensor, rewards: torch.Tensor,
                      smoothing: str = "add_one") -> torch.Tensor:
    """``log F̂(r)`` from sorted reference rewards (§3.2).

    Args:
        sorted_ref_rewards: ``(M,)`` or ``(B, M)`` float, sorted ascending along the last axis
            (one row of reference rewards per element of ``rewards`` when 2-D).
        rewards: ``(B,)`` float rewards to transform (or a scalar with 1-D references).
        smoothing: ``"add_one"`` (official code) or ``"none"``.

    Returns:
        ``(B,)`` float64 ``log F̂`` in nats.

    Raises:
        ValueError: unknown smoothing, empty references, shape mismatch, NaN rewards.
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
    if ref.dim() == 1:
        less = torch.searchsorted(ref.contiguous(), r, side="left")
    elif ref.dim() == 2:
        if ref.shape[0] != r.shape[0]:
            raise ValueError(f"sorted_ref_rewards has {ref.shape[0]} rows but rewards has {r.shape[0]} entries")
        less = torch.searchsorted(ref.contiguous(), r[:, None], side="left").squeeze(1)
    else:
        raise ValueError(f"sorted_ref_rewards must be (M,) or (B, M), got {tuple(ref.shape)}")
    m = ref.shape[-1]
    less = less.to(torch.float64)
    out = torch.log((1 + less) / (m + 1)) if smoothing == "add_one" else torch.log(less / m)
    return out[0] if scalar else out


def normalize_prompt(prompt: str) -> str:
    """Key used for CDF look-ups: whitespace collapsed and stripped (the official code re-decodes
    prompts before using them as keys; a mismatch there fails silently — here it raises)."""
    return " ".join(prompt.split())


@dataclass
class RewardCDFCache:
    """Per-prompt sorted reference rewards, i.e. the empirical ``F̂(x, .)`` of every training prompt.

    Args:
        prompts: the ``P`` prompt strings (normalised with :func:`normalize_prompt`).
        sorted_rewards: ``(P, M)`` float64, each row sorted ascending.
        smoothing: ``"add_one"`` or ``"none"`` (see :func:`empirical_log_cdf`).

    Raises:
        ValueError: duplicated prompts, shape mismatch, NaN rewards.
    """

    prompts: list[str]
    sorted_rewards: torch.Tensor
    smoothing: str = "add_one"

    def __post_init__(self) -> None:
        self.prompts = [normalize_prompt(p) for p in self.prompts]
        sr = torch.as_tensor(self.sorted_rewards, dtype=torch.float64)
        if sr.dim() != 2 or sr.shape[0] != len(self.prompts) or sr.shape[1] == 0:
            raise ValueError(f"sorted_rewards must be (P={len(self.prompts)}, M>=1), got {tuple(sr.shape)}")
        if torch.isnan(sr).any():
            raise ValueError("reference rewards contain NaN")
        self.sorted_rewards = torch.sort(sr, dim=1).values
        self.index = {p: i for i, p in enumerate(self.prompts)}
        if len(self.index) != len(self.prompts):
            raise ValueError("RewardCDFCache: duplicated prompts; keep one entry per prompt")
        if self.smoothing not in _SMOOTHINGS:
            raise ValueError(f"smoothing must be one of {_SMOOTHINGS}, got {self.smoothing!r}")

    @property
    def m(self) -> int:
        """Number of reference samples per prompt."""
        return int(self.sorted_rewards.shape[1])

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
        return empirical_log_cdf(self.sorted_rewards[self.rows(prompts)], r, self.smoothing)

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
            for pr, row in zip(self.prompts, self.sorted_rewards.tolist()):
                fh.write(json.dumps({"prompt": pr, "rewards": row}) + "\n")
        return p

    @classmethod
    def from_jsonl(cls, path: str | Path, smoothing: str = "add_one", max_m: int | None = None) -> RewardCDFCache:
        """Read a cache from JSONL lines of either official format (or ours):
        ``{"prompt", "reward"}`` (one sample per line, grouped by prompt) or
        ``{"prompt", "rewards": [...]}``. ``max_m`` keeps the first ``max_m`` rewards per prompt
        (the official code caps M at ~300). When prompts have unequal counts, every prompt keeps the
        first ``min`` count (a rectangular cache).

        Raises:
            ValueError: naming the file and line of a malformed record, or unequal M.
        """
        groups: dict[str, list[float]] = {}
        with open(path, encoding="utf-8") as fh:
            for ln, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    key = normalize_prompt(rec["prompt"])
                    vals = rec["rewards"] if "rewards" in rec else [rec["reward"]]
                    vals = [float(v) for v in vals]
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                    raise ValueError(f"{path}:{ln}: expected a JSON object with 'prompt' and 'reward' or "
                                     f"'rewards' ({type(e).__name__}: {e})") from e
                groups.setdefault(key, []).extend(vals)
        if not groups:
            raise ValueError(f"{path}: no records")
        if max_m is not None:
            groups = {k: v[:max_m] for k, v in groups.items()}
        sizes = {len(v) for v in groups.values()}
        if len(sizes) != 1:
            m = min(sizes)
            groups = {k: v[:m] for k, v in groups.items()}
        return cls(list(groups), torch.tensor(list(groups.values()), dtype=torch.float64), smoothing)
