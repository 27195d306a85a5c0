"""Data formats of the text path, and the mirrored Anthropic-HH harmless test pairs.

- Demonstrations: JSONL, one ``{"prompt": str, "response": str}`` per line.
- Preferences: JSONL, ``{"prompt", "chosen", "rejected"}`` per line, or HH-style ``{"chosen", "rejected"}`` whole
  dialogues (split at the last ``"\\n\\nAssistant:"``; both must share the prompt). ``.jsonl.gz`` is read too.
- Agent samples: JSONL ``{"prompt", "response"}``; every demonstration prompt needs one.
- Chat records (UltraChat-200k / UltraFeedback-binarized style): ``chosen`` / ``rejected`` (preferences) or
  ``messages`` (demonstrations) as lists of ``{"role", "content"}``; the last message must be the assistant's
  response and the earlier ones are rendered as the prompt in the HH text format (:func:`messages_to_pair`).

Errors name the file and line (core :class:`~iclr25.core.jsonl.JsonlError`, a ``ValueError``). The HH file is
red-teaming content: nothing here logs or prints its text (counts only).
"""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from iclr25.core.data import DatasetSpec, RemoteFile
from iclr25.core.jsonl import JsonlError, iter_jsonl

__all__ = ["HH_HARMLESS", "ASSISTANT", "split_hh_dialogue", "messages_to_pair", "load_hh_pairs", "read_demonstrations",
           "read_preferences", "read_agent_samples", "first_difference"]

log = logging.getLogger("iclr25.aihf")
ASSISTANT = "\n\nAssistant:"
HH_HARMLESS = DatasetSpec("aihf", files=(RemoteFile(
    "hh_rlhf_harmless_base_test.jsonl.gz",
    url="https://github.com/anthropics/hh-rlhf/raw/354e5c3cb8960630860dd5774a6ac2a58313bf4d/harmless-base/test.jsonl.gz",
    sha256="ebfaaed21162a4de120ae85366075b34425e2a6303fac59b99555002f7016f03", direct=False),),
    description="Anthropic HH-RLHF harmless-base test split (2312 pairs, MIT); red-teaming content")


def split_hh_dialogue(text: str) -> tuple[str, str]:
    """Split an HH dialogue at the last ``"\\n\\nAssistant:"``: ``(prompt including the marker, response)`` with the
    response's leading space removed.

    Raises:
        ValueError: no ``"\\n\\nAssistant:"`` marker in ``text``.
    """
    i = text.rfind(ASSISTANT)
    if i < 0:
        raise ValueError("dialogue has no '\\n\\nAssistant:' turn to split at")
    cut = i + len(ASSISTANT)
    resp = text[cut:]
    return text[:cut], resp[1:] if resp.startswith(" ") else resp


def messages_to_pair(messages: object, where: str = "") -> tuple[str, str]:
    """A chat ``[{"role", "content"}, ...]`` whose last message is the assistant's, as ``(prompt, response)``: the
    earlier messages rendered as ``"\n\nHuman: ..."`` / ``"\n\nAssistant: ..."`` (system: ``"\n\nSystem: ..."``)
    turns ending with ``"\n\nAssistant:"``, and the last message's content. (The model's own chat template is
    not applied: the HH text format is used for every model.)

    Raises:
        ValueError: not a list of role/content dicts, or the last message is not the assistant's.
    """
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise ValueError(f"{where}expected a non-empty list of {{'role', 'content'}} messages")
    if messages[-1]["role"] != "assistant":
        raise ValueError(f"{where}the last message must be the assistant's response, got role "
                         f"{messages[-1]['role']!r}")
    names = {"user": "Human", "assistant": "Assistant", "system": "System"}
    prompt = "".join(f"\n\n{names.get(m['role'], m['role'].capitalize())}: {m['content']}" for m in messages[:-1])
    return prompt + ASSISTANT, messages[-1]["content"]


def _iter_any_jsonl(path: Path, required=(), nonempty=()) -> Iterator[tuple[int, dict[str, Any]]]:
    if path.suffix != ".gz":
        yield from iter_jsonl(path, required=required, nonempty=nonempty)
        return
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    i = 0
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = iter(fh)
        while True:
            try:
                line = next(lines)
            except StopIteration:
                break
            except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
                raise JsonlError(f"{path}: corrupt or truncated gzip after line {i} ({type(e).__name__}: {e}); "
                                 "download or compress the file again (gzip -t checks it)") from None
            i += 1
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise JsonlError(f"{path}:{i}: invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise JsonlError(f"{path}:{i}: expected a JSON object, got {type(rec).__name__}")
            missing = [k for k in required if k not in rec]
            if missing:
                raise JsonlError(f"{path}:{i}: missing field(s) {missing}; the line has {sorted(rec)}")
            for k in nonempty:
                v = rec.get(k)
                if not isinstance(v, str) or not v.strip():
                    raise JsonlError(f"{path}:{i}: field {k!r} is empty")
            yield i, rec


def _pairs_from(path: Path, *, mismatched: str, drop_invalid: bool, stats: dict) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    counts = {"n_records": 0, "n_pairs": 0, "n_prompt_mismatch": 0, "n_identical": 0, "n_empty": 0,
              "mismatch_lines": []}
    for i, rec in _iter_any_jsonl(path, required=("chosen", "rejected")):
        counts["n_records"] += 1
        where = f"{path}:{i}"
        chat = isinstance(rec["chosen"], list)
        for k in ("chosen", "rejected"):
            if chat:
                continue
            if not isinstance(rec[k], str):
                raise JsonlError(f"{where}: field {k!r} must be a string (or a list of chat messages)")
            if not rec[k].strip():
                raise JsonlError(f"{where}: field {k!r} is empty")
        if chat:  # UltraFeedback-binarized style: message lists sharing the prompt turns
            try:
                prompt, chosen = messages_to_pair(rec["chosen"], f"{where}: 'chosen': ")
                prompt_r, rejected = messages_to_pair(rec["rejected"], f"{where}: 'rejected': ")
            except ValueError as e:
                raise JsonlError(str(e)) from None
            if prompt != prompt_r:
                counts["n_prompt_mismatch"] += 1
                counts["mismatch_lines"].append(i)
                if mismatched == "error":
                    raise JsonlError(f"{where}: chosen and rejected conversations differ before the last turn")
                continue
        elif "prompt" in rec:
            if not isinstance(rec["prompt"], str) or not rec["prompt"].strip():
                raise JsonlError(f"{where}: field 'prompt' is empty")
            prompt, chosen, rejected = rec["prompt"], rec["chosen"], rec["rejected"]
        else:  # an HH dialogue pair
            try:
                prompt, chosen = split_hh_dialogue(rec["chosen"])
                prompt_r, rejected = split_hh_dialogue(rec["rejected"])
            except ValueError as e:
                raise JsonlError(f"{where}: {e}") from None
            if prompt != prompt_r:
                counts["n_prompt_mismatch"] += 1
                counts["mismatch_lines"].append(i)
                if mismatched == "error":
                    raise JsonlError(f"{where}: chosen and rejected dialogues differ before the last "
                                     "'\\n\\nAssistant:' turn (not a pair of responses to one prompt)")
                continue
        empty = [k for k, v in (("chosen", chosen), ("rejected", rejected)) if not v.strip()]
        if empty:
            counts["n_empty"] += 1
            if not drop_invalid:
                raise JsonlError(f"{where}: the {' and '.join(empty)} response is empty; fix the line or pass "
                                 "--drop-invalid to drop such pairs")
            continue
        if chosen == rejected:
            counts["n_identical"] += 1
            if not drop_invalid:
                raise JsonlError(f"{where}: chosen and rejected are identical (no preference); fix the line or pass "
                                 "--drop-invalid to drop such pairs")
            continue
        out.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    counts["n_pairs"] = len(out)
    stats.update(counts)
    if counts["n_prompt_mismatch"]:
        log.info("%s: %d record(s) skipped because chosen and rejected have different prompts (lines %s)",
                 path.name, counts["n_prompt_mismatch"], counts["mismatch_lines"])
    if counts["n_identical"] or counts["n_empty"]:
        log.info("%s: dropped %d pair(s) whose chosen and rejected are identical and %d with an empty response "
                 "(drop_invalid)", path.name, counts["n_identical"], counts["n_empty"])
    return out


def load_hh_pairs(path: str | Path | None = None, max_pairs: int | None = None, *, mismatched: str = "skip",
                  drop_invalid: bool = True, stats: dict | None = None) -> list[dict[str, str]]:
    """Anthropic-HH preference pairs as ``[{"prompt", "chosen", "rejected"}]``.

    Each record's two dialogues are split at their last ``"\\n\\nAssistant:"``. In the harmless-base test split,
    5 of 2312 records have dialogues that differ *before* that turn (no common prompt); they are skipped and counted
    (``mismatched="skip"``, the default) or raise (``"error"``).

    Args:
        path: a ``.jsonl`` / ``.jsonl.gz`` file (default: the mirrored harmless-base test split, sha256-checked,
            found through ``ICLR25_DATA``).
        max_pairs: keep the first ``max_pairs`` pairs.
        mismatched: ``"skip"`` or ``"error"`` for records whose prompts differ.
        drop_invalid: drop (and count) pairs whose chosen and rejected responses are identical or where one is
            empty (the HH file has such records); ``False`` raises naming the line.
        stats: a dict filled with ``n_records``, ``n_pairs``, ``n_prompt_mismatch``, ``mismatch_lines``,
            ``n_identical``, ``n_empty``.

    Raises:
        FileNotFoundError: the file (or the mirror) is missing (core ``DataNotFoundError`` names where it looked).
        JsonlError: a malformed line, a missing or empty field, an identical pair without ``drop_invalid``.
    """
    if mismatched not in ("skip", "error"):
        raise ValueError(f"mismatched must be 'skip' or 'error', got {mismatched!r}")
    p = Path(path) if path is not None else HH_HARMLESS.path("hh_rlhf_harmless_base_test.jsonl.gz")
    st = stats if stats is not None else {}
    pairs = _pairs_from(p, mismatched=mismatched, drop_invalid=drop_invalid, stats=st)
    if max_pairs is not None:
        pairs = pairs[:max_pairs]
    return pairs


def read_preferences(path: str | Path, *, drop_invalid: bool = False, mismatched: str = "error",
                     stats: dict | None = None) -> list[dict[str, str]]:
    """Preference pairs from JSONL (``prompt``/``chosen``/``rejected``, or HH-style dialogues); see the module
    docstring. Records of HH-style dialogues whose prompts differ raise unless ``mismatched="skip"``.

    Raises:
        FileNotFoundError, JsonlError: as :func:`load_hh_pairs`; also for a file with no pairs.
    """
    st = stats if stats is not None else {}
    pairs = _pairs_from(Path(path), mismatched=mismatched, drop_invalid=drop_invalid, stats=st)
    if not pairs:
        raise JsonlError(f"{path}: no preference pairs")
    return pairs


def read_demonstrations(path: str | Path) -> list[dict[str, str]]:
    """Demonstrations ``[{"prompt", "response"}]`` from JSONL (both fields required and non-empty), or chat
    records ``{"messages": [...]}`` ending with the assistant's turn (:func:`messages_to_pair`).

    Raises:
        FileNotFoundError: no such file. JsonlError: ``FILE:LINE`` for a malformed line, a missing or empty field,
            or a file with no demonstrations.
    """
    out = []
    for i, rec in _iter_any_jsonl(Path(path)):
        if "response" not in rec and isinstance(rec.get("messages"), list):  # UltraChat-200k style
            try:
                prompt, resp = messages_to_pair(rec["messages"], f"{path}:{i}: 'messages': ")
            except ValueError as e:
                raise JsonlError(str(e)) from None
        else:
            missing = [k for k in ("prompt", "response") if k not in rec]
            if missing:
                raise JsonlError(f"{path}:{i}: missing field(s) {missing} (or give 'messages'); the line has "
                                 f"{sorted(rec)}")
            prompt, resp = rec["prompt"], rec["response"]
        if not isinstance(prompt, str) or not isinstance(resp, str):
            raise JsonlError(f"{path}:{i}: prompt and response must be strings")
        for k, v in (("prompt", prompt), ("response", resp)):
            if not v.strip():
                raise JsonlError(f"{path}:{i}: field {k!r} is empty")
        out.append({"prompt": prompt, "response": resp})
    if not out:
        raise JsonlError(f"{path}: no demonstrations")
    return out


def read_agent_samples(path: str | Path, demos: list[dict[str, str]]) -> list[str]:
    """One agent response per demonstration, matched by prompt, from JSONL ``{"prompt", "response"}``.

    Returns:
        ``list[str]`` aligned with ``demos``.

    Raises:
        JsonlError: a malformed line. ValueError: a demonstration prompt without an agent sample (names the
            demonstration's index; ``--agent-samples-file`` must cover every demonstration prompt).
    """
    table: dict[str, str] = {}
    for _, rec in _iter_any_jsonl(Path(path), required=("prompt", "response"), nonempty=("prompt", "response")):
        table.setdefault(rec["prompt"], rec["response"])
    out = []
    for j, d in enumerate(demos):
        if d["prompt"] not in table:
            raise ValueError(f"demonstration {j + 1} has no agent sample in {path}: every demonstration prompt needs "
                             "one (generate them with the policy, or drop --agent-samples-file to sample here)")
        out.append(table[d["prompt"]])
    return out


def first_difference(a: list[int], b: list[int]) -> int:
    """Index of the first position where two token sequences differ (``min(len)`` when one is a prefix)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
