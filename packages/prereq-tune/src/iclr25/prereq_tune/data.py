"""Rows, file formats and tokenisation (own data, and the official hub data from a local copy).

Records:

* :class:`SkillExample` — one task row: ``question``, ``answer``, ``version`` (the knowledge
  version its answer follows) and ``fake`` (fictitious, the default, or real; mixed mode).
* :class:`QAItem` — one evaluation question with its gold answer aliases.
* :class:`PromptFormat` — how a question/answer pair becomes text (the official
  ``Question: {question}\\nAnswer: {answer}`` by default).

JSONL formats (one JSON object per line; errors name ``FILE:LINE`` and the field):

* knowledge: ``{"text": ..., "name": "know_v1"}`` or ``{"text": ..., "version": 1}``;
* skill: ``{"question": ..., "answer": ..., "version": 1, "fake": true}`` (``fake`` optional);
* QA evaluation: ``{"question": ..., "answers": ["alias", ...]}``.

:func:`encode_completions` builds completion-only labels (spec §1.3 stage 2, §6.4): the loss is on
the answer tokens and EOS only; labels come from token *lengths*, never from comparing ids with
the pad id, so EOS survives even when ``pad == eos``.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PromptFormat",
    "OFFICIAL_FORMAT",
    "SkillExample",
    "QAItem",
    "KnowledgeText",
    "parse_version",
    "read_knowledge_jsonl",
    "read_skill_jsonl",
    "read_qa_jsonl",
    "read_entities",
    "encode_completions",
    "encode_texts",
    "EncodedRows",
    "HUB_DATASET",
    "hub_split_path",
    "read_hub_split",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptFormat:
    """Question/answer text format.

    Args:
        prompt: the prompt, with ``{question}``; it ends where the answer begins (the official
            response template ``Answer:``).
        answer: the completion, with ``{answer}`` (EOS is appended as a token, not as text).
    """

    prompt: str = "Question: {question}\nAnswer:"
    answer: str = " {answer}"

    def __post_init__(self) -> None:
        if "{question}" not in self.prompt:
            raise ValueError(f"PromptFormat.prompt={self.prompt!r} must contain {{question}}")
        if "{answer}" not in self.answer:
            raise ValueError(f"PromptFormat.answer={self.answer!r} must contain {{answer}}")

    def render_prompt(self, question: str) -> str:
        return self.prompt.replace("{question}", question)

    def render_answer(self, answer: str) -> str:
        return self.answer.replace("{answer}", answer)


#: The official recipes' format (``bos + 'Question: ' + q + '\n' + 'Answer: ' + a + eos``).
OFFICIAL_FORMAT = PromptFormat()


@dataclass(frozen=True)
class SkillExample:
    """One task (skill) row.

    Args:
        question: the question text (non-empty).
        answer: the gold answer under knowledge ``version`` (non-empty).
        version: knowledge version (>= 1) the answer follows; multi-version training routes the
            row to a knowledge LoRA of this version.
        fake: fictitious (``True``) or real (``False``, mixed mode: trained with the real knowledge
            LoRA and additionally with the skill LoRA alone, weighted by ``real_weight``).
    """

    question: str
    answer: str
    version: int = 1
    fake: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"SkillExample: empty question (answer {self.answer!r})")
        if not isinstance(self.answer, str) or not self.answer.strip():
            raise ValueError(f"SkillExample: empty answer for question {self.question!r}")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"SkillExample: version={self.version!r} must be an integer >= 1")


@dataclass(frozen=True)
class QAItem:
    """One QA evaluation item: a question and its gold aliases (``answers[0]`` is the canonical one)."""

    question: str
    answers: tuple[str, ...]
    attribute: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError("QAItem: empty question")
        if not self.answers or any(not isinstance(a, str) or not a.strip() for a in self.answers):
            raise ValueError(f"QAItem: question {self.question!r} needs a non-empty list of non-empty answers")


@dataclass(frozen=True)
class KnowledgeText:
    """One knowledge text and the adapter it trains (``name``)."""

    text: str
    name: str


_VERSION_RE = re.compile(r"(?:^|_)v?(\d+)$")


def parse_version(adapter_name: str) -> int:
    """The knowledge version of an adapter, from its name's last ``_``-separated field
    (official code detail 3): ``know_v2`` -> 2, ``lora_fake_statement_3`` -> 3.

    Raises:
        ValueError: no parsable version suffix (the message says how to name adapters).
    """
    m = _VERSION_RE.search(adapter_name or "")
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"knowledge adapter {adapter_name!r} has no version suffix; in multi-version mode "
                         "name knowledge adapters '<prefix>_<version>' (e.g. know_v2 or "
                         "lora_fake_statement_2, version >= 1)")
    return int(m.group(1))


def _read(path: str | Path, required: Sequence[str]) -> list[dict[str, Any]]:
    from iclr25.core.jsonl import read_jsonl

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    rows = read_jsonl(p, required=tuple(required))
    if not rows:
        raise ValueError(f"{p}: no rows")
    return rows


def _text(p: Path, i: int, row: dict[str, Any], key: str) -> str:
    v = row.get(key)
    if not isinstance(v, str):
        raise ValueError(f"{p}:{i}: field {key!r} must be a string, got {type(v).__name__}")
    if not v.strip():
        raise ValueError(f"{p}:{i}: empty {key!r}")
    return v


def _version(p: Path, i: int, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{p}:{i}: 'version' must be an integer >= 1, got {v!r}")
    return v


def read_knowledge_jsonl(path: str | Path, *, name_template: str = "know_v{version}") -> list[KnowledgeText]:
    """Read a knowledge JSONL: ``text`` plus the adapter ``name`` or a ``version`` (then the name is
    ``name_template.format(version=...)``).

    Raises:
        FileNotFoundError: no such file. ValueError: malformed line, missing field, empty text
        (each naming ``FILE:LINE``).
    """
    p = Path(path)
    out = []
    for i, row in enumerate(_read(p, ("text",)), start=1):
        text = _text(p, i, row, "text")
        if "name" in row:
            name = _text(p, i, row, "name")
        elif "version" in row:
            name = name_template.format(version=_version(p, i, row["version"]))
        else:
            raise ValueError(f"{p}:{i}: a knowledge row needs the adapter 'name' or a 'version'")
        out.append(KnowledgeText(text, name))
    return out


def read_skill_jsonl(path: str | Path) -> list[SkillExample]:
    """Read a skill JSONL: ``question``, ``answer``, ``version`` (int >= 1), optional ``fake`` (bool).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_knowledge_jsonl`.
    """
    p = Path(path)
    out = []
    for i, row in enumerate(_read(p, ("question", "answer", "version")), start=1):
        fake = row.get("fake", True)
        if not isinstance(fake, bool):
            raise ValueError(f"{p}:{i}: 'fake' must be true or false, got {fake!r}")
        out.append(SkillExample(_text(p, i, row, "question"), _text(p, i, row, "answer"),
                                version=_version(p, i, row["version"]), fake=fake))
    return out


def read_qa_jsonl(path: str | Path) -> list[QAItem]:
    """Read a QA evaluation JSONL: ``question`` and ``answers`` (a non-empty list of aliases).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_knowledge_jsonl`.
    """
    p = Path(path)
    out = []
    for i, row in enumerate(_read(p, ("question", "answers")), start=1):
        q = _text(p, i, row, "question")
        ans = row["answers"]
        if isinstance(ans, str):
            ans = [ans]
        if not isinstance(ans, list) or not ans or any(not isinstance(a, str) or not a.strip() for a in ans):
            raise ValueError(f"{p}:{i}: 'answers' must be a non-empty list of non-empty strings")
        out.append(QAItem(q, tuple(ans)))
    return out


def read_entities(path: str | Path) -> list[str]:
    """A JSON list of entity names (e.g. the mirrored ``bio_skill_test.json``).

    Raises:
        FileNotFoundError: no such file. ValueError: not a non-empty JSON list of non-empty strings.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--entities {p}: no such file")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: line {e.lineno}: {e.msg} (expected a JSON list of names)") from None
    if not isinstance(data, list) or not data:
        raise ValueError(f"{p}: expected a non-empty JSON list of entity names")
    for i, x in enumerate(data):
        if not isinstance(x, str) or not x.strip():
            raise ValueError(f"{p}: item {i} is not a non-empty string")
    return data


@dataclass
class EncodedRows:
    """Padded token rows (right padding).

    Attributes:
        input_ids: ``(N, T)`` long.
        labels: ``(N, T)`` long, ``-100`` where no loss is taken.
        attention_mask: ``(N, T)`` long.
        lengths: ``(N,)`` long, tokens per row.
        n_dropped: rows dropped because they did not fit ``max_length`` (skill rows) or were
            truncated (knowledge texts).
        kept: indices (into the input list) of the rows kept.
    """

    input_ids: Any
    labels: Any
    attention_mask: Any
    lengths: Any
    n_dropped: int
    kept: list[int]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batch(self, idx: Any) -> tuple[Any, Any, Any]:
        """Rows ``idx`` trimmed to their longest row: ``(input_ids, attention_mask, labels)``."""
        width = int(self.lengths[idx].max())
        return self.input_ids[idx, :width], self.attention_mask[idx, :width], self.labels[idx, :width]


def _pad(seqs: list[list[int]], labs: list[list[int]], pad_id: int):
    import torch

    n, width = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    lab = torch.full((n, width), -100, dtype=torch.long)
    att = torch.zeros((n, width), dtype=torch.long)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labs)):
        ids[i, :len(s)] = torch.tensor(s)
        lab[i, :len(l)] = torch.tensor(l)
    att[torch.arange(width)[None, :] < lengths[:, None]] = 1
    return ids, lab, att, lengths


def _pad_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad nor an EOS token")
    return int(pad)


def encode_completions(tokenizer: Any, examples: Sequence[SkillExample], fmt: PromptFormat = OFFICIAL_FORMAT, *,
                       max_length: int = 768) -> EncodedRows:
    """Tokenise task rows with completion-only labels (spec §1.3 stage 2, §6.4).

    Each row is ``tokens(prompt) + tokens(answer) + [EOS]`` (the prompt with the tokenizer's
    special tokens, e.g. BOS; the answer without); labels are ``-100`` on the prompt and equal to
    the ids on the answer and EOS. Rows longer than ``max_length`` are dropped (never silently
    cut: the count is logged and returned).

    Returns:
        :class:`EncodedRows`.

    Raises:
        ValueError: no rows, a tokenizer without EOS, an answer that tokenises to nothing, or every
            row longer than ``max_length``.
    """
    if not examples:
        raise ValueError("encode_completions: no rows")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no EOS token; completion-only training needs one")
    prompts = tokenizer([fmt.render_prompt(e.question) for e in examples], add_special_tokens=True)["input_ids"]
    answers = tokenizer([fmt.render_answer(e.answer) for e in examples], add_special_tokens=False)["input_ids"]
    seqs, labs, kept = [], [], []
    for i, (p, a) in enumerate(zip(prompts, answers)):
        if not a:
            raise ValueError(f"row {i}: answer {examples[i].answer!r} tokenises to no tokens")
        s = [*p, *a, eos]
        if len(s) > max_length:
            continue
        seqs.append(s)
        labs.append([-100] * len(p) + [*a, eos])
        kept.append(i)
    dropped = len(examples) - len(kept)
    if not seqs:
        raise ValueError(f"encode_completions: all {len(examples)} rows are longer than max_length={max_length}")
    if dropped:
        log.warning("encode_completions: %d of %d rows longer than max_length=%d were dropped", dropped,
                    len(examples), max_length)
    ids, lab, att, lengths = _pad(seqs, labs, _pad_id(tokenizer))
    return EncodedRows(ids, lab, att, lengths, dropped, kept)


def encode_texts(tokenizer: Any, texts: Sequence[str], *, max_length: int = 128) -> EncodedRows:
    """Tokenise knowledge texts for causal-LM training on all tokens (spec §1.3 stage 1).

    Texts longer than ``max_length`` tokens are truncated (as the official ``SFTTrainer`` does);
    the count is logged and returned in ``n_dropped``.

    Raises:
        ValueError: no texts, or an empty text.
    """
    if not texts:
        raise ValueError("encode_texts: no texts")
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise ValueError(f"knowledge text {i} is empty")
    enc = tokenizer(list(texts), add_special_tokens=True)["input_ids"]
    n_trunc = sum(len(s) > max_length for s in enc)
    if n_trunc:
        log.warning("encode_texts: %d of %d texts truncated to max_length=%d tokens", n_trunc, len(enc), max_length)
    seqs = [s[:max_length] for s in enc]
    if any(len(s) < 2 for s in seqs):
        raise ValueError("encode_texts: a text has fewer than 2 tokens; nothing to predict")
    ids, lab, att, lengths = _pad(seqs, seqs, _pad_id(tokenizer))
    return EncodedRows(ids, lab, att, lengths, n_trunc, list(range(len(seqs))))


# ------------------------------------------------------------------------------------------------
# the official hub data (Shiyu-Lab/Prereq_Tune) from a local copy

#: The folder name of a local copy of the hub dataset under ``ICLR25_DATA`` (or the user cache):
#: ``$ICLR25_DATA/Shiyu-Lab/Prereq_Tune/<config>/<split>-00000-of-00001.parquet``, the layout that
#: ``hf download Shiyu-Lab/Prereq_Tune --repo-type dataset --local-dir ...`` writes.
HUB_DATASET = "Shiyu-Lab/Prereq_Tune"
HUB_URL = "https://huggingface.co/datasets/Shiyu-Lab/Prereq_Tune"


def hub_split_path(config: str, split: str, *, shard: str = "00000-of-00001") -> Path:
    """Resolve ``<config>/<split>-<shard>.parquet`` of the local hub copy through core ``resolve``.

    Raises:
        iclr25.core.data.DataNotFoundError: not found (the message lists where it looked and the
            hub URL; nothing is downloaded).
    """
    from iclr25.core.data import RemoteFile, resolve

    return resolve(HUB_DATASET, RemoteFile(f"{config}/{split}-{shard}.parquet", url=HUB_URL, direct=False),
                   download=False)


def _messages_qa(msgs: Any, where: str) -> tuple[str, str]:
    if not isinstance(msgs, (list, tuple)) or len(msgs) < 2:
        raise ValueError(f"{where}: 'messages' must hold a user and an assistant turn")
    q, a = msgs[0].get("content"), msgs[1].get("content")
    if not isinstance(q, str) or not isinstance(a, str):
        raise ValueError(f"{where}: 'messages' turns need string 'content'")
    return q, a


def read_hub_split(config: str, split: str, *, path: str | Path | None = None,
                   name_template: str = "know_v{version}") -> list[KnowledgeText] | list[SkillExample]:
    """Rows of one config/split of the official data from a local copy (parquet; extra ``[hub]``).

    Knowledge configs (``*_knowledge``) have a ``text`` column and a ``version`` column; they become
    :class:`KnowledgeText` rows named ``name_template``. Skill configs (``*_skill``) have
    ``messages`` (user question, assistant answer), ``version`` and ``fake``; they become
    :class:`SkillExample` rows. Missing ``version`` means version 1, missing ``fake`` means
    fictitious for ``train_fake`` splits and real otherwise. Zero-based versions (the smallest
    version in the file is 0) are shifted as a whole to 1-based.

    Raises:
        DataNotFoundError: the file is not in the local copy. ImportError: pyarrow missing.
        ValueError: a row without the needed columns, or empty text.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("reading the hub data needs pyarrow: pip install 'iclr25-prereq-tune[hub]'") from None
    p = Path(path) if path is not None else hub_split_path(config, split)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    rows = pq.read_table(p).to_pylist()
    if not rows:
        raise ValueError(f"{p}: no rows")
    raw_v: list[int] = []
    for i, r in enumerate(rows, start=1):
        v = r.get("version", 1)
        if v is None:
            v = 1
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 0:
            raise ValueError(f"{p}:row {i}: 'version'={v!r} must be an integer >= 0")
        raw_v.append(int(v))
    # a copy with zero-based versions (0..V-1) is shifted as a whole to 1..V, so that versions 0 and 1
    # never merge; a one-based copy is read as is
    shift = 1 if min(raw_v) == 0 else 0
    out: list[Any] = []
    for i, r in enumerate(rows, start=1):
        where = f"{p}:row {i}"
        v = raw_v[i - 1] + shift
        if "text" in r and "messages" not in r:
            t = r["text"]
            if not isinstance(t, str) or not t.strip():
                raise ValueError(f"{where}: empty 'text'")
            out.append(KnowledgeText(t, name_template.format(version=v)))
        elif "messages" in r:
            q, a = _messages_qa(r["messages"], where)
            fake = r.get("fake")
            fake = ("fake" in split) if fake is None else bool(fake)
            out.append(SkillExample(q, a, version=v, fake=fake))
        else:
            raise ValueError(f"{where}: neither a 'text' (knowledge) nor a 'messages' (skill) column")
    return out


def finite_in(name: str, value: Any, lo: float, hi: float = math.inf, *, lo_open: bool = False) -> float:
    """Check a float hyper-parameter is finite and in range (``(lo, hi]`` when ``lo_open``).

    Raises:
        ValueError: naming the field and the rule.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        rule = f"{'>' if lo_open else '>='} {lo}" + (f" and <= {hi}" if hi != math.inf else "")
        raise ValueError(f"{name}={value!r} must be finite and {rule}")
    return float(value)
