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

__all__ = ["L1_NAMES", "L1_OF_L2", "Category", "Taxonomy", "split_cate_idx"]

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
