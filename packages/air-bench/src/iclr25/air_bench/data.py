"""Loaders: prompts, judge templates, taxonomy and the GPT-4o-graded responses.

The mirrored files (``$ICLR25_DATA/air-bench/``, see its PROVENANCE.md) are declared in
:data:`AIR_BENCH` with their sha256. The full 5,694-prompt set lives only on the Hugging Face hub
(``stanford-crfm/air-bench-2024``, config ``default``, split ``test``); :func:`load_prompts` reads it
with ``datasets`` (extra ``[hub]``) from the hub or its local cache. Without ``datasets``, or offline
without a cached copy, ``"hf"`` is an error that names the fix; the mirrored 632-prompt sample is
only used when asked for explicitly (``"mirror"``). :func:`prompt_set_info` gives the source, count
and sha256 of a prompt set, which every run records.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from iclr25.core.data import DatasetSpec, RemoteFile

from .scoring import Convention, JudgeTemplate, resolve_convention
from .taxonomy import Taxonomy, check_cate_idx, split_cate_idx

__all__ = [
    "AIR_BENCH",
    "HF_DATASET",
    "HF_REVISION",
    "PromptItem",
    "prompt_id",
    "load_prompts",
    "load_judge_templates",
    "load_taxonomy",
    "load_graded_responses",
    "read_jsonl",
    "prompt_set_info",
    "PromptSourceError",
]


class PromptSourceError(ValueError):
    """The requested prompt set cannot be loaded (``datasets`` missing, hub offline without a cache)."""

log = logging.getLogger(__name__)

HF_DATASET = "stanford-crfm/air-bench-2024"
#: HF revision of the ``default`` config with 5,694 rows (see the spec).
HF_REVISION = "58d507aa176c4b6a46d2050645eb0ee6ae71442c"  # == config.HF_REVISION (kept light for --help)
_SRC = "https://github.com/stanford-crfm/air-bench-2024"

AIR_BENCH = DatasetSpec(
    "air-bench",
    files=(
        RemoteFile("taxonomy.csv", _SRC,
                   "128ea2a81f86b002ba01daece9b588defd8c9fe0b52f6d229932661bda71799a", direct=False),
        RemoteFile("judge_prompts_2024-06.csv", _SRC,
                   "b4f7d37bd62ab0166b24f71bc239d276af902a894519c3bf82155cf7d36f3d1d", direct=False),
        RemoteFile("prompts_sample.jsonl", _SRC,
                   "ef49866cddae1f0a3271a51e3c4dc6cc0790f372b7391e30608d8c737d0f9e00", direct=False),
        RemoteFile("graded_responses.jsonl", _SRC,
                   "3cc214ada3e6fbf246475ba8cb3740875bc248be090f7629fca82a6c4a9aa757", direct=False),
    ),
    description="AIR-Bench 2024 mirror: taxonomy, June-2024 judge templates, 632-prompt sample, "
    "557 GPT-4o-graded responses.",
)


@dataclass(frozen=True)
class PromptItem:
    """One benchmark prompt (a single user turn).

    Args:
        id: stable id ``"<cate-idx>/<12 hex of sha256(prompt)>"`` (order-independent, so a subset or a
            reordered file keeps its cache keys).
        cate_idx: level-4 category id (``"<l2>.<l3>.<l4>"``).
        l2_name, l3_name, l4_name: category names.
        prompt: the text sent to the model.
    """

    id: str
    cate_idx: str
    l2_name: str
    l3_name: str
    l4_name: str
    prompt: str

    @property
    def l2(self) -> str:
        return split_cate_idx(self.cate_idx)[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prompt_id(cate_idx: str, prompt: str) -> str:
    """The stable id of a prompt: ``"<cate-idx>/<first 12 hex of sha256(prompt utf-8)>"``."""
    return f"{cate_idx}/{hashlib.sha256(prompt.encode('utf-8')).hexdigest()[:12]}"


def read_jsonl(path: str | Path, *, torn_tail: str = "error") -> list[dict[str, Any]]:
    """Read a JSON-lines file (the core's line-numbered reader).

    Args:
        path: the file.
        torn_tail: ``"drop"`` skips a last line cut off by a crash (with a warning).

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming the file and line of a malformed line.
    """
    from iclr25.core.jsonl import read_jsonl as _read

    return _read(path, torn_tail=torn_tail)  # type: ignore[arg-type]


def prompt_set_info(items: Iterable[PromptItem], source: str) -> dict[str, Any]:
    """``{"source", "count", "sha256"}`` of a prompt set: the sha256 is over the sorted prompt ids
    (each id hashes its category and text), so the same prompts in another order hash the same."""
    ids = sorted(it.id for it in items)
    h = hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()
    return {"source": source, "count": len(ids), "sha256": h}


def _items_from_rows(rows: Iterable[dict[str, Any]], source: str) -> list[PromptItem]:
    items: list[PromptItem] = []
    seen: Counter[str] = Counter()
    for i, r in enumerate(rows, start=1):
        try:
            cate = check_cate_idx(str(r["cate-idx"]), f"{source}: row {i}")
            prompt = r["prompt"]
        except KeyError as e:
            raise ValueError(f"{source}: row {i}: missing field {e}; need 'cate-idx' and 'prompt'") from None
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{source}: row {i}: 'prompt' must be a non-empty string")
        pid = prompt_id(cate, prompt)
        seen[pid] += 1
        if seen[pid] > 1:  # identical prompt twice in a category: keep both, distinct ids
            pid = f"{pid}-{seen[pid]}"
        items.append(PromptItem(pid, cate, r.get("l2-name", ""), r.get("l3-name", ""), r.get("l4-name", ""),
                                prompt))
    return items


def _load_hf(dataset_id: str, revision: str | None) -> list[PromptItem]:
    try:
        from datasets import load_dataset  # optional dependency: extra [hub]
    except ImportError:
        raise PromptSourceError(
            "--prompts hf (the full 5,694-prompt benchmark, the default) needs the `datasets` package: "
            "pip install 'iclr25-air-bench[hub]'. Or pass --prompts mirror for the 632-prompt sample "
            "(not comparable with the paper's numbers) or --prompts FILE.jsonl") from None
    try:
        ds = load_dataset(dataset_id, "default", split="test", revision=revision)
    except Exception as e:  # noqa: BLE001 - offline without a cache, hub errors
        raise PromptSourceError(
            f"the full prompt set {dataset_id}@{(revision or 'main')[:10]} could not be loaded "
            f"({type(e).__name__}: {str(e)[:200]}). Online: check the network or the revision; offline "
            "(HF_DATASETS_OFFLINE=1): load it once with network access so it is cached, or pass "
            "--prompts FILE.jsonl, or --prompts mirror for the 632-prompt sample") from None
    return _items_from_rows(ds, f"{dataset_id}@{revision}")


def load_prompts(source: str | Path | None = None, *, revision: str | None = HF_REVISION,
                 categories: Iterable[str] | None = None, limit: int | None = None) -> list[PromptItem]:
    """Load AIR-Bench prompts.

    Args:
        source: a ``.jsonl`` / ``.csv`` file (columns ``cate-idx, l2-name, l3-name, l4-name, prompt``),
            ``"mirror"`` (the 632-prompt sample under ``$ICLR25_DATA``), ``"hf"`` or a hub id
            ``"stanford-crfm/air-bench-2024"`` (the full 5,694 prompts via ``datasets``, extra
            ``[hub]``; never silently replaced by the sample), or ``None`` (= ``"hf"``).
        revision: hub revision (pinned by default).
        categories: keep prompts whose ``cate-idx`` equals one of these or starts with one of them
            followed by a dot (``"3"`` = level-2 category 3, ``"3.8"`` = level-3, ``"3.8.1"`` = leaf).
        limit: keep at most this many prompts after filtering (file order).

    Returns:
        ``list[PromptItem]``.

    Raises:
        ValueError: malformed file (file, row, field), an unknown category id, or ``categories``
            selecting nothing.
        PromptSourceError: ``"hf"`` without ``datasets`` or without access to the hub or its cache.
        iclr25.core.data.DataNotFoundError: mirror file missing.
    """
    src = "hf" if source is None else str(source)
    if src in ("hf", HF_DATASET):
        items = _load_hf(HF_DATASET, revision)
    elif src == "mirror":
        items = _items_from_rows(read_jsonl(AIR_BENCH.path("prompts_sample.jsonl")), "prompts_sample.jsonl")
    elif src not in ("hf", HF_DATASET):
        p = Path(src)
        if not p.is_file():
            raise FileNotFoundError(f"prompt file {p} does not exist (or pass 'mirror' / 'hf')")
        if p.suffix == ".csv":
            with open(p, newline="", encoding="utf-8") as fh:
                items = _items_from_rows(list(csv.DictReader(fh)), str(p))
        else:
            items = _items_from_rows(read_jsonl(p), str(p))
        if not items:
            raise ValueError(f"prompt file {p}: no prompts (the file has no rows)")
    if categories:
        cats = [str(c).strip() for c in categories if str(c).strip()]
        check_category_filters(cats)
        items = [it for it in items if any(it.cate_idx == c or it.cate_idx.startswith(c + ".") for c in cats)]
        if not items:
            raise ValueError(f"--categories {cats} selects no prompt (use ids like '3', '3.8' or '3.8.1')")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        items = items[:limit]
    return items


def check_category_filters(cats: Iterable[str]) -> None:
    """Check ``--categories`` ids (``"3"``, ``"3.8"``, ``"3.8.1"``) against the taxonomy.

    Raises:
        ValueError: an id that names no AIR 2024 category at its level.
    """
    from .taxonomy import LEAF_IDS, level3_leaves_hint

    l3s = {c.rsplit(".", 1)[0] for c in LEAF_IDS}
    for c in cats:
        n = c.count(".")
        ok = (n == 0 and c.isdigit() and 1 <= int(c) <= 16) or (n == 1 and c in l3s) or (n == 2 and c in LEAF_IDS)
        if not ok:
            head = c.split(".")[0]
            valid = ""
            if n >= 1 and head.isdigit() and 1 <= int(head) <= 16:
                if n == 1:
                    valid = f"; {level3_leaves_hint(head)}"
                elif c.rsplit(".", 1)[0] in l3s:
                    l3 = c.rsplit(".", 1)[0]
                    leaves = sorted((x for x in LEAF_IDS if x.rsplit(".", 1)[0] == l3), key=lambda x: int(x.rsplit(".", 1)[1]))
                    valid = f"; level-3 {l3} has leaves {leaves[0]}..{leaves[-1]}"
                else:
                    valid = f"; {level3_leaves_hint(head)}"
            raise ValueError(f"--categories: {c!r} is not an AIR 2024 category (use a level-2 number 1..16, a "
                             f"level-3 id such as 3.8, or a level-4 id such as 3.8.1){valid}")


def load_judge_templates(path: str | Path | None = None, *, convention: Convention | str = "auto"
                         ) -> dict[str, JudgeTemplate]:
    """Load the per-category judge templates (``cate-idx, ..., judge_prompt`` CSV).

    The score direction is read from the rubrics themselves
    (:func:`~iclr25.air_bench.scoring.resolve_convention`): with ``convention="auto"`` it is the
    detected one; an explicit convention that disagrees with the rubrics is an error, so June- and
    July-2024 templates cannot be scored with the wrong direction.

    Args:
        path: the CSV; default the mirrored June-2024 set ``judge_prompts_2024-06.csv``.
        convention: ``"auto"``, ``"2024-06"`` (0 = refusal) or ``"2024-07"`` (1 = refusal; the HF
            templates since 2024-07-03).

    Returns:
        ``{cate_idx: JudgeTemplate}`` (314 entries for the full set), each with the resolved
        convention.

    Raises:
        ValueError: a row lacking a column or a placeholder (file, line), duplicate ids, an unknown
            category id. ConventionError: the direction disagrees with ``convention``, or is mixed.
    """
    p = Path(path) if path is not None else AIR_BENCH.path("judge_prompts_2024-06.csv")
    if not p.is_file():
        raise FileNotFoundError(f"judge templates {p}: no such file")
    rows: dict[str, str] = {}
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with open(p, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=1):
            try:
                cate = check_cate_idx(row["cate-idx"], f"{p}: row {i}")
                text = row["judge_prompt"]
            except KeyError as e:
                raise ValueError(f"{p}: row {i}: missing column {e}") from None
            if cate in rows:
                raise ValueError(f"{p}: row {i}: duplicate cate-idx {cate}")
            rows[cate] = text
    conv, counts = resolve_convention(rows, convention, source=str(p))  # type: ignore[arg-type]
    if counts["undetected"]:
        log.info("%s: the rubric direction of %d of %d templates could not be read; they follow the set's "
                 "(%s)", p, counts["undetected"], len(rows), conv)
    out: dict[str, JudgeTemplate] = {}
    for i, (cate, text) in enumerate(rows.items(), start=1):
        try:
            out[cate] = JudgeTemplate(cate, text, conv)
        except ValueError as e:
            raise ValueError(f"{p}: row {i}: {e}") from None
    return out


def load_taxonomy(path: str | Path | None = None) -> Taxonomy:
    """The AIR 2024 taxonomy from ``taxonomy.csv`` (default: the mirror)."""
    return Taxonomy.from_csv(path if path is not None else AIR_BENCH.path("taxonomy.csv"))


def load_graded_responses(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The 557 GPT-4o-judged responses (``graded_responses.jsonl``; fields in PROVENANCE.md)."""
    return read_jsonl(path if path is not None else AIR_BENCH.path("graded_responses.jsonl"))
