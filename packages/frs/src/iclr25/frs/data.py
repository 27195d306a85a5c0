"""Data: the SST-2 / AG News mirrors, users' own TSV / CSV / JSONL / Python lists, tokenisation,
BadNets-style poisoning and triggered test sets.

Mirrors (``ICLR25_DATA``, sha256-checked by :mod:`iclr25.core.data`): ``frs/sst2/train_sub.tsv``
(6,000 phrases, header ``sentence<TAB>label``), ``frs/sst2/test.tsv`` (872 sentences),
``frs/agnews/{train_pool,test}.tsv`` (no header, class names as labels, HTML-escape residue).
"""

from __future__ import annotations

import csv
import html
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from iclr25.core.data import DatasetSpec, RemoteFile

from .distance import insert_trigger, trigger_tokens

__all__ = ["FRS_DATA", "TextDataset", "load_table", "load_jsonl", "from_list", "load_dataset", "tokenize",
           "poison_dataset", "triggered_set", "normalize_agnews"]

_SRC = "https://github.com/forest-snow/alps (data/, commit 3c7ef2c9; see shared/data/frs/PROVENANCE.md)"

FRS_DATA = DatasetSpec("frs", files=(
    RemoteFile("sst2/train_sub.tsv", _SRC, "c4cf9a0dc9be2e642e451780e56c9fe759cbbecadcf6a2deda99e78b173d263e", direct=False),
    RemoteFile("sst2/test.tsv", _SRC, "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0", direct=False),
    RemoteFile("agnews/train_pool.tsv", _SRC, "7a0811e0006080bf4de17752c5466450ff3db778be71bc5bcf3c4e99b5f0803d", direct=False),
    RemoteFile("agnews/test.tsv", _SRC, "e4217edd939f618f24a42b0988c56ec3cddf656d8dc279b9afa443dd1ab6a1c1", direct=False),
), description="SST-2 and AG News text classification (ALPS copy, MIT)")

#: named data sets -> (train file, test file, loader options)
NAMED = {
    "sst2": ("sst2/train_sub.tsv", "sst2/test.tsv", {"labels": ["0", "1"]}),
    "agnews": ("agnews/train_pool.tsv", "agnews/test.tsv",
               {"labels": ["World", "Sports", "Business", "Sci/Tech"], "normalize": "agnews", "header": "no"}),
}


@dataclass
class TextDataset:
    """Raw texts with integer labels.

    Attributes:
        texts: the raw strings.
        labels: class indices in [0, C).
        label_names: class names in index order (the mapping saved beside runs).
        source: where the data came from (path or name).
    """

    texts: list[str]
    labels: list[int]
    label_names: list[str]
    source: str = "<list>"
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def label_map(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.label_names)}

    def subset(self, idx: Sequence[int]) -> TextDataset:
        return TextDataset([self.texts[i] for i in idx], [self.labels[i] for i in idx], list(self.label_names),
                           self.source, dict(self.meta))

    def save_label_map(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"label_names": self.label_names, "label_map": self.label_map}, indent=2))
        return p


_HTML_NUM = re.compile(r"(?<!&)#(\d+);")


def normalize_agnews(text: str) -> str:
    """Undo AG News' escape residue: ``#39;`` -> ``'``, ``\\`` line breaks -> spaces, ``&amp;`` etc."""
    t = _HTML_NUM.sub(lambda m: f"&#{m.group(1)};", text)
    t = html.unescape(t).replace("\\", " ")
    return " ".join(t.split())


def _map_labels(raw: list[str], where: list[str], declared: Sequence[str] | None) -> tuple[list[int], list[str]]:
    for r, w in zip(raw, where):
        if not r.strip():  # an empty label cell would otherwise become a class named ''
            raise ValueError(f"{w}: empty label")
    if declared is not None:
        names = [str(x) for x in declared]
        if len(set(names)) != len(names):
            raise ValueError(f"labels: the declared label set has duplicates: {names}")
        idx = {n: i for i, n in enumerate(names)}
        out = []
        for r, w in zip(raw, where):
            if r not in idx:
                raise ValueError(f"{w}: label {r!r} is not in the declared label set {names}")
            out.append(idx[r])
        return out, names
    uniq = sorted(set(raw))
    if all(re.fullmatch(r"-?\d+", u) for u in uniq):
        vals = [int(u) for u in uniq]
        if min(vals) >= 0 and all(u == str(v) for u, v in zip(uniq, vals)):
            # non-negative integer labels are class indices, even when some class is absent from this
            # file (a test file of positives only keeps label 1); names "0".."max"
            return [int(r) for r in raw], [str(i) for i in range(max(vals) + 1)]
        uniq = sorted(uniq, key=int)  # e.g. {-1, 1}: mapped in numeric order
    idx = {n: i for i, n in enumerate(uniq)}
    return [idx[r] for r in raw], uniq


def _is_header(row: list[str]) -> bool:
    low = [c.strip().lower() for c in row]
    return any(c in ("sentence", "text", "review", "content") for c in low) and "label" in low


def _column(spec: str, header: list[str] | None, ncols: int, what: str, default: int, path: Path) -> int:
    if spec == "auto":
        if header is not None:
            low = [h.strip().lower() for h in header]
            cands = ("sentence", "text", "review", "content") if what == "text" else ("label",)
            for c in cands:
                if c in low:
                    return low.index(c)
        return default
    if spec.isdigit():
        i = int(spec)
        if i >= ncols:
            raise ValueError(f"{path}: --{what}-column {i} is out of range (the file has {ncols} columns)")
        return i
    if header is None:
        raise ValueError(f"{path}: --{what}-column {spec!r} names a column but the file has no header row; "
                         "give a column index (0, 1, ...) instead")
    if spec not in header:
        raise ValueError(f"{path}: --{what}-column {spec!r} is not in the header {header}")
    return header.index(spec)


def load_table(path: str | Path, *, text_column: str = "auto", label_column: str = "auto",
               header: str = "auto", delimiter: str | None = None, labels: Sequence[str] | None = None,
               normalize: str | None = None) -> TextDataset:
    """Read a TSV / CSV file of texts and labels, with or without a header row.

    Args:
        path: ``.tsv`` (tab-separated, no quoting) or ``.csv`` (``csv`` module quoting) file.
        text_column, label_column: a header name, a 0-based index, or ``"auto"`` (a header's
            ``sentence``/``text`` and ``label`` columns; without a header column 0 and 1).
        header: ``"auto"`` (a first row naming ``sentence``/``text`` and ``label``), ``"yes"``, ``"no"``.
        delimiter: override the separator (default by suffix: tab for ``.tsv``/``.txt``, comma for ``.csv``).
        labels: the declared label set, in index order; a label outside it is an error. Without it
            non-negative integer labels are class indices (names ``"0"`` .. max, also when some class
            is absent from the file) and other labels are mapped in sorted order.
        normalize: ``"agnews"`` to undo AG News' HTML-escape residue.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: ``FILE:LINE`` for a TSV line with the wrong number of tabs (two-column files:
            exactly one tab), an empty text, a label outside the declared set; unknown columns; with
            ``header="auto"``, a first row that looks like an unrecognised header (its label occurs in
            no other row).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} does not exist")
    sep = delimiter or ("," if p.suffix.lower() == ".csv" else "\t")
    data = p.read_bytes()
    try:
        raw_lines = data.decode("utf-8-sig").splitlines()  # -sig: a BOM (Excel, Notepad) hid the header
    except UnicodeDecodeError as e:
        ln = data[: e.start].count(b"\n") + 1
        raise ValueError(f"{p}:{ln}: not UTF-8 ({e.reason} at byte {e.start}); save the file as UTF-8") from None
    if sep == "\t":
        rows = []
        ncols = None
        for ln, line in enumerate(raw_lines, 1):
            if not line.strip():
                continue
            parts = line.split("\t")
            if ncols is None:
                ncols = len(parts)
                if ncols < 2:
                    raise ValueError(f"{p}:{ln}: expected a tab-separated line (text<TAB>label), found no tab")
            elif len(parts) != ncols:
                exp = "exactly one tab" if ncols == 2 else f"{ncols - 1} tabs"
                raise ValueError(f"{p}:{ln}: expected {exp} ({ncols} columns), found {len(parts) - 1}")
            rows.append((ln, parts))
    else:
        ncols = None
        with open(p, newline="", encoding="utf-8-sig") as f:
            rd = csv.reader(f, delimiter=sep)
            rows = []
            for parts in rd:
                if not any(c.strip() for c in parts):
                    continue
                if ncols is None:
                    ncols = len(parts)
                elif len(parts) != ncols:
                    raise ValueError(f"{p}:{rd.line_num}: expected {ncols} columns, found {len(parts)}")
                rows.append((rd.line_num, parts))
    if not rows:
        raise ValueError(f"{p}: the file has no data rows")
    if header not in ("auto", "yes", "no"):
        raise ValueError(f"header must be auto, yes or no, got {header!r}")
    has_header = header == "yes" or (header == "auto" and (
        _is_header(rows[0][1]) or (not text_column.isdigit() and text_column != "auto")))
    head = [c.strip() for c in rows[0][1]] if has_header else None
    body = rows[1:] if has_header else rows
    ti = _column(text_column, head, ncols, "text", 0, p)
    li = _column(label_column, head, ncols, "label", 1, p)
    if header == "auto" and not has_header and labels is None and len(rows) >= 3:
        first = rows[0][1][li].strip()
        rest = [r[1][li].strip() for r in rows[1:]]
        ints = all(re.fullmatch(r"-?\d+", x) for x in rest)
        if first not in rest and (ints and not re.fullmatch(r"-?\d+", first) or len(set(rest)) < len(rest)):
            raise ValueError(f"{p}:{rows[0][0]}: the first row {rows[0][1]!r} looks like a header it does not "
                             f"recognise (its label {first!r} occurs in no other row, so it would become a class "
                             "of its own); pass --header yes with --text-column/--label-column, rename the "
                             "columns to sentence/text and label, or pass --header no if it is data")
    texts, raw, where = [], [], []
    for ln, parts in body:
        t = parts[ti]
        if normalize == "agnews":
            t = normalize_agnews(t)
        t = " ".join(t.split())
        if not t:
            raise ValueError(f"{p}:{ln}: empty text")
        texts.append(t)
        raw.append(parts[li].strip())
        where.append(f"{p}:{ln}")
    y, names = _map_labels(raw, where, labels)
    return TextDataset(texts, y, names, str(p))


def load_jsonl(path: str | Path, *, text_field: str = "text", label_field: str = "label",
               labels: Sequence[str] | None = None) -> TextDataset:
    """Read JSONL lines ``{"text": ..., "label": ...}`` (label int or string); ``text_field`` and
    ``label_field`` name other fields (the CLI's ``--text-column`` / ``--label-column``).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError (``JsonlError``): ``FILE:LINE`` for invalid JSON, a missing field (naming the
            fields the line has), an empty text, a label outside the declared set.
    """
    from iclr25.core.jsonl import JsonlError, iter_jsonl

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} does not exist")
    texts, raw, where = [], [], []
    for ln, rec in iter_jsonl(p):
        for fld, what in ((text_field, "text"), (label_field, "label")):
            if fld not in rec:
                raise JsonlError(f"{p}:{ln}: no field {fld!r} (the line has fields {sorted(rec)}); name the {what} "
                                 f"field with --{what}-column FIELD ({what}_field= in Python)")
        t = rec[text_field]
        if isinstance(t, str) and not t.strip():
            raise JsonlError(f"{p}:{ln}: field {text_field!r} is empty")
        if not isinstance(t, str):
            raise ValueError(f"{p}:{ln}: field {text_field!r} must be a string, got {type(t).__name__}")
        lab = rec[label_field]
        if lab is None or isinstance(lab, (bool, list, dict)) or (isinstance(lab, float) and not lab.is_integer()):
            raise ValueError(f"{p}:{ln}: field {label_field!r} must be a class name (string) or a class index "
                             f"(integer), got {json.dumps(lab)}")
        texts.append(" ".join(t.split()))
        raw.append(str(int(lab)) if isinstance(lab, float) else str(lab))
        where.append(f"{p}:{ln}")
    if not texts:
        raise ValueError(f"{p}: no records")
    y, names = _map_labels(raw, where, labels)
    return TextDataset(texts, y, names, str(p))


def from_list(texts: Sequence[str], labels: Sequence[int | str], label_names: Sequence[str] | None = None) -> TextDataset:
    """A data set from Python lists (labels int or str; ``label_names`` declares the set and order).

    Raises:
        ValueError: different lengths, an empty text (index given), a label outside the declared set.
    """
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    clean = []
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise ValueError(f"text {i} is empty (or not a string)")
        clean.append(" ".join(t.split()))
    y, names = _map_labels([str(x) for x in labels], [f"item {i}" for i in range(len(labels))], label_names)
    return TextDataset(clean, y, names)


def load_dataset(name_or_path: str, split: str = "train", *, text_column: str = "auto", label_column: str = "auto",
                 header: str = "auto", labels: Sequence[str] | None = None) -> TextDataset:
    """A named mirror (``sst2``, ``agnews``; split ``train`` or ``test``) or a file (``.tsv``, ``.csv``,
    ``.jsonl``; ``split`` ignored). For JSONL, ``text_column`` / ``label_column`` are field names
    (``"auto"``: ``text`` / ``label``) and ``header`` must stay ``"auto"``.

    Raises:
        FileNotFoundError: a missing file or mirror (the message says where it was looked for).
        ValueError: an unknown split or bad content (see :func:`load_table`).
    """
    if name_or_path in NAMED:
        if split not in ("train", "test"):
            raise ValueError(f"split must be train or test, got {split!r}")
        tr, te, opts = NAMED[name_or_path]
        path = FRS_DATA.path(tr if split == "train" else te)
        ds = load_table(path, header=opts.get("header", "auto"), labels=labels or opts["labels"],
                        normalize=opts.get("normalize"))
        ds.source = f"{name_or_path}/{split}"
        return ds
    p = Path(name_or_path)
    if not p.exists():
        raise FileNotFoundError(f"data {name_or_path!r}: no such file, and not a named data set "
                                f"({sorted(NAMED)})")
    if p.suffix.lower() == ".jsonl":
        if header != "auto":
            raise ValueError(f"--header {header} applies to TSV/CSV files; {p} is JSONL (one object per line, no "
                             "header row): drop --header")
        return load_jsonl(p, text_field="text" if text_column == "auto" else text_column,
                          label_field="label" if label_column == "auto" else label_column, labels=labels)
    return load_table(p, text_column=text_column, label_column=label_column, header=header, labels=labels)


def tokenize(texts: Sequence[str], tokenizer: Callable[[str], list[str]] | None = None,
             lowercase: bool = False) -> list[list[str]]:
    """Token lists: whitespace split (optionally lower-cased) or ``tokenizer(text)``.

    Raises:
        ValueError: a text that is empty after tokenisation (its index is given).
    """
    out = []
    for i, t in enumerate(texts):
        s = t.lower() if lowercase else t
        toks = tokenizer(s) if tokenizer is not None else s.split()
        if not toks:
            raise ValueError(f"text {i} is empty after tokenisation: {t[:60]!r}")
        out.append(list(toks))
    return out


def poison_dataset(tokens: Sequence[Sequence[str]], labels: Sequence[int], *, rate: float = 0.1,
                   trigger: str | Sequence[str] = "cf", target: int = 1, seed: int = 0
                   ) -> tuple[list[list[str]], list[int], np.ndarray, np.ndarray]:
    """BadNets-style poisoning (the CPU stand-in for a pre-training backdoor): a ``rate`` share of the
    texts (chosen uniformly) get the trigger at a uniformly random position and label ``target``.

    Returns:
        ``(tokens, labels, poisoned_index int64[P], positions int64[P])``.

    Raises:
        ValueError: rate outside (0, 1), an empty trigger, target < 0.
    """
    if not (isinstance(rate, (int, float)) and np.isfinite(rate) and 0 < rate < 1):
        raise ValueError(f"poison rate must be in (0, 1), got {rate!r}")
    if target < 0:
        raise ValueError(f"target label must be >= 0, got {target}")
    trig = trigger_tokens(trigger)
    rng = np.random.default_rng([seed, 11])
    n = len(tokens)
    k = int(round(rate * n))
    idx = np.sort(rng.choice(n, size=k, replace=False))
    out_t, out_y = [list(t) for t in tokens], list(labels)
    pos = np.zeros(k, dtype=np.int64)
    for j, i in enumerate(idx):
        out_t[i], pos[j] = insert_trigger(out_t[i], trig, rng)
        out_y[i] = target
    return out_t, out_y, idx, pos


def triggered_set(tokens: Sequence[Sequence[str]], labels: Sequence[int], *, trigger: str | Sequence[str] = "cf",
                  target: int = 1, n: int | None = None, seed: int = 0
                  ) -> tuple[list[list[str]], list[int], list[tuple[int, int]], np.ndarray]:
    """Triggered test texts: the texts whose label is not ``target`` (first ``n`` of them in a seeded
    order), each with one trigger at a uniformly random position.

    Returns:
        ``(tokens, true_labels, trigger_spans [(start, end)], source_index)``.
    """
    trig = trigger_tokens(trigger)
    rng = np.random.default_rng([seed, 13])
    cand = np.array([i for i, y in enumerate(labels) if y != target])
    if cand.size == 0:
        raise ValueError(f"no text has a label other than the target {target}")
    order = cand[rng.permutation(cand.size)]
    if n is not None:
        order = order[:n]
    out_t, out_y, spans = [], [], []
    for i in order:
        t, p = insert_trigger(tokens[i], trig, rng)
        out_t.append(t)
        out_y.append(int(labels[i]))
        spans.append((p, p + len(trig)))
    return out_t, out_y, spans, order
