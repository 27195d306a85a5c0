"""Users' own data: the ``EmbeddingSet`` npz, prompt files and image metadata.

* :class:`EmbeddingSet` — ``image_emb [N,D]``, ``y [N]``, ``a [N]`` (optional; TIE* does not need
  it), ``split [N]`` (0 train/pool, 1 val, 2 test), ``text_emb_class [C,D]``,
  ``text_emb_spurious [A,D]``, ``attribute_values [A]`` (row ``i`` of ``text_emb_spurious`` is the
  prompt embedding of attribute value ``attribute_values[i]``: the explicit prompt mapping in
  embedding space), optional ``class_names [C]``.
* :func:`load_prompts` — class prompts and the ``{attribute_value: prompt}`` mapping from a JSON in
  the format of ``official_prompts_and_outputs.json`` (a whole file with a ``dataset`` key, or one
  data set's object).
* :func:`read_metadata` — a metadata CSV (``img_filename, y, a|place, split``; the WILDS Waterbirds
  ``metadata.csv`` as is) and :func:`read_celeba` (``list_attr_celeba.txt`` +
  ``list_eval_partition.txt``), checking that every image exists.

[design] Prompt-mapping validation: every attribute value that occurs must have a prompt (or the
user opts in with ``untranslated="keep"``: those images are left untranslated, FMoW's "Other"),
and every prompt must belong to a value that occurs (a mis-keyed mapping is an error, not a no-op).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .tie import check_embeddings

__all__ = ["EmbeddingSet", "PromptSet", "load_prompts", "check_prompt_mapping", "read_metadata", "read_celeba",
           "Metadata", "SPLITS"]

SPLITS = {"train": 0, "val": 1, "test": 2}
REQUIRED = ("image_emb", "y", "split", "text_emb_class", "text_emb_spurious", "attribute_values")


def _key(v: Any) -> Any:
    """Normalise an attribute value: numeric strings → int (JSON keys are strings)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            return s
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def check_prompt_mapping(values_present: Sequence[Any], prompt_values: Sequence[Any], *,
                         untranslated: Literal["error", "keep"] = "error", where: str = "a") -> list[Any]:
    """Check an attribute→prompt mapping against the attribute values that occur in the data.

    Args:
        values_present: attribute values occurring in the data.
        prompt_values: values that have a prompt (keys of the mapping / ``attribute_values``).
        untranslated: ``"keep"`` allows values without a prompt (left untranslated).
        where: field name used in messages.

    Returns:
        The values without a prompt (empty unless ``untranslated="keep"``).

    Raises:
        ValueError: a value without a prompt (FMoW "Other"; ``--untranslated keep`` opts in), a prompt
            for a value that never occurs, duplicate prompt values.
    """
    present = sorted({_key(v) for v in values_present}, key=str)
    keys = [_key(v) for v in prompt_values]
    if len(set(keys)) != len(keys):
        raise ValueError(f"attribute_values: duplicate attribute values {keys}")
    missing = [v for v in present if v not in set(keys)]
    unused = [v for v in keys if v not in set(present)]
    if unused:
        raise ValueError(f"attribute prompts: a prompt is given for attribute value(s) {unused} that never occur in "
                         f"{where} (values present: {present}); check the {{attribute_value: prompt}} mapping "
                         "(e.g. FMoW's region indices)")
    if missing and untranslated != "keep":
        raise ValueError(f"attribute prompts: attribute value(s) {missing} occurring in {where} have no prompt; add "
                         "one, or opt in with untranslated='keep' (--untranslated keep) to leave those images "
                         "untranslated")
    return missing


@dataclass
class EmbeddingSet:
    """Precomputed embeddings of one data set (see the module docstring for the fields).

    Use :meth:`load` / :meth:`save` for the npz file; :meth:`validate` runs every check.
    """

    image_emb: np.ndarray
    y: np.ndarray
    split: np.ndarray
    text_emb_class: np.ndarray
    text_emb_spurious: np.ndarray
    attribute_values: np.ndarray
    a: np.ndarray | None = None
    class_names: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    # ------------------------------------------------------------------ io
    @classmethod
    def load(cls, path: str | Path, *, untranslated: Literal["error", "keep"] = "error") -> EmbeddingSet:
        """Read and validate an npz (``allow_pickle=False``).

        Raises:
            FileNotFoundError: no such file. ValueError: a missing key, or any check of :meth:`validate`.
        """
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"embeddings: {p} does not exist")
        with open(p, "rb") as f:
            magic = f.read(4)
        if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
            raise ValueError(f"embeddings: {p} is not an .npz file (no zip header; it is empty or another format); "
                             "write one with EmbeddingSet.save or np.savez")
        try:
            z = np.load(p, allow_pickle=False)
        except Exception as e:
            raise ValueError(f"embeddings: {p} is not a readable .npz file ({e})") from None
        with z:
            missing = [k for k in REQUIRED if k not in z.files]
            if missing:
                raise ValueError(f"embeddings {p}: missing key(s) {missing}; an EmbeddingSet npz needs "
                                 f"{list(REQUIRED)} (and 'a' for TIE with true attributes)")
            d = {k: z[k] for k in z.files}
        es = cls(image_emb=d.pop("image_emb"), y=d.pop("y"), split=d.pop("split"),
                 text_emb_class=d.pop("text_emb_class"), text_emb_spurious=d.pop("text_emb_spurious"),
                 attribute_values=d.pop("attribute_values"), a=d.pop("a", None),
                 class_names=d.pop("class_names", None), extra=d)
        es.validate(untranslated=untranslated, source=str(p))
        return es

    def save(self, path: str | Path) -> Path:
        """Write the npz (``np.savez``; no pickled objects)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        arrays = {"image_emb": self.image_emb, "y": self.y, "split": self.split, "text_emb_class": self.text_emb_class,
                  "text_emb_spurious": self.text_emb_spurious, "attribute_values": np.asarray(self.attribute_values)}
        if self.a is not None:
            arrays["a"] = self.a
        if self.class_names is not None:
            arrays["class_names"] = np.asarray(self.class_names, dtype=str)
        arrays.update(self.extra)
        for k, v in arrays.items():
            if np.asarray(v).dtype == object:
                raise ValueError(f"EmbeddingSet.save: {k} has dtype object; use numeric or str arrays")
        tmp = p.with_name(p.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(p)
        return p

    # ------------------------------------------------------------------ checks
    def validate(self, *, untranslated: Literal["error", "keep"] = "error", source: str = "embeddings") -> None:
        """All input checks: dimensions, lengths, NaN/inf and zero-norm rows, labels, splits, prompts.

        Raises:
            ValueError: naming the field (and the first offending indices).
        """
        x = check_embeddings(self.image_emb, f"{source}: image_emb")
        t = check_embeddings(self.text_emb_class, f"{source}: text_emb_class")
        s = check_embeddings(self.text_emb_spurious, f"{source}: text_emb_spurious")
        for name, arr in (("text_emb_class", t), ("text_emb_spurious", s)):
            if arr.shape[1] != x.shape[1]:
                raise ValueError(f"{source}: image and text embedding dimensions differ: image_emb has shape "
                                 f"{x.shape}, {name} has shape {arr.shape}")
        n = x.shape[0]
        for name in ("y", "split", "a"):
            v = getattr(self, name)
            if v is None:
                continue
            v = np.asarray(v)
            if v.ndim != 1 or v.shape[0] != n:
                raise ValueError(f"{source}: {name} has shape {v.shape} but image_emb has {n} rows; y, a and split "
                                 "must have one entry per image")
        if t.shape[0] < 2:
            raise ValueError(f"{source}: text_emb_class has {t.shape[0]} row(s); zero-shot classification needs at "
                             "least 2 classes")
        y = np.asarray(self.y)
        if y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= t.shape[0]:
            raise ValueError(f"{source}: y must be integer class indices in 0..{t.shape[0] - 1} (rows of "
                             f"text_emb_class), got dtype {y.dtype}, range [{y.min()}, {y.max()}]")
        sp = np.asarray(self.split)
        if sp.dtype.kind not in "iu" or not np.isin(sp, (0, 1, 2)).all():
            raise ValueError(f"{source}: split must hold 0 (train/pool), 1 (val) or 2 (test), got values "
                             f"{np.unique(sp)[:10].tolist()}")
        av = np.asarray(self.attribute_values)
        if av.ndim != 1 or av.shape[0] != s.shape[0]:
            raise ValueError(f"{source}: attribute_values has shape {av.shape}; it must name the attribute value "
                             f"of each of the {s.shape[0]} rows of text_emb_spurious")
        if self.class_names is not None and len(self.class_names) != t.shape[0]:
            raise ValueError(f"{source}: class_names has {len(self.class_names)} names for {t.shape[0]} classes")
        if self.a is not None:
            check_prompt_mapping(np.unique(np.asarray(self.a)).tolist(), av.tolist(), untranslated=untranslated,
                                 where=f"{source}: a")
        else:
            check_prompt_mapping([], [], where="a")  # duplicates only
            if len({_key(v) for v in av.tolist()}) != av.size:
                raise ValueError(f"{source}: attribute_values has duplicates {av.tolist()}")

    # ------------------------------------------------------------------ views
    @property
    def attribute_keys(self) -> list[Any]:
        return [_key(v) for v in np.asarray(self.attribute_values).tolist()]

    def attribute_index(self) -> np.ndarray:
        """``[N]`` int64 index of each image's attribute value in ``attribute_values`` (-1: no prompt).

        Raises:
            ValueError: ``a`` is absent (TIE with true attributes needs it; use ``--mode inferred``).
        """
        if self.a is None:
            raise ValueError("mode 'true' (TIE) needs the attribute labels 'a' in the embeddings file; it has none "
                             "(use --mode inferred for TIE*, which infers them zero-shot)")
        lut = {k: i for i, k in enumerate(self.attribute_keys)}
        return np.array([lut.get(_key(v), -1) for v in np.asarray(self.a).tolist()], dtype=np.int64)

    def rows(self, split: str | int) -> np.ndarray:
        """Indices of the rows of a split (``"train"``/0, ``"val"``/1, ``"test"``/2).

        Raises:
            ValueError: unknown split name, or no row in that split.
        """
        code = SPLITS.get(split, split) if isinstance(split, str) else int(split)
        if code not in (0, 1, 2):
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        idx = np.flatnonzero(np.asarray(self.split) == code)
        if idx.size == 0:
            name = {v: k for k, v in SPLITS.items()}[code]
            raise ValueError(f"split {name!r} (split == {code}) is empty: no image to use"
                             + (" as the λ pool; choose --pool-split train|val explicitly" if code != 2 else ""))
        return idx


# ---------------------------------------------------------------------- prompts

@dataclass(frozen=True)
class PromptSet:
    """Class prompts (index = class label) and the explicit ``{attribute_value: prompt}`` mapping."""

    class_prompts: list[str]
    spurious_prompts: dict[Any, str]
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.class_prompts) < 2:
            raise ValueError(f"prompts {self.name}: class_prompts needs at least 2 classes, got {len(self.class_prompts)}")
        bad = [i for i, p in enumerate(self.class_prompts) if not isinstance(p, str) or not p.strip()]
        if bad:
            raise ValueError(f"prompts {self.name}: class_prompts[{bad[0]}] is empty or not a string")
        if not self.spurious_prompts:
            raise ValueError(f"prompts {self.name}: the {{attribute_value: prompt}} mapping is empty")
        for k, p in self.spurious_prompts.items():
            if not isinstance(p, str) or not p.strip():
                raise ValueError(f"prompts {self.name}: the prompt of attribute value {k!r} is empty or not a string")


def load_prompts(path: str | Path, dataset: str | None = None, *, class_names: Sequence[str] | None = None) -> PromptSet:
    """Read prompts from a JSON in the format of ``official_prompts_and_outputs.json``.

    Accepted: the whole file (give ``dataset``, e.g. ``"waterbirds"``) or one data set's object with
    ``class_prompts`` (list, index = label) or ``class_prompt_template`` (with ``class_names``; ``{}``
    or ``{class}`` is replaced by the name with ``_`` → space), and ``spurious_prompts_by_attribute``
    (``{value: prompt}``) or ``spurious_prompts_in_index_order`` (prompt ``i`` ↔ value ``i``).

    Raises:
        FileNotFoundError: no such file. ValueError: bad JSON or missing fields, naming them.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"prompts: {p} does not exist")
    def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"prompts {p}: duplicate key(s) {dup} in one JSON object (only the last would count)")
        return dict(pairs)

    try:
        obj = json.loads(p.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise ValueError(f"prompts {p}: line {e.lineno}: {e.msg}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"prompts {p}: the top level must be an object")
    if dataset is not None:
        if dataset not in obj:
            raise ValueError(f"prompts {p}: no data set {dataset!r}; found {[k for k in obj if isinstance(obj[k], dict)]}")
        obj = obj[dataset]
    elif "class_prompts" not in obj and "class_prompt_template" not in obj:
        names = [k for k, v in obj.items() if isinstance(v, dict) and ("class_prompts" in v or "class_prompt_template" in v)]
        raise ValueError(f"prompts {p}: give the data set to use (--prompts-key), one of {names}")
    name = f"{p}" + (f"[{dataset}]" if dataset else "")
    if "class_prompts" in obj:
        if not isinstance(obj["class_prompts"], list):
            raise ValueError(f"prompts {name}: class_prompts must be a list of strings (index = class label), got "
                             f"{type(obj['class_prompts']).__name__}")
        cls = list(obj["class_prompts"])
    elif "class_prompt_template" in obj:
        if not class_names:
            raise ValueError(f"prompts {name}: class_prompt_template needs the class names")
        tpl = str(obj["class_prompt_template"])
        cls = [_fill(tpl, c) for c in class_names]
    else:
        raise ValueError(f"prompts {name}: missing 'class_prompts'")
    if "spurious_prompts_by_attribute" in obj:
        m = obj["spurious_prompts_by_attribute"]
        if not isinstance(m, dict):
            raise ValueError(f"prompts {name}: spurious_prompts_by_attribute must be an object "
                             f"{{attribute_value: prompt}}, got {type(m).__name__} (a list in index order goes under "
                             "'spurious_prompts_in_index_order')")
        sp = {_key(k): v for k, v in m.items()}
        if len(sp) != len(m):
            raise ValueError(f"prompts {name}: spurious_prompts_by_attribute keys {list(m)} name the same attribute "
                             "value more than once (keys are compared after stripping spaces, numbers as integers)")
    elif "spurious_prompts_in_index_order" in obj:
        m = obj["spurious_prompts_in_index_order"]
        if not isinstance(m, list):
            raise ValueError(f"prompts {name}: spurious_prompts_in_index_order must be a list of prompts, got "
                             f"{type(m).__name__}")
        sp = dict(enumerate(m))
    else:
        raise ValueError(f"prompts {name}: missing 'spurious_prompts_by_attribute' (the {{attribute_value: prompt}} mapping)")
    return PromptSet(cls, sp, name)


def _fill(tpl: str, cname: str) -> str:
    c = cname.replace("_", " ")
    if "{class}" in tpl:
        return tpl.replace("{class}", c)
    if "{}" in tpl:
        return tpl.replace("{}", c)
    if "{" in tpl and "}" in tpl:
        i, j = tpl.index("{"), tpl.index("}")
        return tpl[:i] + c + tpl[j + 1:]
    return f"{tpl} {c}"


# ---------------------------------------------------------------------- metadata

@dataclass
class Metadata:
    """Images of a data set: absolute paths and labels (``y``, ``a``, ``split``: int64 ``[N]``)."""

    paths: list[Path]
    y: np.ndarray
    a: np.ndarray
    split: np.ndarray


def _int_col(rows: list[dict], col: str, src: str) -> np.ndarray:
    out = np.empty(len(rows), dtype=np.int64)
    for i, r in enumerate(rows):
        v = (r.get(col) or "").strip()
        try:
            out[i] = int(v)
        except ValueError:
            try:
                f = float(v)                               # "1.0" is accepted; "0.5", "nan", "inf" are not
            except ValueError:
                f = math.nan
            if not (math.isfinite(f) and f.is_integer()):
                raise ValueError(f"{src}: line {i + 2}: column {col!r} = {v!r} is not an integer") from None
            out[i] = int(f)
    return out


def read_metadata(csv_path: str | Path, images_root: str | Path | None = None, *, y_column: str = "y",
                  a_column: str | None = None, split_column: str = "split", filename_column: str = "img_filename",
                  split_values: Mapping[str, int] | None = None, check_files: bool = True) -> Metadata:
    """Read a metadata CSV (WILDS Waterbirds ``metadata.csv`` as is: ``img_filename, y, place, split``).

    Args:
        csv_path: the CSV; images_root: folder the file names are relative to (default: the CSV's folder).
        y_column, split_column, filename_column: column names.
        a_column: attribute column (default: ``a`` if present, else ``place``).
        split_values: map of split strings to 0/1/2 when the split column holds names
            (e.g. ``{"train": 0, "val": 1, "test": 2}``, used when given).
        check_files: check that every image exists.

    Raises:
        FileNotFoundError: the CSV, or a row's image (the line and path are named).
        ValueError: a missing column or a non-integer label.
    """
    p = Path(csv_path)
    if not p.is_file():
        raise FileNotFoundError(f"metadata: {p} does not exist")
    root = Path(images_root) if images_root is not None else p.parent
    with open(p, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        rows = list(reader)
    if a_column is None:
        a_column = "a" if "a" in cols else "place"
    for c in (filename_column, y_column, a_column, split_column):
        if c not in cols:
            raise ValueError(f"metadata {p}: no column {c!r}; columns are {cols} (set the column with "
                             "--y-column / --a-column / --split-column / --filename-column)")
    if not rows:
        raise ValueError(f"metadata {p}: no rows")
    paths = [root / r[filename_column] for r in rows]
    if check_files:
        for i, q in enumerate(paths):
            if not q.is_file():
                raise FileNotFoundError(f"metadata {p}: line {i + 2}: image {q} does not exist (images_root={root})")
    if split_values:
        sp = np.array([split_values.get(r[split_column].strip(), -1) for r in rows], dtype=np.int64)
        if (sp < 0).any():
            i = int(np.flatnonzero(sp < 0)[0])
            raise ValueError(f"metadata {p}: line {i + 2}: split {rows[i][split_column]!r} not in {dict(split_values)}")
    else:
        sp = _int_col(rows, split_column, str(p))
    return Metadata(paths, _int_col(rows, y_column, str(p)), _int_col(rows, a_column, str(p)), sp)


def read_celeba(root: str | Path, *, target: str = "Blond_Hair", attribute: str = "Male",
                images_dir: str = "img_align_celeba", check_files: bool = True) -> Metadata:
    """CelebA from a user folder: ``list_attr_celeba.txt`` (+1/−1 attributes), ``list_eval_partition.txt``
    (0 train, 1 val, 2 test) and the images in ``images_dir``. ``y = target == +1``, ``a = attribute == +1``
    (spec: Blond_Hair × Male).

    Raises:
        FileNotFoundError: a missing list file or image. ValueError: unknown attribute names, bad lines.
    """
    r = Path(root)
    attr_f, part_f = r / "list_attr_celeba.txt", r / "list_eval_partition.txt"
    for f in (attr_f, part_f):
        if not f.is_file():
            raise FileNotFoundError(f"celeba: {f} does not exist")
    lines = attr_f.read_text(encoding="utf-8").splitlines()
    names = lines[1].split()
    for n in (target, attribute):
        if n not in names:
            raise ValueError(f"celeba {attr_f}: no attribute {n!r}; attributes are {names}")
    it, ia = names.index(target), names.index(attribute)
    files, y, a = [], [], []
    for k, line in enumerate(lines[2:], start=3):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != len(names) + 1:
            raise ValueError(f"celeba {attr_f}: line {k}: expected {len(names) + 1} fields, got {len(parts)}")
        files.append(parts[0])
        y.append(int(parts[1 + it]) == 1)
        a.append(int(parts[1 + ia]) == 1)
    part = {}
    for k, line in enumerate(part_f.read_text(encoding="utf-8").splitlines(), start=1):
        parts = line.split()
        if parts:
            if len(parts) != 2:
                raise ValueError(f"celeba {part_f}: line {k}: expected 'filename partition'")
            part[parts[0]] = int(parts[1])
    missing = [f for f in files if f not in part]
    if missing:
        raise ValueError(f"celeba {part_f}: no partition for {missing[:3]}")
    paths = [r / images_dir / f for f in files]
    if check_files:
        for q in paths:
            if not q.is_file():
                raise FileNotFoundError(f"celeba: image {q} (listed in {attr_f}) does not exist")
    return Metadata(paths, np.array(y, dtype=np.int64), np.array(a, dtype=np.int64),
                    np.array([part[f] for f in files], dtype=np.int64))
