"""Own data: JSONL schemas -> (prompt, response) pairs -> padded token tensors.

Accepted record schemas (checked in this order; the first that fits wins), as the released code's
dataset readers accept them (spec §2 item 9):

* ``prompt`` + ``response``;
* ``prompt`` + ``chosen`` (a string, or a list of chat messages whose last assistant turn is used);
* ``question`` + ``response``;
* ``instruction`` + ``output`` (+ optional ``input``, appended to the instruction after a newline);
* ``conversations``: a list of turns ``{"from": human|gpt|system, "value": ...}`` (ShareGPT / SlimOrca)
  or ``{"role": user|assistant|system, "content": ...}``; the response is the last assistant turn and
  the prompt the turns before it, joined by newlines.

A record that fits none of them is an error that lists the keys it has. Empty prompts and responses,
and responses that tokenise to zero tokens (their mean loss is undefined), are errors naming the
``FILE:LINE``. Exact duplicate samples are kept (each gets its own score) and counted in the log.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iclr25.core.jsonl import JsonlError, iter_jsonl

__all__ = ["PairSet", "record_to_pair", "read_pairs", "LMDataset", "encode_pairs", "SCHEMAS"]

log = logging.getLogger("iclr25.seal")

SCHEMAS = ("prompt/response", "prompt/chosen", "question/response", "instruction/input/output", "conversations")
_USER = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "bot", "model"}
_SYSTEM = {"system"}


def _text(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str):
        raise JsonlError(f"{where}: field {key!r} must be a string, got {type(v).__name__}")
    return v


def _turn(t: Any, where: str) -> tuple[str, str]:
    if not isinstance(t, dict):
        raise JsonlError(f"{where}: each conversation turn must be an object, got {type(t).__name__}")
    if "from" in t and "value" in t:
        return str(t["from"]).lower(), _text(t["value"], where, "value")
    if "role" in t and "content" in t:
        return str(t["role"]).lower(), _text(t["content"], where, "content")
    raise JsonlError(f"{where}: a conversation turn needs from/value or role/content; it has {sorted(t)}")


def _split_turns(turns: Any, where: str, key: str) -> tuple[str, str]:
    if not isinstance(turns, list) or not turns:
        raise JsonlError(f"{where}: field {key!r} must be a non-empty list of turns")
    parsed = [_turn(t, where) for t in turns]
    last = max((i for i, (r, _) in enumerate(parsed) if r in _ASSISTANT), default=None)
    if last is None:
        roles = sorted({r for r, _ in parsed})
        raise JsonlError(f"{where}: {key!r} has no assistant turn (roles found: {roles}; expected gpt/assistant)")
    unknown = sorted({r for r, _ in parsed[:last + 1]} - _USER - _ASSISTANT - _SYSTEM)
    if unknown:
        raise JsonlError(f"{where}: unknown conversation role(s) {unknown}; use human/user, gpt/assistant, system")
    prompt = "\n".join(v for _, v in parsed[:last])
    return prompt, parsed[last][1]


def record_to_pair(rec: dict[str, Any], where: str = "record") -> tuple[str, str]:
    """One JSONL record -> ``(prompt, response)`` under the schemas of the module docstring.

    Args:
        rec: the parsed JSON object.
        where: ``FILE:LINE`` used in error messages.

    Returns:
        ``(prompt, response)`` strings, both non-empty after stripping whitespace.

    Raises:
        JsonlError (a ValueError): unknown schema (the message lists the keys found and the accepted
            schemas), non-string fields, an empty prompt or response.
    """
    if "prompt" in rec and "response" in rec:
        prompt, resp = _text(rec["prompt"], where, "prompt"), _text(rec["response"], where, "response")
        pk, rk = "prompt", "response"
    elif "prompt" in rec and "chosen" in rec:
        prompt, pk, rk = _text(rec["prompt"], where, "prompt"), "prompt", "chosen"
        ch = rec["chosen"]
        resp = _split_turns(ch, where, "chosen")[1] if isinstance(ch, list) else _text(ch, where, "chosen")
    elif "question" in rec and "response" in rec:
        prompt, resp = _text(rec["question"], where, "question"), _text(rec["response"], where, "response")
        pk, rk = "question", "response"
    elif "instruction" in rec and "output" in rec:
        inst = _text(rec["instruction"], where, "instruction")
        extra = rec.get("input") or ""
        extra = _text(extra, where, "input")
        prompt = inst + ("\n" + extra if extra.strip() else "")
        resp, pk, rk = _text(rec["output"], where, "output"), "instruction", "output"
    elif "conversations" in rec:
        prompt, resp = _split_turns(rec["conversations"], where, "conversations")
        pk, rk = "conversations (turns before the last assistant turn)", "conversations (last assistant turn)"
    else:
        raise JsonlError(f"{where}: unknown schema; the record has keys {sorted(rec)}; expected one of "
                         f"{', '.join(SCHEMAS)}")
    if not prompt.strip():
        raise JsonlError(f"{where}: empty prompt (field {pk!r})")
    if not resp.strip():
        raise JsonlError(f"{where}: empty response (field {rk!r})")
    return prompt, resp


@dataclass
class PairSet:
    """Prompt/response pairs read from a file (or built in memory), with their provenance.

    Attributes:
        prompts, responses: the texts, one per sample, in file order.
        sources: ``FILE:LINE`` of each sample (``name:i`` for in-memory sets).
        raw_lines: each sample's original line (bytes decoded as UTF-8, no newline), for ``select``.
        labels: an optional ``label`` field per sample (``None`` where absent).
        sha256: hash of the file bytes (or of the pairs) — recorded with a selector.
        n_duplicates: samples that repeat an earlier (prompt, response) pair exactly.
    """

    prompts: list[str]
    responses: list[str]
    sources: list[str]
    raw_lines: list[str] = field(default_factory=list)
    labels: list[str | None] = field(default_factory=list)
    sha256: str = ""
    n_duplicates: int = 0

    def __len__(self) -> int:
        return len(self.prompts)

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[str, str]], name: str = "pairs",
                   labels: Sequence[str | None] | None = None) -> PairSet:
        """An in-memory set (no file); ``labels`` are stored as given."""
        import json

        ps = [p for p, _ in pairs]
        rs = [r for _, r in pairs]
        h = hashlib.sha256(json.dumps([ps, rs], ensure_ascii=False).encode()).hexdigest()
        return cls(ps, rs, [f"{name}:{i + 1}" for i in range(len(ps))], [], list(labels or [None] * len(ps)), h,
                   _duplicates(ps, rs))


def _duplicates(prompts: Sequence[str], responses: Sequence[str]) -> int:
    c = Counter(zip(prompts, responses))
    return sum(v - 1 for v in c.values() if v > 1)


def read_pairs(path: str | Path, *, what: str = "data", allow_empty: bool = False) -> PairSet:
    """Read a JSONL file of prompt/response records (any schema of the module docstring).

    Args:
        path: the JSONL file.
        what: a name for messages (``"--safe"``, ``"--ft"``).
        allow_empty: accept a file without records (otherwise an error).

    Returns:
        A :class:`PairSet` with raw lines and line numbers kept.

    Raises:
        FileNotFoundError: no such file.
        JsonlError (ValueError): a malformed line (``FILE:LINE``), unknown schema, empty fields; a file
            without records (``what`` is empty).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what}: {p} does not exist")
    data = p.read_bytes()
    lines = data.split(b"\n")
    prompts, responses, sources, raws, labels = [], [], [], [], []
    for lineno, rec in iter_jsonl(p):
        where = f"{p}:{lineno}"
        pr, rs = record_to_pair(rec, where)
        prompts.append(pr)
        responses.append(rs)
        sources.append(where)
        raws.append(lines[lineno - 1].decode("utf-8").rstrip("\r"))
        lab = rec.get("label")
        labels.append(str(lab) if lab is not None else None)
    if not prompts and not allow_empty:
        raise JsonlError(f"{what}: {p} has no records (an empty set cannot be used)")
    ps = PairSet(prompts, responses, sources, raws, labels, hashlib.sha256(data).hexdigest(),
                 _duplicates(prompts, responses))
    if ps.n_duplicates:
        log.info("%s: %d exact duplicate (prompt, response) pair(s) in %s; each is kept with its own score",
                 what, ps.n_duplicates, p)
    return ps


@dataclass
class LMDataset:
    """Tokenised samples as right-padded tensors (built once; batches are index-selects).

    Attributes:
        input_ids: ``(n, T)`` long — BOS/prompt, response, EOS, then ``pad_id``.
        attention_mask: ``(n, T)`` long 0/1.
        response_mask: ``(n, T)`` long 0/1 — the response tokens and EOS (the loss tokens).
        lengths: ``(n,)`` long — real tokens per sample.
        sources: ``FILE:LINE`` per sample.
        pad_id: the pad token id.
        n_truncated: samples whose response was cut at ``max_len``.
    """

    input_ids: Any
    attention_mask: Any
    response_mask: Any
    lengths: Any
    sources: list[str]
    pad_id: int
    n_truncated: int = 0

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def batch(self, idx: Any, device: Any = None) -> tuple[Any, Any, Any]:
        """``(input_ids, attention_mask, response_mask)`` of samples ``idx`` (a 1-D long tensor),
        trimmed to the longest of them, on ``device``."""
        import torch

        idx = torch.as_tensor(idx, dtype=torch.long)
        width = int(self.lengths[idx].max())
        out = (self.input_ids[idx, :width], self.attention_mask[idx, :width], self.response_mask[idx, :width])
        if device is not None:
            out = tuple(t.to(device, non_blocking=True) for t in out)
        return out  # type: ignore[return-value]

    def subset(self, idx: Any) -> LMDataset:
        """The samples ``idx`` as a new dataset (order as given)."""
        import torch

        idx = torch.as_tensor(idx, dtype=torch.long)
        width = int(self.lengths[idx].max()) if len(idx) else 1
        return LMDataset(self.input_ids[idx, :width].clone(), self.attention_mask[idx, :width].clone(),
                         self.response_mask[idx, :width].clone(), self.lengths[idx].clone(),
                         [self.sources[i] for i in idx.tolist()], self.pad_id)

    @staticmethod
    def concat(parts: Sequence[LMDataset]) -> LMDataset:
        """Samples of several datasets (same tokenizer) in one dataset."""
        import torch

        if not parts:
            raise ValueError("LMDataset.concat: no parts")
        width = max(p.input_ids.shape[1] for p in parts)
        pad = parts[0].pad_id

        def padded(t: Any, value: int) -> Any:
            return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

        return LMDataset(torch.cat([padded(p.input_ids, pad) for p in parts]),
                         torch.cat([padded(p.attention_mask, 0) for p in parts]),
                         torch.cat([padded(p.response_mask, 0) for p in parts]),
                         torch.cat([p.lengths for p in parts]), [s for p in parts for s in p.sources], pad,
                         sum(p.n_truncated for p in parts))


def encode_pairs(tokenizer: Any, pairs: PairSet | Sequence[tuple[str, str]], *, template: str = "{}",
                 max_len: int = 2048, what: str = "data") -> LMDataset:
    """Tokenise pairs as ``tokenizer(template.format(prompt)) + tokenizer(response) + [EOS]``.

    The prompt is tokenised with the tokenizer's special tokens (BOS for Llama-3 and the tiny word
    tokenizer), the response without; the loss covers the response tokens and EOS (the prompt is
    masked, spec §1.2). Prompt and response are tokenised separately, so the response tokens are the
    same whatever the prompt.

    Args:
        tokenizer: a Hugging Face tokenizer with an EOS token.
        pairs: a :class:`PairSet` or ``(prompt, response)`` tuples.
        template: prompt template with one ``{}``.
        max_len: the most tokens per sample; a longer response is cut (the count is logged).
        what: a name for messages.

    Returns:
        :class:`LMDataset`.

    Raises:
        ValueError: no EOS token; an empty set; a response of zero tokens or a prompt of ``>= max_len``
            tokens (naming the sample's ``FILE:LINE``).
    """
    import torch

    ps = pairs if isinstance(pairs, PairSet) else PairSet.from_pairs(list(pairs), what)
    if len(ps) == 0:
        raise ValueError(f"{what}: no samples to encode")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(f"{what}: the tokenizer has no EOS token; set tokenizer.eos_token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    p_ids = tokenizer([template.format(p) for p in ps.prompts], add_special_tokens=True)["input_ids"]
    r_ids = tokenizer(list(ps.responses), add_special_tokens=False)["input_ids"]
    seqs, starts, n_trunc = [], [], 0
    for src, p, r in zip(ps.sources, p_ids, r_ids):
        if len(r) == 0:
            raise ValueError(f"{src}: the response tokenises to zero tokens (its mean loss is undefined); "
                             "fix or drop this sample")
        if len(p) == 0:
            raise ValueError(f"{src}: the prompt tokenises to zero tokens")
        if len(p) >= max_len:
            raise ValueError(f"{src}: the prompt has {len(p)} tokens, not fewer than max_len={max_len}; "
                             "raise --max-len or shorten the prompt")
        full = list(p) + list(r) + [eos]
        if len(full) > max_len:
            n_trunc += 1
            full = full[:max_len]
        seqs.append(full)
        starts.append(len(p))
    if n_trunc:
        log.warning("%s: %d of %d samples longer than max_len=%d tokens; their responses were cut",
                    what, n_trunc, len(seqs), max_len)
    n, width = len(seqs), max(len(s) for s in seqs)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    ids = torch.full((n, width), pad, dtype=torch.long)
    flat = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    pos = torch.arange(width).expand(n, width)
    attn = (pos < lengths[:, None]).long()
    ids[attn.bool()] = flat
    resp = (attn.bool() & (pos >= torch.tensor(starts)[:, None])).long()
    return LMDataset(ids, attn, resp, lengths, list(ps.sources), int(pad), n_trunc)
