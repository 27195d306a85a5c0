"""Data: UCI Adult from the local mirror (``ICLR25_DATA``), a generic tabular CSV loader with clear
errors, IID client partitions, and scikit-learn's digits for smoke tests.

Preprocessing (spec, CPU-scale reproduction): strip spaces; one-hot the categorical columns (``?``
is its own category); standardise the numeric ones (fit on train only); stratified 80/20 split with
a fixed seed; IID split of the training part into ``N`` clients.
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


class TabularDataError(ValueError):
    """A CSV file does not fit the declared schema (missing column, non-numeric value, ...)."""


@dataclass(frozen=True)
class FederatedData:
    """Client partitions and a central test set.

    Attributes:
        clients: ``N`` pairs ``(X_n float32 (m_n, d), y_n int64 (m_n,))``.
        x_test: ``float32 (m_test, d)``; y_test: ``int64 (m_test,)``.
        num_features: ``d``; num_classes: number of labels.
    """

    clients: tuple[tuple[np.ndarray, np.ndarray], ...]
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
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, list[str]]:
    """Read a CSV with a header line into numeric and categorical columns.

    Args:
        path: CSV file (values may be followed/preceded by spaces).
        label: name of the label column.
        numeric: columns parsed as floats.
        categorical: columns kept as strings.

    Returns:
        ``(X_num float64 (n, len(numeric)), [cat column str arrays (n,)], labels str (n,), numeric names)``.

    Raises:
        TabularDataError: missing label or feature column (lists the header), a non-numeric value
            in a numeric column (names line and column), a row with the wrong number of fields,
            or no data rows.
    """
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TabularDataError(f"{path}: empty file (expected a header line)") from None
        rows = []
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TabularDataError(
                    f"{path}, line {lineno}: {len(row)} fields, the header has {len(header)}")
            rows.append([c.strip() for c in row])
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
                        f"{path}, line {i + 2}, column {name!r}: value {v!r} is not numeric; declare the "
                        "column categorical or clean the file") from None
            raise  # pragma: no cover
    cats = [table[:, col[c]].astype(str) for c in categorical]
    return x_num, cats, table[:, col[label]].astype(str), list(numeric)


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


def _adult_arrays(path: Path, split_seed: int):
    x_num, cats, labels, _ = load_tabular_csv(path, "income", ADULT_NUMERIC, ADULT_CATEGORICAL)
    y = (np.char.rstrip(labels.astype(str), ".") == ">50K").astype(np.int64)  # adult.test has '>50K.'
    idx_tr, idx_te = stratified_split(y, 0.2, np.random.default_rng(split_seed))
    mu = x_num[idx_tr].mean(0)
    sd = x_num[idx_tr].std(0)
    sd[sd == 0] = 1.0

    def feats(idx):
        parts = [((x_num[idx] - mu) / sd).astype(np.float32)]
        parts += [one_hot(c[idx_tr], c[idx]) for c in cats]
        return np.concatenate(parts, axis=1)

    return feats(idx_tr), y[idx_tr], feats(idx_te), y[idx_te]


def _digits_arrays(split_seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=split_seed, stratify=y)
    return xtr, ytr, xte, yte


@lru_cache(maxsize=8)
def load_federated(dataset: str = "adult", num_clients: int = 12, split_seed: int = 0,
                   csv_path: str | None = None) -> FederatedData:
    """Load a data set and split its training part IID into ``num_clients`` clients.

    Args:
        dataset: ``"adult"`` (mirrored UCI Adult; ``csv_path`` overrides the mirror) or ``"digits"``
            (scikit-learn's 1,797 8x8 digits; smoke tests only).
        num_clients: ``N``.
        split_seed: seed of the stratified 80/20 split and of the client partition.
        csv_path: an Adult-format CSV to use instead of the mirror.

    Returns:
        :class:`FederatedData` (cached per arguments; treat the arrays as read-only).

    Raises:
        iclr25.core.data.DataNotFoundError: the mirror file is missing (message names it).
        TabularDataError: malformed CSV.
        ValueError: unknown data set.
    """
    if dataset == "adult":
        path = Path(csv_path) if csv_path else ADULT.path("adult.csv")
        xtr, ytr, xte, yte = _adult_arrays(path, split_seed)
    elif dataset == "digits":
        xtr, ytr, xte, yte = _digits_arrays(split_seed)
    else:
        raise ValueError(f"unknown dataset {dataset!r}; choose 'adult' or 'digits'")
    parts = split_iid(len(ytr), num_clients, np.random.default_rng(split_seed))
    clients = tuple((xtr[p], ytr[p]) for p in parts)
    return FederatedData(clients, xte, yte, int(xtr.shape[1]), int(max(ytr.max(), yte.max()) + 1))
