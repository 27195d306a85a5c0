"""File formats (JSONL, one object per line, named fields) and the mirrored GSM8K data.

| file | fields |
| --- | --- |
| SFT seed data | ``prompt``, ``response`` |
| unlabeled pool | ``prompt`` (``id`` optional; default the line number) |
| samples | ``id``, ``prompt``, ``responses`` (a list of N >= 2 non-empty strings) |
| rewards | ``id``, ``rewards`` (a list of N finite numbers) |
| consistency | ``id``, ``c`` |
| pairs | ``prompt``, ``chosen``, ``rejected``, ``c`` in [0, 1] (``id``, ``c_avg`` optional) |
| evaluation | GSM8K ``question``, ``answer``; or multiple choice ``question``, ``choices``, ``answer`` |

Every reader raises ``ValueError`` (``JsonlError``) naming ``FILE:LINE`` and the field for a
malformed line, a missing or empty field, or a value of the wrong kind, and
``FileNotFoundError`` for a missing file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iclr25.core.data import DatasetSpec, RemoteFile
from iclr25.core.jsonl import JsonlError, iter_jsonl

from .pairs import PreferencePair, Sample

__all__ = ["GSM8K", "gsm8k_path", "read_sft_data", "read_prompts", "read_samples", "read_rewards",
           "read_consistency", "read_pairs", "read_eval_data", "check_rewards_match", "EvalItem"]

_SRC = "https://github.com/openai/grade-school-math/tree/3101c7d5072418e28b9008a6636bde82a006892c"
GSM8K = DatasetSpec("cream", files=(
    RemoteFile("gsm8k_test.jsonl", url=f"{_SRC}/grade_school_math/data/test.jsonl",
               sha256="3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", direct=False),
    RemoteFile("gsm8k_train.jsonl", url=f"{_SRC}/grade_school_math/data/train.jsonl",
               sha256="17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465", direct=False),
), description="GSM8K (Cobbe et al. 2021, MIT): test set for evaluate, train questions as a prompt pool")


def gsm8k_path(split: str = "test") -> Path:
    """The mirrored GSM8K file (``$ICLR25_DATA/cream/gsm8k_<split>.jsonl``), checksum-verified.

    Raises:
        DataNotFoundError (a ``FileNotFoundError``): not mirrored; the message says where it was looked for.
    """
    if split not in ("test", "train"):
        raise ValueError(f"split must be 'test' or 'train', got {split!r}")
    return GSM8K.path(f"gsm8k_{split}.jsonl")


def _str_list(v: Any, where: str, name: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise JsonlError(f"{where}: field {name!r} must be a list of strings")
    return v


def read_sft_data(path: str | Path) -> list[tuple[str, str]]:
    """SFT seed data: ``[(prompt, response)]``. Empty prompts or responses are errors."""
    out = []
    for i, r in iter_jsonl(path, required=("prompt", "response"), nonempty=("prompt", "response")):
        if not isinstance(r["prompt"], str) or not isinstance(r["response"], str):
            raise JsonlError(f"{path}:{i}: prompt and response must be strings")
        out.append((r["prompt"], r["response"]))
    if not out:
        raise ValueError(f"{path}: no SFT examples")
    return out


def read_prompts(path: str | Path, *, limit: int | None = None) -> list[tuple[str, str]]:
    """Unlabeled pool: ``[(id, prompt)]``; ``id`` defaults to the line number. Also accepts a
    GSM8K-style ``question`` field when there is no ``prompt``.

    Raises:
        JsonlError: an empty prompt, a duplicated id.
    """
    out, seen = [], set()
    for i, r in iter_jsonl(path):
        key = "prompt" if "prompt" in r else "question" if "question" in r else None
        if key is None:
            raise JsonlError(f"{path}:{i}: missing field 'prompt'")
        p = r[key]
        if not isinstance(p, str) or not p.strip():
            raise JsonlError(f"{path}:{i}: field {key!r} is empty")
        pid = str(r.get("id", i))
        if pid in seen:
            raise JsonlError(f"{path}:{i}: duplicate id {pid!r}")
        seen.add(pid)
        out.append((pid, p))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise ValueError(f"{path}: no prompts")
    return out


def read_samples(path: str | Path) -> list[Sample]:
    """Samples file: ``id``, ``prompt``, ``responses`` (at least 2 non-empty strings).

    Raises:
        JsonlError: a missing field, an empty prompt or response (naming its index), fewer than two
            responses, a duplicated id.
    """
    out, seen = [], set()
    for i, r in iter_jsonl(path, required=("id", "prompt", "responses"), nonempty=("prompt",)):
        where = f"{path}:{i}"
        rs = _str_list(r["responses"], where, "responses")
        if len(rs) < 2:
            raise JsonlError(f"{where}: {len(rs)} response(s); a sample needs at least 2 responses to form a pair")
        for k, x in enumerate(rs):
            if not x.strip():
                raise JsonlError(f"{where}: response {k} is empty")
        pid = str(r["id"])
        if pid in seen:
            raise JsonlError(f"{where}: duplicate id {pid!r}")
        seen.add(pid)
        out.append(Sample(pid, r["prompt"], tuple(rs)))
    if not out:
        raise ValueError(f"{path}: no samples")
    return out


def read_rewards(path: str | Path) -> dict[str, list[float]]:
    """Rewards file: ``{id: [rewards]}``.

    Raises:
        JsonlError: a missing field, a non-numeric or non-finite reward, a duplicated id.
    """
    out: dict[str, list[float]] = {}
    for i, r in iter_jsonl(path, required=("id", "rewards")):
        where = f"{path}:{i}"
        v = r["rewards"]
        if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       and math.isfinite(x) for x in v):
            raise JsonlError(f"{where}: field 'rewards' must be a non-empty list of finite numbers")
        pid = str(r["id"])
        if pid in out:
            raise JsonlError(f"{where}: duplicate id {pid!r}")
        out[pid] = [float(x) for x in v]
    if not out:
        raise ValueError(f"{path}: no rewards")
    return out


def check_rewards_match(samples: Sequence[Sample], rewards: Mapping[str, Sequence[float]], name: str) -> None:
    """Raise ``ValueError`` unless ``rewards`` has exactly one vector per sample id, of the right length.

    The message names the first sample id without rewards (or the first extra id, or the first
    length mismatch) and the file ``name``.
    """
    ids = [s.id for s in samples]
    missing = [i for i in ids if i not in rewards]
    if missing:
        raise ValueError(f"{name}: no rewards for sample id {missing[0]!r} ({len(missing)} of {len(ids)} sample ids "
                         "missing); score the same samples file")
    extra = [k for k in rewards if k not in set(ids)]
    if extra:
        raise ValueError(f"{name}: id {extra[0]!r} is not in the samples file ({len(extra)} extra ids)")
    for s in samples:
        if len(rewards[s.id]) != len(s.responses):
            raise ValueError(f"{name}: id {s.id!r} has {len(rewards[s.id])} rewards for {len(s.responses)} responses")


def read_consistency(path: str | Path) -> dict[str, float]:
    """Consistency file: ``{id: c}`` with ``c`` in ``[0, 1]``."""
    out = {}
    for i, r in iter_jsonl(path, required=("id", "c")):
        c = r["c"]
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not 0 <= c <= 1:
            raise JsonlError(f"{path}:{i}: field 'c'={c!r} must be a number in [0, 1]")
        out[str(r["id"])] = float(c)
    return out


def read_pairs(path: str | Path) -> list[PreferencePair]:
    """Pairs file: ``prompt``, ``chosen``, ``rejected``, ``c`` (``id``, ``c_avg`` optional).

    Raises:
        JsonlError: a missing or empty field, ``c`` (or ``c_avg``) outside ``[0, 1]``.
    """
    out = []
    for i, r in iter_jsonl(path, required=("prompt", "chosen", "rejected", "c"),
                           nonempty=("prompt", "chosen", "rejected")):
        where = f"{path}:{i}"
        for k in ("c", "c_avg"):
            if k not in r or (k == "c_avg" and r[k] is None):
                continue
            c = r[k]
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not 0 <= c <= 1:
                raise JsonlError(f"{where}: field {k!r}={c!r} must be a number in [0, 1]")
        out.append(PreferencePair(prompt=r["prompt"], chosen=r["chosen"], rejected=r["rejected"], c=float(r["c"]),
                                  id=str(r.get("id", i)), chosen_index=int(r.get("chosen_index", -1)),
                                  rejected_index=int(r.get("rejected_index", -1)),
                                  c_avg=float(r["c_avg"]) if r.get("c_avg") is not None else None))
    if not out:
        raise ValueError(f"{path}: no pairs")
    return out


class EvalItem:
    """One evaluation question: ``question``, the reference ``answer`` (a number for GSM8K, a
    letter for multiple choice) and the ``choices`` (multiple choice)."""

    __slots__ = ("question", "answer", "choices")

    def __init__(self, question: str, answer: str, choices: list[str] | None = None) -> None:
        self.question, self.answer, self.choices = question, answer, choices


def read_eval_data(path: str | Path, task: str, *, limit: int | None = None) -> list[EvalItem]:
    """Evaluation data.

    ``task="gsm8k"``: ``question``, ``answer`` (the reference's number is taken after ``####``, else
    the last number). ``task="choice"``: ``question``, ``choices`` (list of strings), ``answer`` (a
    letter, or a 0-based index).

    Raises:
        JsonlError: missing/empty fields, a reference with no number, an answer outside the choices.
    """
    from .parsers import extract_gsm8k_answer

    if task not in ("gsm8k", "choice"):
        raise ValueError(f"task must be 'gsm8k' or 'choice', got {task!r}")
    out = []
    req = ("question", "answer") if task == "gsm8k" else ("question", "choices", "answer")
    for i, r in iter_jsonl(path, required=req, nonempty=("question",)):
        where = f"{path}:{i}"
        if task == "gsm8k":
            ans = extract_gsm8k_answer(str(r["answer"]))
            if ans is None:
                raise JsonlError(f"{where}: the reference answer holds no number")
            out.append(EvalItem(r["question"], ans))
        else:
            ch = _str_list(r["choices"], where, "choices")
            if len(ch) < 2:
                raise JsonlError(f"{where}: 'choices' needs at least 2 options")
            a = r["answer"]
            letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:len(ch)]
            if isinstance(a, int) and not isinstance(a, bool) and 0 <= a < len(ch):
                a = letters[a]
            if not isinstance(a, str) or a.strip().upper() not in letters:
                raise JsonlError(f"{where}: 'answer'={r['answer']!r} is not one of {list(letters)} (or an index)")
            out.append(EvalItem(r["question"], a.strip().upper(), ch))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise ValueError(f"{path}: no evaluation items")
    return out
