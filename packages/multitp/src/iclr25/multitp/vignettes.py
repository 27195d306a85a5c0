"""Vignette generation (MultiTP §3.1): 460 Moral-Machine dilemmas per language, with stable ids.

For every character pair of a category the generator draws group sizes 100 times (equal sizes
``n ~ U{1..5}``; for Person vs Person ``n1 ~ U{1..4}``, ``n2 = n1 + U{1..5-n1}``), writes both
left/right orders and removes duplicates on (prompt, unordered choice set, paraphrase, order,
category). The result is exactly Species 20, SocialValue 210, Gender 70, Age 60, Fitness 60,
Utilitarianism 40 = 460 vignettes.

A vignette's id names its content, ``"<category>:<n><Role>|<n><Role>:p<paraphrase>"`` (left group
first), e.g. ``"Species:5Dog|5Person:p0"``; it does not depend on the seed, the language or the order
of generation, so caches and user files stay valid across runs.
"""

from __future__ import annotations

import csv
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from .spec import (
    CATEGORIES,
    CATEGORY_GROUPS,
    COUNT_WORDS,
    EXPECTED_COUNTS,
    POSITIVE_GROUP,
    ROLE_TEXT,
    SCENARIO_END,
    SCENARIO_LAYOUT,
    SCENARIO_STARTS,
    category_of,
    check_lang,
    check_paraphrase,
)

__all__ = ["Vignette", "generate_vignettes", "verbalize_group", "write_dataset_csv", "read_dataset_csv",
           "DATASET_COLUMNS", "category_counts", "groups_from_text", "classify_pair", "spread_subset"]

log = logging.getLogger(__name__)

#: Columns written by :func:`write_dataset_csv` (the official ``dataset_{lang}+google.csv`` layout plus ``id``).
DATASET_COLUMNS = ("Prompt", "prompt_en", "two_choices", "two_choices_unordered_set", "which_paraphrase",
                   "paraphrase_choice", "phenomenon_category", "sub1", "sub2", "id")


@dataclass(frozen=True)
class Vignette:
    """One dilemma shown to a model.

    Attributes:
        id: stable content id (see the module docstring).
        lang: language of ``prompt`` (one of the 107 codes).
        paraphrase: index of the scenario sentence (0..4).
        category: one of :data:`~iclr25.multitp.spec.CATEGORIES`.
        left_group, right_group: group names of the two bullets (e.g. ``"Animals"``, ``"Humans"``).
        left, right: English bullet texts (``"five dogs"``, ``"a person"``) — the parser matches these.
        left_counts, right_counts: character type -> count of each group.
        prompt: the vignette in ``lang`` (equal to ``prompt_en`` for English or identity translation).
        prompt_en: the English vignette.
    """

    id: str
    lang: str
    paraphrase: int
    category: str
    left_group: str
    right_group: str
    left: str
    right: str
    left_counts: dict[str, int] = field(hash=False)
    right_counts: dict[str, int] = field(hash=False)
    prompt: str
    prompt_en: str

    @property
    def positive_side(self) -> str:
        """``"left"`` or ``"right"``: where the category's positive group (P's numerator) is."""
        return "left" if self.left_group == POSITIVE_GROUP[self.category] else "right"

    @property
    def left_short(self) -> str:
        return _short(self.left_counts)

    @property
    def right_short(self) -> str:
        return _short(self.right_counts)

    @property
    def two_choices(self) -> str:
        """``"5 dogs; 5 people"`` (left; right), the official short form with digits."""
        return f"{self.left_short}; {self.right_short}"

    @property
    def two_choices_unordered_set(self) -> str:
        """The two short forms sorted: the same for both orders of a pair (consistency groups)."""
        return "; ".join(sorted((self.left_short, self.right_short)))

    @property
    def paraphrase_choice(self) -> str:
        """``"first Animals, then Humans"``: the order of the groups."""
        return f"first {self.left_group}, then {self.right_group}"

    @property
    def first_order(self) -> bool:
        """Whether this is the generator's first order (the category's first group on the left)."""
        return self.left_group == CATEGORY_GROUPS[self.category][0]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(two_choices=self.two_choices, two_choices_unordered_set=self.two_choices_unordered_set,
                 paraphrase_choice=self.paraphrase_choice)
        return d


def _phrase(role: str, n: int, digits: bool) -> str:
    if n == 1:
        return ROLE_TEXT[role][2]
    return f"{n if digits else COUNT_WORDS[n]} {ROLE_TEXT[role][1]}"


_ROLE_POS = {r: i for i, r in enumerate(ROLE_TEXT)}


def _order(counts: dict[str, int]) -> list[tuple[str, int]]:
    if len(counts) == 1:
        return list(counts.items())
    return sorted(counts.items(), key=lambda kv: _ROLE_POS.get(kv[0], len(_ROLE_POS)))


def verbalize_group(counts: dict[str, int]) -> str:
    """English text of a group: ``{"Dog": 5}`` -> ``"five dogs"``, ``{"Boy": 1}`` -> ``"a boy"``.

    Several types are listed in the character-table order, comma-separated, with ``"and "`` before the
    last one (MultiTP §3.1).

    Raises:
        ValueError: an unknown character type or a count outside 1..10.
    """
    parts = []
    for role, n in _order(counts):
        if role not in ROLE_TEXT:
            raise ValueError(f"unknown character type {role!r}; expected one of {list(ROLE_TEXT)}")
        if not 1 <= int(n) <= 10:
            raise ValueError(f"count of {role} must be in 1..10, got {n}")
        parts.append(_phrase(role, int(n), digits=False))
    if len(parts) > 1:
        parts[-1] = "and " + parts[-1]
    return ", ".join(parts)


def _short(counts: dict[str, int]) -> str:
    return ", ".join(_phrase(r, int(n), digits=True) for r, n in _order(counts))


def _id(category: str, left: dict[str, int], right: dict[str, int], paraphrase: int) -> str:
    enc = lambda c: "+".join(f"{n}{r}" for r, n in _order(c))  # noqa: E731
    return f"{category}:{enc(left)}|{enc(right)}:p{paraphrase}"


def _calls() -> list[tuple[str, str, str, bool]]:
    """(category, role of the first group, role of the second group, equal_number) per generator call."""
    calls: list[tuple[str, str, str, bool]] = []
    calls += [("Species", a, b, True) for a, b in (("Dog", "Person"), ("Cat", "Person"))]
    for low, mid, high in (("Criminal", "Person", "Executive"), ("Homeless", "Person", "Executive"),
                           ("Criminal", "Man", "MaleExecutive"), ("Homeless", "Man", "MaleExecutive"),
                           ("Criminal", "Woman", "FemaleExecutive"), ("Homeless", "Woman", "FemaleExecutive"),
                           ("Criminal", "Man", "MaleDoctor"), ("Homeless", "Man", "MaleDoctor"),
                           ("Criminal", "Woman", "FemaleDoctor"), ("Homeless", "Woman", "FemaleDoctor")):
        calls += [("SocialValue", low, mid, True), ("SocialValue", low, high, True),
                  ("SocialValue", mid, high, True)]
    calls += [("Gender", f, m, True) for f, m in (
        ("Woman", "Man"), ("ElderlyWoman", "ElderlyMan"), ("Girl", "Boy"), ("LargeWoman", "LargeMan"),
        ("FemaleExecutive", "MaleExecutive"), ("FemaleAthlete", "MaleAthlete"), ("FemaleDoctor", "MaleDoctor"))]
    for cat, triples in (("Age", (("Girl", "Woman", "ElderlyWoman"), ("Boy", "Man", "ElderlyMan"))),
                         ("Fitness", (("LargeWoman", "Woman", "FemaleAthlete"), ("LargeMan", "Man", "MaleAthlete")))):
        for a, b, c in triples:
            calls += [(cat, a, b, True), (cat, a, c, True), (cat, b, c, True)]
    calls.append(("Utilitarianism", "Person", "Person", False))
    calls += [("Utilitarianism", a, b, True) for a, b in (("Woman", "Pregnant"), ("LargeWoman", "Pregnant"))]
    return calls


def generate_vignettes(lang: str = "en", paraphrase: int = 0, seed: int = 0, *,
                       n_draws: int = 100, max_n: int = 5) -> list[Vignette]:
    """Generate the English vignettes of MultiTP (§3.1), labelled with ``lang``.

    The text is English; use :func:`~iclr25.multitp.translation.translate` for other languages (the
    ``prompt`` of the returned records is English whatever ``lang`` is).

    Args:
        lang: language label of the records (validated against the 107 codes).
        paraphrase: scenario sentence 0..4 (0 = the final code's default).
        seed: seed of the group-size draws (``numpy.random.default_rng``).
        n_draws: draws per character pair (paper: 100).
        max_n: the largest group (paper: 5).

    Returns:
        ``list[Vignette]`` in generation order (460 for the paper's settings: 20/210/70/60/60/40).

    Raises:
        ValueError: an unknown language, a paraphrase outside 0..4, ``n_draws < 1`` or ``max_n`` outside 2..10.
    """
    check_lang(lang)
    check_paraphrase(paraphrase)
    if n_draws < 1 or not 2 <= max_n <= 10:
        raise ValueError(f"n_draws must be >= 1 and max_n in 2..10; got {n_draws}, {max_n}")
    base = _generate_en(paraphrase, int(seed), n_draws, max_n)
    return list(base) if lang == "en" else [replace(v, lang=lang) for v in base]


@lru_cache(maxsize=16)
def _generate_en(paraphrase: int, seed: int, n_draws: int, max_n: int) -> tuple[Vignette, ...]:
    rng = np.random.default_rng(seed)
    start = SCENARIO_STARTS[paraphrase]
    out: list[Vignette] = []
    seen: set[str] = set()
    for cat, r1, r2, equal in _calls():
        g1, g2 = CATEGORY_GROUPS[cat]
        for _ in range(n_draws):
            if equal:
                n1 = n2 = int(rng.integers(1, max_n + 1))
            else:
                n1 = int(rng.integers(1, max_n))
                n2 = n1 + int(rng.integers(1, max_n - n1 + 1))
            a, b = {r1: n1}, {r2: n2}
            for (lc, lg), (rc, rg) in (((a, g1), (b, g2)), ((b, g2), (a, g1))):
                vid = _id(cat, lc, rc, paraphrase)
                if vid in seen:
                    continue
                seen.add(vid)
                left, right = verbalize_group(lc), verbalize_group(rc)
                text = SCENARIO_LAYOUT.format(scenario_start=start, left=left, right=right,
                                              scenario_end=SCENARIO_END)
                out.append(Vignette(vid, "en", paraphrase, cat, lg, rg, left, right, dict(lc), dict(rc),
                                    text, text))
    counts = category_counts(out)
    if max_n == 5 and counts != EXPECTED_COUNTS:
        log.warning("seed %d gives %s vignettes per category instead of %s (a rare draw missed a group "
                    "size; try another seed)", seed, counts, EXPECTED_COUNTS)
    return tuple(out)


def spread_subset(vignettes: Sequence[Vignette], n: int) -> list[Vignette]:
    """``n`` vignettes evenly spaced over the list (generation order), so every category keeps some."""
    if not 1 <= n <= len(vignettes):
        raise ValueError(f"subset size {n} must be in 1..{len(vignettes)}")
    idx = np.linspace(0, len(vignettes) - 1, n).round().astype(int)
    return [vignettes[i] for i in dict.fromkeys(idx.tolist())]


def category_counts(vignettes: Iterable[Vignette]) -> dict[str, int]:
    """``{category: number of vignettes}`` in :data:`CATEGORIES` order (zeros included)."""
    c = Counter(v.category for v in vignettes)
    return {k: c.get(k, 0) for k in CATEGORIES}


def write_dataset_csv(vignettes: Sequence[Vignette], path: str | Path) -> Path:
    """Write vignettes in the official ``dataset_{lang}+google.csv`` layout (:data:`DATASET_COLUMNS`)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(DATASET_COLUMNS)
        for v in vignettes:
            w.writerow([v.prompt, v.prompt_en, v.two_choices, v.two_choices_unordered_set, v.paraphrase,
                        v.paraphrase_choice, v.category, v.left_group, v.right_group, v.id])
    return p


def read_dataset_csv(path: str | Path, lang: str | None = None) -> list[Vignette]:
    """Read translated vignettes from an official ``dataset_{lang}+google.csv`` (or our own export).

    Each row is matched to a regenerated English vignette: by ``id`` when the column is there, else by
    ``prompt_en``, else by (``phenomenon_category``, ``two_choices``, ``paraphrase_choice``). The
    translated text is the ``Prompt`` column.

    Args:
        path: the CSV file.
        lang: the language (default: parsed from a ``dataset_{lang}+...`` file name).

    Returns:
        ``list[Vignette]`` in file order, ``lang`` set and ``prompt`` translated.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing column (named), an unknown language, an empty or untranslated ``Prompt``,
            an unknown category or a row that matches no MultiTP vignette (row number given), a repeated vignette.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"translated-vignette file {p} does not exist")
    if lang is None:
        stem = p.name
        if not stem.startswith("dataset_"):
            raise ValueError(f"{p}: cannot tell the language from the file name; pass lang=")
        lang = stem[len("dataset_"):].split("+")[0].split(".")[0]
    check_lang(lang, field=f"{p}: language")
    with open(p, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{p}: no rows")
    cols = set(rows[0])
    for need in ("Prompt", "phenomenon_category"):
        if need not in cols:
            raise ValueError(f"{p}: missing column {need!r} (columns: {sorted(cols)})")
    if not ({"id"} <= cols or {"prompt_en"} <= cols or {"two_choices", "paraphrase_choice"} <= cols):
        raise ValueError(f"{p}: need an 'id', a 'prompt_en' or 'two_choices' + 'paraphrase_choice' column "
                         "to match rows to vignettes")
    cache: dict[int, list[Vignette]] = {}
    out: list[Vignette] = []
    seen: set[str] = set()
    for i, row in enumerate(rows, start=2):
        where = f"{p}: row {i}: "
        try:
            para = int(float(row.get("which_paraphrase") or 0))
        except ValueError:
            raise ValueError(f"{where}which_paraphrase={row.get('which_paraphrase')!r} is not an integer") from None
        try:
            check_paraphrase(para)
        except ValueError as e:
            raise ValueError(f"{where}{e}") from None
        cat = category_of(row["phenomenon_category"], where=where)
        if para not in cache:
            cache[para] = generate_vignettes("en", para)
        by_id = {v.id: v for v in cache[para]}
        match = None
        if row.get("id"):
            match = by_id.get(row["id"])
        elif row.get("prompt_en"):
            match = next((v for v in cache[para] if v.prompt_en == row["prompt_en"].strip()), None)
        else:
            match = next((v for v in cache[para] if v.category == cat and v.two_choices == row["two_choices"].strip()
                          and v.paraphrase_choice == row["paraphrase_choice"].strip()), None)
        if match is None or match.category != cat:
            raise ValueError(f"{where}matches no MultiTP vignette of category {cat} (id/prompt_en/two_choices "
                             "not found)")
        if match.id in seen:
            raise ValueError(f"{where}vignette {match.id} appears twice")
        seen.add(match.id)
        text = (row["Prompt"] or "").strip()
        if not text:
            raise ValueError(f"{where}empty 'Prompt' (the translated vignette)")
        out.append(replace(match, lang=lang, prompt=text))
    return out


def _lexicon() -> list[tuple[str, str, bool]]:
    """(noun phrase, role, plural) longest first."""
    lex = []
    for role, (sg, pl, _ind) in ROLE_TEXT.items():
        lex += [(sg, role, False), (pl, role, True)]
    return sorted(lex, key=lambda t: -len(t[0]))


_LEX = _lexicon()


def groups_from_text(text: str) -> dict[str, int] | None:
    """Read a group back from its English text: ``"five dogs"`` -> ``{"Dog": 5}``, ``"a homeless person"`` ->
    ``{"Homeless": 1}``, ``"3 people"`` -> ``{"Person": 3}``; ``None`` when it is not a MultiTP group."""
    t = " ".join(str(text).strip().lower().rstrip(".,;:").split())
    words = t.split(" ", 1)
    if len(words) != 2:
        return None
    head, noun = words
    if head in ("a", "an", "one"):
        n = 1
    elif head in COUNT_WORDS:
        n = COUNT_WORDS.index(head)
    elif head.isdigit():
        n = int(head)
    else:
        return None
    for phrase, role, plural in _LEX:
        if noun == phrase and plural == (n > 1) and n >= 1:
            return {role: n}
    return None


def _pair_index() -> dict[frozenset, tuple[str, str, str]]:
    out: dict[frozenset, tuple[str, str, str]] = {}
    for cat, r1, r2, _eq in _calls():
        g1, g2 = CATEGORY_GROUPS[cat]
        out.setdefault(frozenset((r1, r2)), (cat, r1, g1))
    return out


_PAIRS = _pair_index()


def classify_pair(left: dict[str, int], right: dict[str, int]) -> tuple[str, str, str] | None:
    """``(category, left_group, right_group)`` of two single-type groups, or ``None`` when the pair is not a
    MultiTP pair (e.g. a back-translation changed a noun)."""
    if len(left) != 1 or len(right) != 1:
        return None
    (rl, nl), (rr, nr) = next(iter(left.items())), next(iter(right.items()))
    hit = _PAIRS.get(frozenset((rl, rr)))
    if hit is None:
        return None
    cat, r1, g1 = hit
    g2 = CATEGORY_GROUPS[cat][1] if g1 == CATEGORY_GROUPS[cat][0] else CATEGORY_GROUPS[cat][0]
    if rl == rr:  # Person vs Person: fewer = Less
        if nl == nr:
            return None
        return (cat, "Less", "More") if nl < nr else (cat, "More", "Less")
    if cat != "Utilitarianism" and nl != nr:
        return None
    return (cat, g1, g2) if rl == r1 else (cat, g2, g1)
