"""The AIR 2024 risk taxonomy (paper Sec. 2; four levels, 4 / 16 / 45 / 314 categories).

A level-4 category is named by its ``cate-idx`` ``"<l2>.<l3>.<l4>"``: the level-2 number (1..16),
the global level-3 number (1..45; two merged pairs are written ``3940`` and ``4142``) and the level-4
number, which runs within its level-2 category. Level 1 is a fixed grouping of the level-2 numbers
(:data:`L1_OF_L2`).
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["L1_NAMES", "L1_OF_L2", "LEAF_IDS", "Category", "Taxonomy", "split_cate_idx", "check_cate_idx"]

#: Level-1 names in the paper's order.
L1_NAMES: tuple[str, ...] = (
    "System & Operational Risks",
    "Content Safety Risks",
    "Societal Risks",
    "Legal & Rights-Related Risks",
)

#: Level-2 number -> level-1 name (AIR 2024 taxonomy: {1,2}, {3..7}, {8..13}, {14,15,16}).
L1_OF_L2: dict[int, str] = {
    **{k: L1_NAMES[0] for k in (1, 2)},
    **{k: L1_NAMES[1] for k in range(3, 8)},
    **{k: L1_NAMES[2] for k in range(8, 14)},
    **{k: L1_NAMES[3] for k in (14, 15, 16)},
}


#: The 314 level-4 ids of AIR 2024 as ``{"<l2>.<l3>": (first l4, last l4)}`` (contiguous ranges; the
#: structure of ``taxonomy.csv``, checked against the mirrored file by a test).
_LEAF_RANGES: dict[str, tuple[int, int]] = {
    "1.1": (1, 6), "1.2": (7, 10), "1.3": (11, 12), "2.4": (1, 10), "2.5": (11, 21), "2.6": (22, 26),
    "3.7": (1, 3), "3.8": (4, 7), "3.9": (8, 11), "3.10": (12, 16), "3.11": (17, 22), "3.12": (23, 24),
    "4.13": (1, 11), "4.14": (12, 31), "4.15": (32, 34), "4.16": (35, 36), "5.17": (1, 4), "5.18": (5, 6),
    "5.19": (7, 7), "5.20": (8, 9), "6.21": (1, 5), "6.22": (6, 7), "7.23": (1, 3), "8.24": (1, 7),
    "8.25": (8, 9), "8.26": (10, 13), "8.27": (14, 25), "9.28": (1, 2), "9.29": (3, 4), "9.30": (5, 8),
    "9.31": (9, 10), "10.32": (1, 5), "10.33": (6, 7), "10.34": (8, 9), "11.35": (1, 2), "11.36": (3, 5),
    "12.37": (1, 3), "13.38": (1, 5), "14.3940": (1, 60), "15.4142": (1, 72), "16.43": (1, 1),
    "16.44": (2, 4), "16.45": (5, 8),
}
LEAF_IDS: frozenset[str] = frozenset(f"{l3}.{k}" for l3, (a, b) in _LEAF_RANGES.items() for k in range(a, b + 1))
"""The 314 level-4 category ids (``"1.1.1"`` ... ``"16.45.8"``)."""


def split_cate_idx(cate_idx: str) -> tuple[str, str, str]:
    """Split ``"14.3940.12"`` into its level-2, level-3 and level-4 ids ``("14", "14.3940", "14.3940.12")``.

    Raises:
        ValueError: if ``cate_idx`` is not three dot-separated positive integers with l2 in 1..16.
    """
    parts = str(cate_idx).strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"cate-idx {cate_idx!r} is not of the form '<l2>.<l3>.<l4>' (e.g. '1.1.1')")
    if int(parts[0]) not in L1_OF_L2:
        raise ValueError(f"cate-idx {cate_idx!r}: level-2 number {parts[0]} is not in 1..16")
    return parts[0], f"{parts[0]}.{parts[1]}", str(cate_idx).strip()


def check_cate_idx(cate_idx: str, where: str = "") -> str:
    """``cate_idx`` stripped, if it is one of the 314 AIR 2024 level-4 categories.

    Raises:
        ValueError: a malformed id, or a well-formed one that is not in the taxonomy (e.g.
            ``"1.99.99"``), naming ``where`` (file and row) when given.
    """
    pre = f"{where}: " if where else ""
    try:
        _, l3, leaf = split_cate_idx(cate_idx)
    except ValueError as e:
        raise ValueError(pre + str(e)) from None
    if leaf not in LEAF_IDS:
        hint = f"level-3 {l3} has leaves {l3}.{_LEAF_RANGES[l3][0]}..{l3}.{_LEAF_RANGES[l3][1]}" \
            if l3 in _LEAF_RANGES else f"there is no level-3 category {l3}; {level3_leaves_hint(l3.split('.')[0])}"
        raise ValueError(f"{pre}cate-idx {leaf!r} is not one of the 314 AIR 2024 level-4 categories ({hint})")
    return leaf


def level3_leaves_hint(l2: str) -> str:
    """``"level-2 1 has 1.1 (leaves 1.1.1..1.1.6), 1.2 (...), ..."``: the valid level-3 ids of
    level-2 category ``l2`` with their level-4 leaves (for error messages)."""
    return f"level-2 {l2} has " + ", ".join(
        f"{k} (leaves {k}.{a}..{k}.{b})" for k, (a, b) in _LEAF_RANGES.items() if k.split(".")[0] == str(l2))


@dataclass(frozen=True)
class Category:
    """One level-4 category (a leaf) with the names of its ancestors."""

    cate_idx: str
    l1_name: str
    l2_idx: str
    l2_name: str
    l3_idx: str
    l3_name: str
    l4_name: str


class Taxonomy:
    """The 314-leaf AIR 2024 taxonomy.

    Args:
        categories: the leaves (order kept).

    Raises:
        ValueError: on duplicate ``cate-idx`` or a level-1 name that contradicts :data:`L1_OF_L2`.
    """

    def __init__(self, categories: list[Category]) -> None:
        seen = Counter(c.cate_idx for c in categories)
        dup = [k for k, v in seen.items() if v > 1]
        if dup:
            raise ValueError(f"taxonomy: duplicate cate-idx {dup[:5]}")
        for c in categories:
            if L1_OF_L2[int(c.l2_idx)] != c.l1_name:
                raise ValueError(f"taxonomy: {c.cate_idx} has l1 {c.l1_name!r}, expected "
                                 f"{L1_OF_L2[int(c.l2_idx)]!r}")
        self.categories = list(categories)
        self._by_idx = {c.cate_idx: c for c in categories}

    @classmethod
    def from_csv(cls, path: str | Path) -> Taxonomy:
        """Read ``taxonomy.csv`` (columns ``cate-idx,l1-name,l2-idx,l2-name,l3-idx,l3-name,l4-name``).

        Raises:
            ValueError: naming the line of a malformed row.
        """
        cats = []
        with open(path, newline="", encoding="utf-8") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    l2, l3, _ = split_cate_idx(row["cate-idx"])
                    cats.append(Category(row["cate-idx"], row["l1-name"], l2, row["l2-name"], l3,
                                         row["l3-name"], row["l4-name"]))
                except (KeyError, ValueError) as e:
                    raise ValueError(f"{path}: line {line}: {e}") from None
        return cls(cats)

    def __len__(self) -> int:
        return len(self.categories)

    def __contains__(self, cate_idx: object) -> bool:
        return cate_idx in self._by_idx

    def __getitem__(self, cate_idx: str) -> Category:
        try:
            return self._by_idx[cate_idx]
        except KeyError:
            raise KeyError(f"cate-idx {cate_idx!r} is not one of the {len(self)} level-4 categories") from None

    @staticmethod
    def l1_of(l2: int | str) -> str:
        """Level-1 name of a level-2 number."""
        return L1_OF_L2[int(l2)]

    @staticmethod
    def parents(cate_idx: str) -> dict[str, str]:
        """``{"l1": name, "l2": "14", "l3": "14.3940", "l4": "14.3940.12"}`` for a leaf id."""
        l2, l3, l4 = split_cate_idx(cate_idx)
        return {"l1": L1_OF_L2[int(l2)], "l2": l2, "l3": l3, "l4": l4}

    def names(self) -> dict[str, str]:
        """Display names of every category id at every level (``"3"`` -> ``"Hate/Toxicity"`` ...)."""
        out = {n: n for n in L1_NAMES}
        for c in self.categories:
            out[c.l2_idx] = c.l2_name
            out[c.l3_idx] = c.l3_name
            out[c.cate_idx] = c.l4_name
        return out

    def level_counts(self) -> dict[str, int]:
        """Number of distinct categories per level (``l1``..``l4``)."""
        return {
            "l1": len({c.l1_name for c in self.categories}),
            "l2": len({c.l2_idx for c in self.categories}),
            "l3": len({c.l3_idx for c in self.categories}),
            "l4": len(self.categories),
        }
