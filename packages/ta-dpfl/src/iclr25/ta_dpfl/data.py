"""Data: UCI Adult from the local mirror (``ICLR25_DATA``), a generic tabular CSV loader with clear
errors, IID client partitions, and scikit-learn's digits for smoke tests.

Preprocessing (spec, CPU-scale reproduction): strip spaces; one-hot the categorical columns (``?``
is its own category); standardise the numeric ones (fit on train only); stratified 80/20 split with
a fixed seed; a stratified validation split held out of the training part (server-side, for step-size
selection; no client's data); IID split of the rest into ``N`` clients.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = [
    "ADULT",
    "ADULT_NUMERIC",
    "ADULT_CATEGORICAL",
    "TabularDataError",
    "FederatedData",
    "load_tabular_csv",
    "split_iid",
    "stratified_split",
    "one_hot",
    "load_federated",
    "ADULT_LABELS",
]

ADULT = DatasetSpec(
    "ta-dpfl",
    files=(
        RemoteFile(
            "adult.csv",
            url="https://archive.ics.uci.edu/dataset/2/adult (adult.data with a header line; "
            "mirror of nicolasjulioflores/fair_algorithms_for_clustering data/adult.csv)",
            sha256="dfeb66e49e0a5ccbdb7532dfd0de66f617df9fe0b0bd103c9c54cfd2699adf2b",
            direct=False,
        ),
    ),
    description="UCI Adult (Census Income) training split, 32,561 rows, label 'income'",
)
ADULT_NUMERIC = ("age", "final-weight", "education-num", "capital-gain", "capital-loss", "hours-per-week")
ADULT_CATEGORICAL = ("workclass", "education", "marital-status", "occupation", "relationship", "race", "sex",
                     "native-country")


#: the two label values of UCI Adult (``adult.test`` writes them with a trailing ``.``)
ADULT_LABELS = ("<=50K", ">50K", "<=50K.", ">50K.")


class TabularDataError(ValueError):
    """A CSV file does not fit the declared schema (missing column, non-numeric value, ...)."""


@dataclass(frozen=True)
class FederatedData:
    """Client partitions, a server-side validation split and a central test set.

    Attributes:
        clients: ``N`` pairs ``(X_n float32 (m_n, d), y_n int64 (m_n,))``.
        x_val, y_val: validation split (``float32 (m_val, d)``, ``int64 (m_val,)``), held out of the
            training part before partitioning: used to choose the step size, never trained on.
        x_test: ``float32 (m_test, d)``; y_test: ``int64 (m_test,)``.
        num_features: ``d``; num_classes: number of labels.
    """

    clients: tuple[tuple[np.ndarray, np.ndarray], ...]
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_features: int
    num_classes: int

    @property
    def sizes(self) -> list[int]:
        return [len(y) for _, y in self.clients]


def load_tabular_csv(
    path: str | Path,
    label: str,
    numeric: tuple[str, ...] | list[str],
    categorical: tuple[str, ...] | list[str],
    label_values: tuple[str, ...] | list[str] | None = None,
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, list[str]]:
    """Read a CSV with a header line into numeric and categorical columns.

    Args:
        path: CSV file (values may be followed/preceded by spaces).
        label: name of the label column.
        numeric: columns parsed as floats.
        categorical: columns kept as strings.
        label_values: the label values allowed (``None``: any).

    Returns:
        ``(X_num float64 (n, len(numeric)), [cat column str arrays (n,)], labels str (n,), numeric names)``.

    Raises:
        TabularDataError: missing label or feature column (lists the header), a non-numeric value
            in a numeric column (names line and column), a row with the wrong number of fields,
            a label outside ``label_values`` (names the unexpected values and their first lines),
            or no data rows.
    """
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TabularDataError(f"{path}: empty file (expected a header line)") from None
        rows, linenos = [], []
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TabularDataError(
                    f"{path}, line {lineno}: {len(row)} fields, the header has {len(header)}")
            rows.append([c.strip() for c in row])
            linenos.append(lineno)
    col = {h: i for i, h in enumerate(header)}
    if label not in col:
        raise TabularDataError(
            f"{path}: label column {label!r} not found; columns are {header}. Pass the right label name.")
    missing = [c for c in (*numeric, *categorical) if c not in col]
    if missing:
        raise TabularDataError(f"{path}: feature column(s) {missing} not found; columns are {header}")
    if not rows:
        raise TabularDataError(f"{path}: no data rows")
    table = np.asarray(rows, dtype=object)
    labels = table[:, col[label]].astype(str)
    empty = np.flatnonzero(labels == "")
    if len(empty):
        raise TabularDataError(f"{path}: column {label!r} is empty on {len(empty)} row(s) (line(s) "
                               f"{', '.join(str(linenos[i]) for i in empty[:5])}{' ...' if len(empty) > 5 else ''}); "
                               "give every row a label or drop those rows")
    if label_values is not None:
        bad = ~np.isin(labels, np.asarray(label_values, dtype=str))
        if bad.any():
            seen: dict[str, int] = {}
            for i in np.flatnonzero(bad):
                seen.setdefault(str(labels[i]), linenos[i])
                if len(seen) >= 5:
                    break
            listing = ", ".join(f"{v!r} (line {ln})" for v, ln in seen.items())
            raise TabularDataError(
                f"{path}: column {label!r} has {int(bad.sum())} value(s) outside {list(label_values)}: "
                f"{listing}{' ...' if len(seen) >= 5 else ''}. Fix or drop those rows, or map the labels.")
    x_num = np.empty((len(rows), len(numeric)), dtype=np.float64)
    for j, name in enumerate(numeric):
        raw = table[:, col[name]]
        try:
            x_num[:, j] = raw.astype(np.float64)
        except ValueError:
            for i, v in enumerate(raw):
                try:
                    float(v)
                except ValueError:
                    raise TabularDataError(
                        f"{path}, line {linenos[i]}, column {name!r}: value {v!r} is not numeric; declare the "
                        "column categorical or clean the file") from None
            raise  # pragma: no cover
        bad_rows = np.flatnonzero(~np.isfinite(x_num[:, j]))
        if len(bad_rows):
            i = int(bad_rows[0])
            raise TabularDataError(f"{path}, line {linenos[i]}, column {name!r}: value {raw[i]!r} is not a finite "
                                   f"number ({len(bad_rows)} such value(s) in the column); clean the file")
    cats = [table[:, col[c]].astype(str) for c in categorical]
    return x_num, cats, labels, list(numeric)


def split_iid(n: int, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle ``range(n)`` and cut it into ``num_clients`` near-equal index arrays (IID split)."""
    if num_clients < 1 or num_clients > n:
        raise ValueError(f"num_clients must lie in [1, {n}], got {num_clients}")
    return [np.sort(p) for p in np.array_split(rng.permutation(n), num_clients)]


def stratified_split(y: np.ndarray, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Stratified train/test index split: ``round(test_fraction · n_c)`` test items of every class."""
    test = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test.append(idx[: int(round(test_fraction * len(idx)))])
    te = np.sort(np.concatenate(test))
    mask = np.ones(len(y), dtype=bool)
    mask[te] = False
    return np.flatnonzero(mask), te


def one_hot(train_col: np.ndarray, col: np.ndarray) -> np.ndarray:
    """One-hot ``col`` on the categories seen in ``train_col`` (unseen categories: all zeros)."""
    cats = np.unique(train_col)
    pos = np.searchsorted(cats, col)
    pos = np.clip(pos, 0, len(cats) - 1)
    hit = cats[pos] == col
    out = np.zeros((len(col), len(cats)), dtype=np.float32)
    out[np.flatnonzero(hit), pos[hit]] = 1.0
    return out


def _adult_arrays(path: Path, split_seed: int, val_fraction: float):
    x_num, cats, labels, _ = load_tabular_csv(path, "income", ADULT_NUMERIC, ADULT_CATEGORICAL, ADULT_LABELS)
    y = (np.char.rstrip(labels.astype(str), ".") == ">50K").astype(np.int64)  # adult.test has '>50K.'
    if len(np.unique(y)) < 2:
        raise TabularDataError(f"{path}: column 'income' holds only {sorted(set(labels.tolist()))}; "
                               "both '<=50K' and '>50K' are needed")
    rng = np.random.default_rng(split_seed)
    idx_tr, idx_te = stratified_split(y, 0.2, rng)
    va_pos, tr_pos = _val_split(y[idx_tr], val_fraction, rng)
    idx_va, idx_tr = idx_tr[va_pos], idx_tr[tr_pos]
    mu = x_num[idx_tr].mean(0)
    sd = x_num[idx_tr].std(0)
    sd[sd == 0] = 1.0

    def feats(idx):
        parts = [((x_num[idx] - mu) / sd).astype(np.float32)]
        parts += [one_hot(c[idx_tr], c[idx]) for c in cats]
        return np.concatenate(parts, axis=1)

    return feats(idx_tr), y[idx_tr], feats(idx_va), y[idx_va], feats(idx_te), y[idx_te]


def _csv_arrays(path: Path, label: str, split_seed: int, val_fraction: float):
    """A user's tabular CSV with a header line and a label column: every other column is a feature,
    numeric when all its values parse as numbers (standardised on train), else categorical (one-hot on
    the train categories). Labels: the sorted distinct values of ``label`` map to ``0..C-1``."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TabularDataError(f"{path}: empty file (expected a header line)") from None
        rows = [[c.strip() for c in r] for r in reader if r and any(c.strip() for c in r)]
    if label not in header:
        raise TabularDataError(f"{path}: label column {label!r} not found; columns are {header} (set label-column / "
                               "--label-column)")
    feats = [h for h in header if h != label]
    if not feats:
        raise TabularDataError(f"{path}: no feature column besides the label {label!r}")

    def numeric(j: int) -> bool:
        try:
            [float(r[j]) for r in rows if len(r) == len(header)]
        except ValueError:
            return False
        return True

    num = [h for h in feats if numeric(header.index(h))]
    cat = [h for h in feats if h not in num]
    x_num, cats, labels, _ = load_tabular_csv(path, label, num, cat)
    classes = np.unique(labels)
    if len(classes) < 2:
        raise TabularDataError(f"{path}: label column {label!r} holds a single value {classes.tolist()}; at least two "
                               "classes are needed")
    y = np.searchsorted(classes, labels).astype(np.int64)
    rng = np.random.default_rng(split_seed)
    idx_tr, idx_te = stratified_split(y, 0.2, rng)
    va_pos, tr_pos = _val_split(y[idx_tr], val_fraction, rng)
    idx_va, idx_tr = idx_tr[va_pos], idx_tr[tr_pos]
    mu = x_num[idx_tr].mean(0) if num else np.zeros(0)
    sd = x_num[idx_tr].std(0) if num else np.ones(0)
    sd[sd == 0] = 1.0

    def feats_of(idx):
        parts = [((x_num[idx] - mu) / sd).astype(np.float32)] + [one_hot(c[idx_tr], c[idx]) for c in cats]
        return np.concatenate(parts, axis=1)

    return feats_of(idx_tr), y[idx_tr], feats_of(idx_va), y[idx_va], feats_of(idx_te), y[idx_te], len(classes)


def _val_split(y: np.ndarray, val_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if val_fraction == 0:
        return np.zeros(0, dtype=np.int64), np.arange(len(y))
    va, tr = stratified_split(y, val_fraction, rng)[::-1]
    return va, tr


def _digits_arrays(split_seed: int, val_fraction: float):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(split_seed)
    tr, te = stratified_split(y, 0.2, rng)
    va_pos, tr_pos = _val_split(y[tr], val_fraction, rng)
    va, tr = tr[va_pos], tr[tr_pos]
    return x[tr], y[tr], x[va], y[va], x[te], y[te]


@lru_cache(maxsize=8)
def load_federated(dataset: str = "adult", num_clients: int = 12, split_seed: int = 0,
                   csv_path: str | None = None, val_fraction: float = 0.1, label_column: str = "label"
                   ) -> FederatedData:
    """Load a data set, hold out a validation split, and split the rest IID into ``num_clients``.

    Args:
        dataset: ``"adult"`` (mirrored UCI Adult; ``csv_path`` overrides the mirror), ``"digits"``
            (scikit-learn's 1,797 8x8 digits, 10 classes) or ``"csv"``: your own tabular CSV at
            ``csv_path`` with a header line and the label in ``label_column`` (other columns:
            numeric ones standardised, the rest one-hot).
        label_column: the label column of a ``"csv"`` data set.
        num_clients: ``N``.
        split_seed: seed of the stratified 80/20 split, the validation split and the client partition.
        csv_path: an Adult-format CSV to use instead of the mirror.
        val_fraction: share of the training part held out (stratified) as the validation split,
            in ``[0, 0.5]``.

    Returns:
        :class:`FederatedData` (cached per arguments; treat the arrays as read-only).

    Raises:
        iclr25.core.data.DataNotFoundError: the mirror file is missing (message names it).
        TabularDataError: malformed CSV (unexpected label values are named).
        ValueError: unknown data set, bad ``val_fraction``, ``csv_path`` given for ``digits`` or
            missing for ``csv``.
    """
    if not (0.0 <= val_fraction <= 0.5):
        raise ValueError(f"val_fraction must lie in [0, 0.5], got {val_fraction}")
    if csv_path and dataset not in ("adult", "csv"):
        raise ValueError(f"csv_path ({csv_path}) is read only for datasets 'adult' and 'csv'; dataset {dataset!r} is "
                         "built in (drop --csv-path, or use --dataset csv)")
    n_classes = None
    if dataset == "csv":
        if not csv_path:
            raise ValueError("dataset 'csv' needs csv_path (--csv-path / csv-path=) naming your CSV file")
        xtr, ytr, xva, yva, xte, yte, n_classes = _csv_arrays(Path(csv_path), label_column, split_seed, val_fraction)
    elif dataset == "adult":
        path = Path(csv_path) if csv_path else ADULT.path("adult.csv")
        xtr, ytr, xva, yva, xte, yte = _adult_arrays(path, split_seed, val_fraction)
    elif dataset == "digits":
        xtr, ytr, xva, yva, xte, yte = _digits_arrays(split_seed, val_fraction)
    else:
        raise ValueError(f"unknown dataset {dataset!r}; choose 'adult', 'digits' or 'csv'")
    parts = split_iid(len(ytr), num_clients, np.random.default_rng(split_seed))
    clients = tuple((xtr[p], ytr[p]) for p in parts)
    c = n_classes or int(max(ytr.max(), yte.max()) + 1)
    return FederatedData(clients, xva, yva, xte, yte, int(xtr.shape[1]), int(c))
