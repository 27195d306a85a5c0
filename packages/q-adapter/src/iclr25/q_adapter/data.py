"""Preference data: HH-RLHF and DSP loaders, user JSONL pairs, tokenisation and collation.

Mirrored files are resolved through :mod:`iclr25.core.data` (``ICLR25_DATA`` or the user cache) and
checked against their sha256 (see ``shared/data/q-adapter/PROVENANCE.md``).
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = [
    "PreferencePair",
    "TokenizedPair",
    "HH_RLHF",
    "DSP",
    "DSP_DOMAINS",
    "ASSISTANT_MARKER",
    "split_hh_dialogue",
    "load_hh_rlhf",
    "load_dsp",
    "load_dsp_pairs",
    "split_queries",
    "load_preference_jsonl",
    "tokenize_pairs",
    "collate_pairs",
    "iter_batches",
    "dsp_prompt",
]

log = logging.getLogger(__name__)

ASSISTANT_MARKER = "\n\nAssistant:"
DSP_DOMAINS = ("academy", "business", "entertainment", "literature")

HH_RLHF = DatasetSpec(
    "q-adapter",
    files=(
        RemoteFile("hh-rlhf/harmless-base.test.jsonl.gz",
                   url="https://github.com/anthropics/hh-rlhf/raw/354e5c3cb8960630860dd5774a6ac2a58313bf4d/"
                       "harmless-base/test.jsonl.gz",
                   sha256="ebfaaed21162a4de120ae85366075b34425e2a6303fac59b99555002f7016f03"),
        RemoteFile("hh-rlhf/helpful.test.json",
                   url="https://github.com/Linear95/DSP/raw/ec099cf332cfdac0d1b0d644844ba60459144092/"
                       "data/helpful.test.json",
                   sha256="690ea4896f18e47c60802b370572e4dbcbfe23746064653c0bce26ce0f3c01c1"),
    ),
    description="HH-RLHF test splits (harmless-base: Anthropic, MIT; helpful: DSP's cleaned copy, CC BY-NC 4.0)",
)
DSP = DatasetSpec(
    "q-adapter",
    files=(
        RemoteFile("dsp/domain_specific_preference.test.json",
                   url="https://github.com/Linear95/DSP/raw/ec099cf332cfdac0d1b0d644844ba60459144092/"
                       "data/domain_specific_preference.test.json",
                   sha256="e4aac8fe77dfd4e41168785856a552402b7f28a359606e6d3c28818489fda9e6"),
    ),
    description="Domain-Specific Preference test split (Cheng et al. 2023), CC BY-NC 4.0",
)


@dataclass(frozen=True)
class PreferencePair:
    """One preference triple ``(x, y_w, y_l)``: the prompt, the chosen and the rejected response.

    Raises:
        ValueError: an empty (or whitespace-only) prompt or response.
    """

    prompt: str
    chosen: str
    rejected: str

    def __post_init__(self) -> None:
        for name in ("prompt", "chosen", "rejected"):
            v = getattr(self, name)
            if not isinstance(v, str):
                raise ValueError(f"PreferencePair.{name} must be a string, got {type(v).__name__} ({v!r:.40})")
            if not v.strip():
                raise ValueError(f"PreferencePair.{name} is empty; every pair needs a prompt and two non-empty "
                                 "responses")


# ---------------------------------------------------------------------------------------------- HH
def split_hh_dialogue(text: str) -> tuple[str, str]:
    """Split an HH-RLHF dialogue into ``(prompt, response)`` at the LAST ``"\\n\\nAssistant:"``.

    The prompt keeps the marker (so the model is asked to speak as the assistant); the response is
    the rest. Raises ``ValueError`` when the marker is absent.
    """
    i = text.rfind(ASSISTANT_MARKER)
    if i < 0:
        raise ValueError("dialogue has no '\\n\\nAssistant:' turn")
    j = i + len(ASSISTANT_MARKER)
    return text[:j], text[j:]


def _hh_pair(chosen: str, rejected: str) -> tuple[PreferencePair | None, str]:
    pc, rc = split_hh_dialogue(chosen)
    pr, rr = split_hh_dialogue(rejected)
    if pc != pr:
        # prefixes differ: use the longest common prefix, cut back to its last assistant marker
        n = 0
        for a, b in zip(chosen, rejected):
            if a != b:
                break
            n += 1
        common = chosen[:n]
        k = common.rfind(ASSISTANT_MARKER)
        if k < 0:
            return None, "prefix_mismatch"
        k += len(ASSISTANT_MARKER)
        pc, rc, rr = chosen[:k], chosen[k:], rejected[k:]
        status = "prefix_fixed"
    else:
        status = "ok"
    if not rc.strip() or not rr.strip():
        return None, "empty_response"
    if rc == rr:
        return None, "identical"
    return PreferencePair(pc, rc, rr), status


def load_hh_rlhf(path: str | Path | None = None, *, split: str = "harmless") -> list[PreferencePair]:
    """Load HH-RLHF pairs with prompt = everything up to the LAST ``"\\n\\nAssistant:"``.

    Pairs whose chosen and rejected dialogues differ before their last assistant turn (5 in
    harmless-base test, 9 in helpful test) are split at the last assistant marker of their longest
    common prefix (so both responses continue the same prompt); pairs with an empty response or
    identical responses are dropped. Counts are logged at INFO.

    Args:
        path: a ``.jsonl``/``.jsonl.gz`` file of ``{"chosen", "rejected"}`` (Anthropic format) or a
            ``.json`` array of ``{"text": [chosen, rejected]}`` (DSP's cleaned helpful copy). ``None``:
            the mirrored file of ``split`` (``"harmless"`` or ``"helpful"``).
    Returns:
        ``list[PreferencePair]``.
    Raises:
        ValueError: malformed JSON (with the line number) or missing fields.
    """
    if path is None:
        name = {"harmless": "hh-rlhf/harmless-base.test.jsonl.gz", "helpful": "hh-rlhf/helpful.test.json"}
        if split not in name:
            raise ValueError(f"split must be 'harmless' or 'helpful', got {split!r}")
        path = HH_RLHF.path(name[split])
    p = Path(path)
    raw: list[tuple[str, str]] = []
    if p.name.endswith(".json"):
        data = _read_json(p)
        for i, d in enumerate(data):
            try:
                c, r = d["text"][0], d["text"][1]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"{p}: item {i}: expected {{'text': [chosen, rejected]}}") from None
            raw.append((c, r))
    else:
        for lineno, d in _read_jsonl(p):
            if "chosen" not in d or "rejected" not in d:
                raise ValueError(f"{p}:{lineno}: missing 'chosen' or 'rejected' field")
            raw.append((d["chosen"], d["rejected"]))
    pairs, counts = [], {"ok": 0, "prefix_fixed": 0, "prefix_mismatch": 0, "empty_response": 0, "identical": 0}
    for c, r in raw:
        pair, status = _hh_pair(c, r)
        counts[status] += 1
        if pair is not None:
            pairs.append(pair)
    log.info("%s: %d pairs kept of %d (%s)", p.name, len(pairs), len(raw), counts)
    return pairs


# --------------------------------------------------------------------------------------------- DSP
def dsp_prompt(query: str) -> str:
    """DSP's plain-text rendering of a query: ``"## Human:\\n{query}\\n\\n## Assistant:\\n"``."""
    return f"## Human:\n{query}\n\n## Assistant:\n"


def load_dsp(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The raw DSP records ``{"query", "responses": {domain: text}}`` (default: the mirrored test split)."""
    p = Path(path) if path is not None else DSP.path()
    data = _read_json(p)
    for i, d in enumerate(data):
        if "query" not in d or "responses" not in d:
            raise ValueError(f"{p}: item {i}: expected keys 'query' and 'responses'")
    return data


def split_queries(n: int, n_train: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``n`` query indices into ``(train, test)`` (train has ``n_train``)."""
    if not 0 < n_train < n:
        raise ValueError(f"n_train must be in (0, {n}), got {n_train}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def load_dsp_pairs(
    path: str | Path | None = None,
    domain: str = "literature",
    *,
    indices: Sequence[int] | None = None,
    records: list[dict[str, Any]] | None = None,
) -> list[PreferencePair]:
    """DSP pairs for a target ``domain``: its response beats each of the other four (4 pairs per query).

    Args:
        path: the DSP JSON (default: the mirrored test split).
        domain: one of ``academy, business, entertainment, literature``.
        indices: query indices to use (default: all).
        records: already-loaded records (skips reading ``path``).
    Returns:
        ``list[PreferencePair]`` with prompt ``dsp_prompt(query)``.
    """
    if domain not in DSP_DOMAINS:
        raise ValueError(f"domain must be one of {DSP_DOMAINS}, got {domain!r}")
    recs = records if records is not None else load_dsp(path)
    idx = range(len(recs)) if indices is None else indices
    pairs, n_empty, n_same, n = [], 0, 0, 0
    for i in idx:
        d = recs[int(i)]
        resp = d["responses"]
        for other in (*(x for x in DSP_DOMAINS if x != domain), "normal"):
            n += 1
            a, b = resp.get(domain, ""), resp.get(other, "")
            if not a.strip() or not b.strip():
                n_empty += 1
            elif a == b:
                n_same += 1
            else:
                pairs.append(PreferencePair(dsp_prompt(d["query"]), a, b))
    if n_empty or n_same:
        log.warning("DSP %s: dropped %d of %d pairs (%d with an empty response, %d with identical responses)",
                    domain, n_empty + n_same, n, n_empty, n_same)
    return pairs


# ------------------------------------------------------------------------------------ user JSONL
def load_preference_jsonl(path: str | Path) -> list[PreferencePair]:
    """Read preference pairs, one JSON object per line (``.jsonl`` or ``.jsonl.gz``).

    Each line is either ``{"prompt", "chosen", "rejected"}`` or an HH-RLHF dialogue pair
    ``{"chosen", "rejected"}`` (no ``prompt``): split as in :func:`load_hh_rlhf` (prompt = up to the last
    ``"\\n\\nAssistant:"``; pairs with an empty or identical response, or no common assistant turn, are
    dropped and counted at WARNING).

    Raises:
        ValueError: naming the file and line for malformed JSON, a missing field, an empty value or an HH
            dialogue without an assistant turn.
    """
    p = Path(path)
    pairs, dropped = [], {"prefix_mismatch": 0, "empty_response": 0, "identical": 0}
    for lineno, d in _read_jsonl(p):
        if "prompt" not in d and "chosen" in d and "rejected" in d:
            c, r = d["chosen"], d["rejected"]
            if not isinstance(c, str) or not isinstance(r, str):
                raise ValueError(f"{p}:{lineno}: 'chosen' and 'rejected' must be strings")
            try:
                pair, status = _hh_pair(c, r)
            except ValueError as e:
                raise ValueError(f"{p}:{lineno}: HH-RLHF line without prompt: {e}") from None
            if pair is None:
                dropped[status] += 1
            else:
                pairs.append(pair)
            continue
        missing = [k for k in ("prompt", "chosen", "rejected") if k not in d]
        if missing:
            raise ValueError(f"{p}:{lineno}: missing field(s) {missing}; each line needs prompt, chosen, rejected "
                             "(or chosen and rejected HH-RLHF dialogues)")
        try:
            pairs.append(PreferencePair(d["prompt"], d["chosen"], d["rejected"]))
        except ValueError as e:
            raise ValueError(f"{p}:{lineno}: {e}") from None
    if any(dropped.values()):
        log.warning("%s: dropped %d HH-RLHF pair(s) (%s)", p.name, sum(dropped.values()), dropped)
    return pairs


def _open_text(p: Path):
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    return gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")


def _read_jsonl(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    # bytes, decoded line by line: a non-UTF-8 line is an error naming its line, not a bare codec message
    with (gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")) as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")  # a leading BOM (Windows editors) goes
            except UnicodeDecodeError as e:
                raise ValueError(f"{p}:{lineno}: not UTF-8 text ({e.reason} at byte {e.start} of the line); "
                                 "save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno}: malformed JSON ({e.msg} at column {e.colno}); "
                                 "each line must be one JSON object") from None
            if not isinstance(d, dict):
                raise ValueError(f"{p}:{lineno}: expected a JSON object, got {type(d).__name__}")
            yield lineno, d


def _read_json(p: Path) -> list[Any]:
    with _open_text(p) as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{e.lineno}: malformed JSON ({e.msg})") from None
    if not isinstance(data, list):
        raise ValueError(f"{p}: expected a JSON array at the top level")
    return data


# ------------------------------------------------------------------------------ tokenisation
@dataclass(frozen=True)
class TokenizedPair:
    """Token ids of one pair: the (left-truncated) prompt and the two (right-truncated) responses."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]


def tokenize_pairs(
    pairs: Sequence[PreferencePair],
    tokenizer: Any,
    *,
    max_length: int = 96,
    max_prompt_length: int = 32,
    add_eos: bool = True,
) -> list[TokenizedPair]:
    """Tokenise pairs: prompt kept to its last ``max_prompt_length`` tokens, each response cut so that
    prompt + response <= ``max_length`` (EOS appended when it fits).

    Pairs whose chosen and rejected token ids are identical after truncation would give a zero gradient
    and a meaningless accuracy: they are dropped and the count is logged at WARNING.

    Returns: ``list[TokenizedPair]``.
    Raises:
        ValueError: ``max_prompt_length < 1`` or ``>= max_length``, or every pair was dropped.
    """
    if max_prompt_length < 1:
        raise ValueError(f"max_prompt_length must be >= 1 (0 would keep the whole prompt), got {max_prompt_length}")
    if max_prompt_length >= max_length:
        raise ValueError(f"max_prompt_length ({max_prompt_length}) must be < max_length ({max_length})")
    if not pairs:
        return []
    eos = tokenizer.eos_token_id
    enc = lambda texts: tokenizer(list(texts), add_special_tokens=False)["input_ids"]  # noqa: E731
    P = enc(p.prompt for p in pairs)
    C = enc(p.chosen for p in pairs)
    R = enc(p.rejected for p in pairs)
    out, dropped = [], 0
    for p, c, r in zip(P, C, R):
        p = p[-max_prompt_length:]
        room = max_length - len(p)
        c = (c + [eos] if add_eos and eos is not None else c)[:room]
        r = (r + [eos] if add_eos and eos is not None else r)[:room]
        if c == r or not c or not r:
            dropped += 1
            continue
        out.append(TokenizedPair(p, c, r))
    if dropped:
        log.warning("dropped %d of %d pairs whose chosen and rejected are identical after truncation to %d "
                    "tokens (they carry no preference signal)", dropped, len(pairs), max_length)
    if not out:
        raise ValueError(f"all {len(pairs)} pairs are identical after truncation to max_length={max_length}; "
                         "raise max_length")
    return out


def collate_pairs(batch: Sequence[TokenizedPair], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Stack chosen then rejected sequences (first half chosen), right-padded to one length.

    Returns:
        ``input_ids`` ``[2B, L]`` long, ``attention_mask`` ``[2B, L]`` long, ``response_mask``
        ``[2B, L]`` long (1 on response tokens).
    """
    seqs = [(t.prompt, t.chosen) for t in batch] + [(t.prompt, t.rejected) for t in batch]
    return collate_sequences(seqs, pad_token_id)


def collate_sequences(seqs: Sequence[tuple[list[int], list[int]]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``(prompt_ids, response_ids)`` sequences; see :func:`collate_pairs`."""
    L = max(len(p) + len(r) for p, r in seqs)
    n = len(seqs)
    ids = torch.full((n, L), pad_token_id, dtype=torch.long)
    attn = torch.zeros((n, L), dtype=torch.long)
    resp = torch.zeros((n, L), dtype=torch.long)
    for i, (p, r) in enumerate(seqs):
        k = len(p) + len(r)
        ids[i, :k] = torch.tensor(p + r, dtype=torch.long)
        attn[i, :k] = 1
        resp[i, len(p):k] = 1
    return {"input_ids": ids, "attention_mask": attn, "response_mask": resp}


def iter_batches(items: Sequence[Any], batch_size: int, *, shuffle: bool = False,
                 rng: np.random.Generator | None = None) -> Iterator[list[Any]]:
    """Yield lists of ``batch_size`` items (the last may be shorter), optionally shuffled."""
    order = np.arange(len(items))
    if shuffle:
        (rng or np.random.default_rng()).shuffle(order)
    for i in range(0, len(order), batch_size):
        yield [items[j] for j in order[i:i + batch_size]]
