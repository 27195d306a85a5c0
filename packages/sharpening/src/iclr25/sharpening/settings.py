"""Sizes of the CPU reproduction (:class:`ReproSettings`) and their JSON form for the runner's jobs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .base import TrapBaseConfig

__all__ = ["ReproSettings", "BASE_SOURCES"]

#: where the reproduction's ``p_c = 0.4`` bases come from
BASE_SOURCES = ("shipped", "train")

#: the full preset's base recipe (README deviation 10): fresh strings every step until the exact validation
#: KL(p_data || pi_base) <= 0.05 nats, checked every 200 steps, cap 12,000 steps, lr held on the units-digit
#: plateau then halved when the KL stalls for 2 checks; AdamW beta2 = 0.98. The quick preset's shipped base was
#: trained with it too (``benchmarks/train_shipped_base.py``).
CONVERGED_RECIPE = TrapBaseConfig(beta2=0.98, stop_kl=0.05, max_steps=12_000, eval_every=200, plateau_patience=2,
                                  lr_hold_fraction=0.5)


@dataclass(frozen=True)
class ReproSettings:
    """Sizes of the reproduction (the packaged presets ``quick`` / ``paper`` mirror them).

    Args:
        seeds: sampling / fine-tuning seeds (full: also the base's pre-training seed).
        base_per_seed: pre-train one base per seed (full) instead of one base for every seed (quick).
        base_source: ``"shipped"``: the converged base inside the wheel (:mod:`.shipped`, quick; seed 2 of the
            full recipe, SHA-256 checked, validation KL measured again); ``"train"``: pre-train with ``base``.
        base: the bases' pre-training config (its ``seed`` is replaced per seed when ``base_per_seed``).
        n_train, n_test: disjoint training / test prompts (spec §4.2: 1,000 / 400; quick 300 / 200).
        bon_ns: inference-time BoN sizes (spec: 1..32; quick 1..16).
        eval_samples: temperature-1 samples per test prompt for the sampling metrics.
        sft_n: BoN draws per training prompt for SFT-Sharpening (spec: 16).
        sft_epochs, sft_lr, sft_batch: SFT fine-tuning (full fine-tune of the tiny model).
        rlhf_betas: Eq. (8) KL coefficients (spec: 1, 0.5, 0.25).
        rlhf_pairs_per_prompt: base pairs drawn per training prompt for Eq. (8) (one pair per prompt left the
            fit sample-limited: gap to the tilted optimum 0.214 at 300 pairs, 0.057 at 4,000).
        rlhf_epochs, rlhf_lr, rlhf_batch: Eq. (8) fine-tuning.
        coverage: run the coverage sweep (full).
        coverage_tasks: ``(p_c, n_distractors)`` of the sweep.
        coverage_draws: draws per prompt for the sweep (the smallest N reaching 90% is read off its prefixes).
        xpo: run XPO vs offline Eq. (8) (full).
        xpo_beta, xpo_alphas, xpo_iterations, xpo_prompts_per_iteration, xpo_steps_per_iteration: XPO;
            ``alpha`` is chosen on validation ``J_beta`` from ``xpo_alphas``.
        offline_pairs: offline Eq. (8) data sizes tried for the sample-count comparison.
        offline_steps: optimiser steps per offline run (the same budget for every size).
        realtext: run the real-text likelihood-lift check (spec §4.3; needs the vbon mirror).
        sweep_warm_start: the sweep / XPO bases at p_c < 0.4 continue pre-training from the seed-0 p_c = 0.4
            base on their own task's strings (README deviation 10).
    """

    seeds: tuple[int, ...] = (0, 1)
    base_per_seed: bool = False
    base_source: str = "shipped"
    base: TrapBaseConfig = field(default_factory=lambda: replace(CONVERGED_RECIPE, seed=2))
    n_train: int = 300
    n_test: int = 200
    bon_ns: tuple[int, ...] = (1, 2, 4, 8, 16)
    eval_samples: int = 4
    sft_n: int = 16
    sft_epochs: int = 4
    sft_lr: float = 1e-3
    sft_batch: int = 32
    rlhf_betas: tuple[float, ...] = (1.0, 0.5, 0.25)
    rlhf_pairs_per_prompt: int = 8
    rlhf_epochs: int = 2
    rlhf_lr: float = 3e-4
    rlhf_batch: int = 32
    coverage: bool = False
    coverage_tasks: tuple[tuple[float, int], ...] = ((0.4, 10), (0.2, 20), (0.1, 40))
    coverage_draws: int = 64
    xpo: bool = False
    xpo_beta: float = 0.25
    xpo_alphas: tuple[float, ...] = (0.0, 0.05, 0.2)
    xpo_iterations: int = 12
    xpo_prompts_per_iteration: int = 16
    xpo_steps_per_iteration: int = 20
    offline_pairs: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
    offline_steps: int = 240
    realtext: bool = False
    sweep_warm_start: bool = False

    def __post_init__(self) -> None:
        if self.base_source not in BASE_SOURCES:
            raise ValueError(f"ReproSettings.base_source must be one of {BASE_SOURCES}, got {self.base_source!r}")
        if self.base_source == "shipped" and self.base_per_seed:
            raise ValueError("ReproSettings: base_source='shipped' is one base; set base_per_seed=False or "
                             "base_source='train'")
        if isinstance(self.rlhf_pairs_per_prompt, bool) or not isinstance(self.rlhf_pairs_per_prompt, int) \
                or self.rlhf_pairs_per_prompt < 1:
            raise ValueError(f"ReproSettings.rlhf_pairs_per_prompt must be an integer >= 1, got "
                             f"{self.rlhf_pairs_per_prompt!r}")
        if not self.seeds:
            raise ValueError("ReproSettings.seeds: give at least one seed")

    @classmethod
    def preset(cls, quick: bool) -> ReproSettings:
        """The quick (shipped converged base, 2 seeds) or full (a base per seed trained to convergence,
        3 seeds end to end, sweep, XPO, real text) preset."""
        if quick:
            return cls()
        return cls(seeds=(0, 1, 2), base_per_seed=True, base_source="train", base=CONVERGED_RECIPE,
                   n_train=1000, n_test=400, bon_ns=(1, 2, 4, 8, 16, 32), coverage=True, xpo=True, realtext=True,
                   sweep_warm_start=True)

    def base_seed(self, seed: int) -> int:
        """The seed of the base a sampling / fine-tuning seed uses."""
        return seed if self.base_per_seed else self.base.seed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tuples as lists), for the runner's job settings."""
        def lists(x):
            if isinstance(x, (list, tuple)):
                return [lists(v) for v in x]
            if isinstance(x, dict):
                return {k: lists(v) for k, v in x.items()}
            return x

        return lists(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReproSettings:
        """The inverse of :meth:`to_dict`."""
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                continue
            v = d[f.name]
            if f.name == "base":
                v = TrapBaseConfig(**v)
            elif f.name == "coverage_tasks":
                v = tuple((float(pc), int(nd)) for pc, nd in v)
            elif isinstance(v, list):
                v = tuple(v)
            kw[f.name] = v
        return cls(**kw)
