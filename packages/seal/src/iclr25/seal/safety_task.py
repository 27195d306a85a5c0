"""The data of one CPU-scale safety task (:class:`SafetyTask`), its prompt template and the data mirror's
files (spec §4.1-4.2). Every D_ft sample carries its label (``benign_a``, ``benign_b`` / ``benign``,
``unsafe``, ``low_quality``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iclr25.core.data import DatasetSpec, RemoteFile

from .data import PairSet

__all__ = ["SafetyTask", "SEAL_DATA", "TINY_TEMPLATE", "SPECIAL_TOKENS", "ev_b_texts"]

TINY_TEMPLATE = "human {} assistant"
"""Prompt template of the tiny model: ``<bos> human <prompt> assistant <response> <eos>`` (spec §4.1)."""
SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>")

SEAL_DATA = DatasetSpec(
    "seal",
    files=(
        RemoteFile("safety_only_data_Instructions.json",
                   url="https://github.com/hanshen95/SEAL/blob/1538e62379b715c71726ebe777a860b2ee46b4e5/examples/"
                       "scripts/datasets/SafeInstr/safety_only_data_Instructions.json",
                   sha256="7dde08acf87f10cf74fd1b76f56538eae8e413ae8e6b09e3f7bcd97769058dbe", direct=False),
        RemoteFile("gsm8k_train_first3000.jsonl",
                   url="https://github.com/openai/grade-school-math (grade_school_math/data/train.jsonl, first 3000 "
                       "lines)",
                   sha256="3a9ec12b5270734ae6ec65995b0c27b651517d71e78c1e895d6b5bc28f8eae66", direct=False),
    ),
    description="SafeInstr safety examples (2,483 harmful instructions with safe answers) and 3,000 GSM8K questions.",
)

@dataclass
class SafetyTask:
    """Data of one CPU-scale safety task.

    Attributes:
        name: ``"synthetic"`` or ``"real"``.
        template: prompt template (``TINY_TEMPLATE``).
        base: the aligned base model's training pairs (benign + harmful→refusal).
        safe: D_safe (harmful→refusal).
        ft: D_ft, with ``labels`` ∈ {benign_a, benign_b | benign, unsafe, low_quality}.
        safeinstr: the SafeInstr analogue mixed into SFT (= D_safe at CPU scale, spec §4.3).
        evals: ``{"benign_a"|"benign_b"|"benign": {"prompts", "references"}, "harmful": {"prompts",
            "refusals", "compliances", "terms"}}``.
        refusal_prefixes, compliance_markers: for the refusal rate and the programmatic judge.
        max_len: tokens per sample (the tiny model's ``n_positions``).
        vocab_texts: texts the word tokenizer is built from.
        info: counts and hashes (never texts) for the record.
    """

    name: str
    template: str
    base: PairSet
    safe: PairSet
    ft: PairSet
    safeinstr: PairSet
    evals: dict[str, dict[str, list[Any]]]
    refusal_prefixes: tuple[str, ...]
    compliance_markers: tuple[str, ...]
    max_len: int
    vocab_texts: list[str] = field(default_factory=list)
    vocab_size: int = 5000
    info: dict[str, Any] = field(default_factory=dict)

    def labels(self) -> list[str]:
        return [str(x) for x in self.ft.labels]


def ev_b_texts(evals: dict[str, dict[str, list[Any]]]) -> list[str]:
    out: list[str] = []
    for d in evals.values():
        out += [str(x) for x in d.get("prompts", [])] + [str(x) for x in d.get("references", [])]
    return out
