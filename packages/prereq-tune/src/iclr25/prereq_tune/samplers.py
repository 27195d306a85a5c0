"""Samplers: shuffled, sharded epochs over rows or subjects (:class:`_Order`, JSON-able state for ``--resume``), and
the skill stage's plan (fictitious subjects by version, real rows, adapter groups, versions parsed from names)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data import SkillExample
from .groups import adapter_groups
from .lora import adapter_names

__all__: list[str] = []


class _Order:
    """Shuffled epochs over ``n`` items, sharded over processes; state is JSON-able."""

    def __init__(self, n: int, batch: int, seed: int, rank: int = 0, world: int = 1) -> None:
        self.n, self.batch, self.rank, self.world = n, batch, rank, world
        self.rng = np.random.default_rng([seed, 1])
        self.epoch, self.pos = 0, 0
        self._perm = self._new()

    def _new(self) -> np.ndarray:
        return self.rng.permutation(self.n)[self.rank::self.world]

    @property
    def completed(self) -> int:
        """Epochs completed so far."""
        return self.epoch + (1 if self.pos >= len(self._perm) else 0)

    @property
    def per_epoch(self) -> int:
        return max(1, math.ceil(math.ceil(self.n / self.world) / self.batch))

    def next(self) -> np.ndarray:
        if self.pos >= len(self._perm):
            self.epoch += 1
            self.pos = 0
            self._perm = self._new()
        idx = self._perm[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return idx

    def state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "epoch": self.epoch, "pos": self.pos,
                "perm": self._perm.tolist()}

    def load(self, s: dict[str, Any]) -> None:
        self.rng.bit_generator.state = s["rng"]
        self.epoch, self.pos = int(s["epoch"]), int(s["pos"])
        self._perm = np.asarray(s["perm"], dtype=np.int64)


@dataclass
class _SkillPlan:
    fake_subjects: list[dict[int, int]]      # subject -> {version: row}
    fake_rows: list[int]                     # single-version / non-multi: every fake row
    real_rows: list[int]
    groups: tuple[list[str], list[str]]
    real_groups: tuple[list[str], list[str]]
    versions: dict[str, int]


def _plan(examples: Sequence[SkillExample], knowledge: Sequence[str], real_knowledge: Sequence[str] | None,
          multi_version: bool, alternate: bool, model: Any) -> _SkillPlan:
    knowledge = list(knowledge)
    for k in knowledge:
        if k not in adapter_names(model):
            raise ValueError(f"knowledge adapter {k!r} is not loaded in the model (it has {adapter_names(model)})")
    if len(set(knowledge)) != len(knowledge):
        raise ValueError(f"knowledge adapters listed twice: {knowledge}")
    mixed = any(not e.fake for e in examples)
    real_set: set[str] = set()
    if mixed and knowledge:
        real_set = set(real_knowledge) if real_knowledge is not None else {k for k in knowledge if "fake" not in k}
        if not real_set:
            raise ValueError("mixed mode (rows with fake=false) needs a real knowledge adapter: pass real_knowledge "
                             "(--real-knowledge NAME) or name it without 'fake'")
        missing = real_set - set(knowledge)
        if missing:
            raise ValueError(f"real knowledge adapter(s) {sorted(missing)} are not in the knowledge list {knowledge}")
    elif real_knowledge:
        real_set = set(real_knowledge)
    fake_names = [k for k in knowledge if k not in real_set]
    g1, g2 = adapter_groups(knowledge, alternate) if knowledge else ([], [])
    groups = ([k for k in g1 if k in fake_names], [k for k in g2 if k in fake_names])
    real_groups = ([k for k in g1 if k in real_set], [k for k in g2 if k in real_set])
    if knowledge and not fake_names and any(e.fake for e in examples):
        raise ValueError(f"fictitious rows need a fictitious knowledge adapter; {knowledge} are all real adapters")
    if knowledge and fake_names and (not groups[0] or not groups[1]):
        raise ValueError(f"alternate_groups: each half of {knowledge} needs a fictitious knowledge adapter; "
                         f"halves {g1} | {g2}")
    if mixed and knowledge and (not real_groups[0] or not real_groups[1]):
        raise ValueError(f"alternate_groups: each half of {knowledge} needs a real knowledge adapter in mixed mode; "
                         f"halves {g1} | {g2}")
    versions: dict[str, int] = {}
    fake_idx = [i for i, e in enumerate(examples) if e.fake]
    subjects: list[dict[int, int]] = []
    if knowledge and multi_version:
        from .data import parse_version

        versions = {k: parse_version(k) for k in fake_names}
        have = set(versions.values())
        row_versions = {examples[i].version for i in fake_idx}
        lacking = sorted(row_versions - have)
        if lacking:
            v = lacking[0]
            q = next(examples[i].question for i in fake_idx if examples[i].version == v)
            raise ValueError(f"skill row version {v} (e.g. question {q!r}) has no knowledge adapter; knowledge "
                             f"adapters cover versions {sorted(have)} ({versions})")
        for gi, g in enumerate(groups):
            gv = {versions[k] for k in g}
            if row_versions - gv:
                raise ValueError(f"alternate_groups: group {gi + 1} {g} lacks version(s) {sorted(row_versions - gv)}")
        unused = sorted(have - row_versions)
        if unused:
            raise ValueError(f"knowledge adapter version(s) {unused} have no skill rows; drop those adapters or add "
                             "rows of those versions")
        by_q: dict[str, dict[int, int]] = {}
        for i in fake_idx:
            e = examples[i]
            d = by_q.setdefault(e.question.strip(), {})
            if e.version in d:
                raise ValueError(f"question {e.question!r} has two rows of version {e.version}")
            d[e.version] = i
        all_v = sorted(row_versions)
        for q, d in by_q.items():
            if sorted(d) != all_v:
                raise ValueError(f"multi-version mode: fictitious subject {q!r} has versions {sorted(d)} but the data "
                                 f"has {all_v}; every fictitious subject needs a row of every version (or train "
                                 "without --multi-version)")
        subjects = list(by_q.values())
    return _SkillPlan(subjects, fake_idx, [i for i, e in enumerate(examples) if not e.fake], groups, real_groups, versions)
