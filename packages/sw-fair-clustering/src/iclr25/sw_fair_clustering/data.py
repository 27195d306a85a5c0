"""Streams of coloured points: the paper's data sets (local mirrors through ``iclr25.core.data``), the
synthetic drift stream, and users' own CSV / ``.npz`` files or Python iterators.

Every loader returns a :class:`StreamData` (``X [n, d] float64``, ``colors [n] int64``, ``color_names``,
optional ``timestamps``) in stream order. Standardisation (z-score with the whole file's mean and standard
deviation, spec "CPU-scale reproduction") is explicit: ``standardize=True``.
"""

from __future__ import annotations

import csv
import io
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from iclr25.core.data import DatasetSpec, RemoteFile

from ._validate import as_points, check_positive_int

__all__ = ["StreamData", "DATASETS", "DATA", "load_dataset", "load_csv", "iter_csv_chunks", "load_npz",
           "from_iterator", "drift_stream", "standardize", "load_stream", "ATTRIBUTES"]

_SRC_AMGT = "https://github.com/amgt-d1/Fair-k-center-w-outliers (commit 7d6278e, _dataset/)"
_SRC_BERA = "https://github.com/nicolasjulioflores/fair_algorithms_for_clustering (commit 1c680f6, data/bank.csv)"
CENSUS_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/census1990-mld/USCensus1990.data.txt"

DATA = DatasetSpec(
    "sw-fair-clustering",
    files=(
        RemoteFile("adult_gender.csv", url=_SRC_AMGT, direct=False,
                   sha256="f1817d878af142e776fd197a0349ebf14765e269bfc1256922db173776e6c17a"),
        RemoteFile("adult_race.csv", url=_SRC_AMGT, direct=False,
                   sha256="5972436fd1b271ffa3e5699071096b46b24774b881c92c68937f2d6266bfbd0c"),
        RemoteFile("diabete_gender.csv", url=_SRC_AMGT, direct=False,
                   sha256="41fd9c65dce849779ae9414322ec7765880412eb2a89bdc88d0fb75401411900"),
        RemoteFile("diabete_race.csv", url=_SRC_AMGT, direct=False,
                   sha256="8a694b348e924e4fd5c273b7d868f2bd00adf9341de969d9108775b36d97b2ec"),
        RemoteFile("bank.csv", url=_SRC_BERA, direct=False,
                   sha256="dc8d576e9bda0f41ee891251bd84bab9a39ce576cba715aac08adc2374a01fde"),
        # US Census 1990 (UCI, 2,458,285 rows, 361 MB) is not mirrored: put it under $ICLR25_DATA/sw-fair-clustering/
        # or the user cache, or set ICLR25_DOWNLOAD=1 to fetch it from UCI (no checksum is declared for it).
        RemoteFile("USCensus1990.data.txt", url=CENSUS_URL, direct=True, sha256=None),
    ),
    description="Adult, Diabetes 130-US and Bank as used in fair-clustering work; Census 1990 (local file)",
)

ATTRIBUTES = {
    "adult": {"sex": "adult_gender.csv", "race": "adult_race.csv"},
    "diabetes": {"gender": "diabete_gender.csv", "race": "diabete_race.csv"},
    "bank": {"marital": "bank.csv", "married": "bank.csv", "default": "bank.csv"},
    "census": {"sex": "USCensus1990.data.txt", "age": "USCensus1990.data.txt"},
    "drift": {"color": ""},
}
"""Data set -> protected attribute -> file."""

DATASETS = tuple(ATTRIBUTES)


@dataclass
class StreamData:
    """A coloured point stream.

    Attributes:
        X: ``[n, d]`` float64 features (stream order).
        colors: ``[n]`` int64 colour indices in ``[0, len(color_names))``.
        color_names: names of the colours (index = colour).
        timestamps: optional ``[n]`` float64 event times (nondecreasing), else ``None`` (arrival order).
        name: where it came from.
        feature_names: names of the feature columns.
        standardization: ``None`` or ``{"mean": [...], "std": [...]}`` used.
    """

    X: np.ndarray
    colors: np.ndarray
    color_names: list[str]
    timestamps: np.ndarray | None = None
    name: str = ""
    feature_names: list[str] = field(default_factory=list)
    standardization: dict | None = None

    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_colors(self) -> int:
        return len(self.color_names)

    def head(self, n: int) -> StreamData:
        return StreamData(self.X[:n], self.colors[:n], self.color_names,
                          None if self.timestamps is None else self.timestamps[:n], self.name, self.feature_names,
                          self.standardization)


def standardize(X: np.ndarray) -> tuple[np.ndarray, dict]:
    """z-score every column with the data's own mean and standard deviation (a constant column is centred
    only). Returns ``(X_std, {"mean": [...], "std": [...]})``."""
    mu = X.mean(0)
    sd = X.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X - mu) / sd, {"mean": mu.tolist(), "std": sd.tolist()}


# ---------------------------------------------------------------------------------------------- CSV


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _resolve_column(spec, header: list[str] | None, n_fields: int, what: str) -> int:
    if isinstance(spec, int) or (isinstance(spec, str) and spec.lstrip("-").isdigit() and
                                 (header is None or spec not in header)):
        i = int(spec)
        if i < 0:
            i += n_fields
        if not 0 <= i < n_fields:
            raise ValueError(f"{what}: column index {spec} is outside the {n_fields} columns")
        return i
    if header is None:
        raise ValueError(f"{what}: column {spec!r} given by name, but the file has no header line "
                         "(use a 0-based column index)")
    if spec not in header:
        raise ValueError(f"{what}: no column named {spec!r}; the header has {header}")
    return header.index(spec)


@dataclass
class _CsvLayout:
    header: list[str] | None
    n_fields: int
    feat: list[int]
    color: int
    ts: int | None
    first_line: int  # 1-based line number of the first data row
    delimiter: str


_DELIM_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


def _layout(path: Path, delimiter: str, header: str, features, color_column, timestamp_column) -> _CsvLayout:
    rows = []
    with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: a spreadsheet's byte-order mark is no name
        rd = csv.reader(fh, delimiter=delimiter)
        try:
            for r in rd:
                if r:
                    rows.append(r)
                if len(rows) == 2:
                    break
        except UnicodeDecodeError as e:
            raise _not_utf8(path, e) from None
    if not rows:
        raise ValueError(f"{path}: the file is empty")
    if header not in ("auto", "yes", "no"):
        raise ValueError(f"header must be 'auto', 'yes' or 'no', got {header!r}")
    n_fields = len(rows[0])
    if n_fields == 1:  # a colour and a feature need two columns: the delimiter is wrong
        seen = [d for d in (",", ";", "\t", "|") if d != delimiter and d in rows[0][0]]
        hint = (f"; the file looks {_DELIM_NAMES[seen[0]]}-separated (use --delimiter {seen[0]!r})" if seen
                else "; check --delimiter")
        raise ValueError(f"{path}: the first line is one column with delimiter {delimiter!r} "
                         f"({rows[0][0][:60]!r}){hint}")
    if len(rows) == 1 and header != "no":
        names = {str(x) for x in (color_column, timestamp_column, *(features or ())) if x is not None}
        fields = [h.strip() for h in rows[0]]
        if header == "yes" or not any(_is_float(a) for a in fields) or names & set(fields):
            raise ValueError(f"{path}: only a header line ({', '.join(fields)[:80]}), no data rows")
    if header == "auto":
        has_header = len(rows) == 2 and any(not _is_float(a) and _is_float(b) for a, b in zip(rows[0], rows[1]))
    else:
        has_header = header == "yes"
    hdr = [h.strip() for h in rows[0]] if has_header else None
    color = _resolve_column(color_column if color_column is not None else n_fields - 1, hdr, n_fields, "color_column")
    ts = None if timestamp_column is None else _resolve_column(timestamp_column, hdr, n_fields, "timestamp_column")
    if features:
        feat = [_resolve_column(f, hdr, n_fields, "features") for f in features]
    else:
        feat = [i for i in range(n_fields) if i != color and i != ts]
    if color in feat:
        raise ValueError("features: the colour column cannot also be a feature")
    if not feat:
        raise ValueError("features: no feature column left")
    return _CsvLayout(hdr, n_fields, feat, color, ts, 2 if has_header else 1, delimiter)


def _convert_rows(rows: list[list[str]], lines: list[int], lay: _CsvLayout, path: Path, colors_decl,
                  cmap: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    counts = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    bad = np.flatnonzero(counts != lay.n_fields)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{path}:{lines[i]}: expected {lay.n_fields} fields, got {int(counts[i])} "
                         f"(delimiter {lay.delimiter!r})")
    arr = np.array(rows, dtype=object) if rows else np.zeros((0, lay.n_fields), dtype=object)

    def fname(j: int) -> str:
        return repr(lay.header[j]) if lay.header else str(j)

    try:
        X = arr[:, lay.feat].astype(np.float64)
    except (ValueError, TypeError):
        for i, r in enumerate(rows):
            for j in lay.feat:
                if not _is_float(r[j]):
                    raise ValueError(f"{path}:{lines[i]}: feature column {fname(j)} value {r[j]!r} is not a number; "
                                     "fix the line or choose --features") from None
        raise
    fin = np.isfinite(X).all(1)
    if not fin.all():
        i = int(np.flatnonzero(~fin)[0])
        raise ValueError(f"{path}:{lines[i]}: NaN or inf feature value ({[rows[i][j] for j in lay.feat]}); "
                         "clean or impute the data first")
    raw = [str(v).strip() for v in arr[:, lay.color]] if rows else []
    col = np.empty(len(raw), np.int64)
    for i, v in enumerate(raw):  # dictionary lookup per value (strings); no numeric work here
        j = cmap.get(v)
        if j is None:
            if not v:
                raise ValueError(f"{path}:{lines[i]}: colour column {fname(lay.color)} is empty (a missing protected "
                                 "attribute); drop or fill the row")
            if colors_decl is not None:
                raise ValueError(f"{path}:{lines[i]}: colour {v!r} is not in the declared set {list(colors_decl)}")
            j = cmap[v] = len(cmap)
        col[i] = j
    ts = None
    if lay.ts is not None:
        try:
            ts = arr[:, lay.ts].astype(np.float64)
        except (ValueError, TypeError):
            for i, r in enumerate(rows):
                if not _is_float(r[lay.ts]):
                    raise ValueError(f"{path}:{lines[i]}: timestamp {r[lay.ts]!r} is not a number") from None
            raise
    return X, col, ts


def _not_utf8(path, e: UnicodeDecodeError) -> ValueError:
    return ValueError(f"{path}: not UTF-8 text (byte {e.object[e.start:e.start + 1]!r} cannot be decoded: {e.reason}); "
                      "save the file as UTF-8")


def _decoded(rd, path) -> Iterator[list[str]]:
    """The rows of ``rd``; a decoding error is a ValueError naming the file."""
    try:
        yield from rd
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from None


def iter_csv_chunks(path, *, features: Sequence[str | int] | None = None, color_column: str | int | None = None,
                    delimiter: str = ",", header: str = "auto", colors: Sequence[str] | None = None,
                    timestamp_column: str | int | None = None, chunk_rows: int = 100_000,
                    color_map: dict[str, int] | None = None, skip_rows: int = 0
                    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Read a CSV in chunks (for files too large to hold twice in memory, e.g. Census 1990).

    Yields ``(X [m, d] float64, colors [m] int64, timestamps [m] or None)``. ``color_map`` (string -> index)
    is filled as colours are met (or fixed by ``colors``, the declared set, in that order).

    Raises:
        FileNotFoundError: no such file.
        ValueError: wrong field count / non-numeric feature / NaN / undeclared colour, naming ``file:line``.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} does not exist")
    chunk_rows = check_positive_int(chunk_rows, "chunk_rows")
    lay = _layout(p, delimiter, header, features, color_column, timestamp_column)
    cmap = color_map if color_map is not None else {}
    if colors is not None:
        for i, c in enumerate(colors):
            cmap.setdefault(str(c), i)
    with open(p, newline="", encoding="utf-8-sig") as fh:
        rd = csv.reader(fh, delimiter=delimiter)
        rows, lines = [], []
        seen = 0
        for r in _decoded(rd, p):
            line = rd.line_num
            if line < lay.first_line or not r:
                continue
            seen += 1
            if seen <= skip_rows:
                continue
            rows.append(r)
            lines.append(line)
            if len(rows) == chunk_rows:
                yield _convert_rows(rows, lines, lay, p, colors, cmap)
                rows, lines = [], []
        if rows:
            yield _convert_rows(rows, lines, lay, p, colors, cmap)


def load_csv(path, *, features: Sequence[str | int] | None = None, color_column: str | int | None = None,
             delimiter: str = ",", header: str = "auto", colors: Sequence[str] | None = None,
             timestamp_column: str | int | None = None, standardize_features: bool = False,
             max_rows: int | None = None, drop_colors: Sequence[str] = ()) -> StreamData:
    """Load a CSV file with or without a header line.

    Args:
        path: the file.
        features: feature columns (names with a header, or 0-based indices); default all but the colour
            (and timestamp) column.
        color_column: the protected attribute (name or index; default the last column). String values are mapped
            to integers in order of first appearance (or in the order of ``colors``).
        delimiter: field separator (``";"`` for the UCI Bank file).
        header: ``"auto"`` (a first line with a non-number where the second line has a number), ``"yes"``, ``"no"``.
        colors: the declared colour set; a value outside it is an error naming the line.
        timestamp_column: optional column of event times.
        standardize_features: z-score the features with the file's mean and standard deviation.
        max_rows: read at most this many data rows.
        drop_colors: colour values whose rows are dropped (e.g. Diabetes' single ``Unknown/Invalid`` gender).

    Raises:
        FileNotFoundError, ValueError: see :func:`iter_csv_chunks`.
    """
    cmap: dict[str, int] = {}
    if colors is not None:
        for i, c in enumerate(colors):
            cmap[str(c)] = i
    Xs, cs, tss = [], [], []
    n = 0
    for X, c, ts in iter_csv_chunks(path, features=features, color_column=color_column, delimiter=delimiter,
                                    header=header, colors=colors, timestamp_column=timestamp_column,
                                    color_map=cmap):
        if max_rows is not None and n + len(X) > max_rows:
            X, c = X[: max_rows - n], c[: max_rows - n]
            ts = None if ts is None else ts[: max_rows - n]
        Xs.append(X)
        cs.append(c)
        if ts is not None:
            tss.append(ts)
        n += len(X)
        if max_rows is not None and n >= max_rows:
            break
    lay = _layout(Path(path), delimiter, header, features, color_column, timestamp_column)
    names = [None] * len(cmap)
    for v, i in cmap.items():
        names[i] = v
    X = np.concatenate(Xs) if Xs else np.zeros((0, len(lay.feat)))
    col = np.concatenate(cs) if cs else np.zeros(0, np.int64)
    ts = np.concatenate(tss) if tss else None
    if drop_colors:
        drop = [cmap[d] for d in drop_colors if d in cmap]
        if drop:
            keep = ~np.isin(col, drop)
            X, col = X[keep], col[keep]
            ts = None if ts is None else ts[keep]
            remaining = [i for i in range(len(names)) if i not in drop]
            remap = np.full(len(names), -1, np.int64)
            remap[remaining] = np.arange(len(remaining))
            col = remap[col]
            names = [names[i] for i in remaining]
    if ts is not None and np.any(np.diff(ts) < 0):
        i = int(np.flatnonzero(np.diff(ts) < 0)[0]) + 1
        raise ValueError(f"{path}: timestamps must be nondecreasing (data row {i + 1} goes back in time)")
    fn = [lay.header[j] for j in lay.feat] if lay.header else [str(j) for j in lay.feat]
    st = None
    if standardize_features and len(X):
        X, st = standardize(X)
    return StreamData(X, col, names, ts, str(path), fn, st)


def load_npz(path, *, standardize_features: bool = False, colors: Sequence[str] | None = None) -> StreamData:
    """Load ``X [n, d] float``, ``colors [n] int|str`` and optional ``timestamps [n]`` from an ``.npz``
    (no pickles). String colours are mapped to integers (sorted order, or the order of ``colors``).

    Raises:
        FileNotFoundError: no such file. ValueError: missing or malformed arrays, naming them.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} does not exist")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrs = {k: z[k] for k in z.files}
    except ValueError as e:
        raise ValueError(f"{p}: cannot read the .npz without pickles ({e}); store plain arrays") from None
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise ValueError(f"{p}: not a readable .npz (corrupt or truncated: {type(e).__name__}: {e}); "
                         "write it again with numpy.savez") from None
    missing = [k for k in ("X", "colors") if k not in arrs]
    if missing:
        raise ValueError(f"{p}: missing array(s) {missing}; an .npz stream needs X [n, d] and colors [n] "
                         "(optional timestamps [n])")
    c = arrs["colors"]
    try:
        X = as_points(arrs["X"], "X", n_colors_given=c.shape[0] if c.ndim == 1 else None)
    except ValueError as e:
        raise ValueError(f"{p}: {e}") from None
    if c.shape != (X.shape[0],):
        raise ValueError(f"{p}: colors has shape {c.shape}, expected ({X.shape[0]},)")
    if np.issubdtype(c.dtype, np.integer):
        if c.size and c.min() < 0:
            raise ValueError(f"{p}: colors must be >= 0, got {int(c.min())}")
        nc = int(c.max()) + 1 if c.size else 1
        names = list(colors) if colors is not None else [str(i) for i in range(nc)]
        if c.size and c.max() >= len(names):
            raise ValueError(f"{p}: colour index {int(c.max())} outside the declared {len(names)} colours")
        col = c.astype(np.int64)
    elif c.dtype.kind in "US":
        vals = np.asarray(c).astype(str)
        if c.size and not np.char.str_len(np.char.strip(vals)).all():
            i = int(np.flatnonzero(np.char.str_len(np.char.strip(vals)) == 0)[0])
            raise ValueError(f"{p}: colour of point {i} is an empty string (a missing protected attribute); "
                             "drop or fill the point")
        names = list(colors) if colors is not None else sorted(set(vals.tolist()))
        lookup = {v: i for i, v in enumerate(names)}
        bad = [v for v in dict.fromkeys(vals.tolist()) if v not in lookup]
        if bad:
            i = int(np.flatnonzero(vals == bad[0])[0])
            raise ValueError(f"{p}: colour {bad[0]!r} (point {i}) is not in the declared set {names}")
        col = np.array([lookup[v] for v in vals.tolist()], np.int64)
    else:
        raise ValueError(f"{p}: colors must be integers or strings, got dtype {c.dtype}")
    ts = None
    if "timestamps" in arrs:
        ts = np.asarray(arrs["timestamps"], dtype=np.float64)
        if ts.shape != (X.shape[0],) or not np.isfinite(ts).all():
            raise ValueError(f"{p}: timestamps must be finite with shape ({X.shape[0]},)")
        if np.any(np.diff(ts) < 0):
            raise ValueError(f"{p}: timestamps must be nondecreasing")
    st = None
    if standardize_features and len(X):
        X, st = standardize(X)
    return StreamData(X, col, names, ts, str(p), [str(j) for j in range(X.shape[1])], st)


def from_iterator(pairs: Iterable, *, colors: Sequence | None = None, batch: int = 10_000
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Turn any iterator of ``(x, colour)`` pairs (e.g. a Kafka consumer) into batches for
    :meth:`SlidingWindowCoreset.insert_many`.

    Args:
        pairs: iterable of ``(x: sequence of floats, colour: int | str)``.
        colors: declared colour set; string colours are mapped to their index in it (required for strings).
        batch: points per yielded batch.

    Yields:
        ``(X [m, d] float64, colors [m] int64)``.

    Raises:
        ValueError: a string colour without ``colors`` or outside it; a dimension change; NaN/inf
            (naming the point's position in the stream).
    """
    batch = check_positive_int(batch, "batch")
    lookup = None if colors is None else {c: i for i, c in enumerate(colors)}
    xs: list = []
    cs: list[int] = []
    dim = None
    pos = 0

    def flush():
        nonlocal dim
        X = as_points(xs, "points", dim=dim, offset=pos - len(xs))
        dim = X.shape[1]
        return X, np.asarray(cs, np.int64)

    for x, c in pairs:
        if lookup is not None:
            if c not in lookup:
                raise ValueError(f"point {pos}: colour {c!r} is not in the declared set {list(colors)}")
            ci = lookup[c]
        else:
            if isinstance(c, str) or not float(c).is_integer():
                raise ValueError(f"point {pos}: colour {c!r} is not an integer index; pass colors=[...] to map "
                                 "string colours")
            ci = int(c)
        xs.append(np.asarray(x, dtype=np.float64).ravel())
        cs.append(ci)
        pos += 1
        if len(xs) and len({len(v) for v in xs[-2:]}) > 1:
            raise ValueError(f"point {pos - 1}: dimension {len(xs[-1])} differs from the earlier points' "
                             f"dimension {len(xs[-2])}")
        if len(xs) == batch:
            yield flush()
            xs, cs = [], []
    if xs:
        yield flush()


# ---------------------------------------------------------------------------------------------- named data


def drift_stream(n: int = 20_000, *, d: int = 10, n_clusters: int = 10, n_colors: int = 2,
                 drift_at: int | None = None, shift: float = 6.0, spread: float = 4.0, seed: int = 0) -> StreamData:
    """The synthetic stand-in for Census/Athlete (spec "CPU-scale reproduction"): a Gaussian mixture of
    ``n_clusters`` unit-variance clusters in ``R^d`` (centres ``~ N(0, spread^2 I)``), colour probabilities
    varying by cluster (Dirichlet(1) per cluster), and a drift at ``drift_at`` (default ``n / 2``) after which
    every centre moves by ``N(0, shift^2 I)`` and the colour probabilities are redrawn.

    Returns:
        :class:`StreamData` with colours ``"c0"``, ``"c1"``, ...
    """
    n = check_positive_int(n, "n")
    rng = np.random.default_rng(seed)
    drift_at = n // 2 if drift_at is None else int(drift_at)
    C1 = rng.normal(0.0, spread, (n_clusters, d))
    C2 = C1 + rng.normal(0.0, shift, (n_clusters, d))
    P1 = rng.dirichlet(np.ones(n_colors), n_clusters)
    P2 = rng.dirichlet(np.ones(n_colors), n_clusters)
    lab = rng.integers(0, n_clusters, n)
    after = np.arange(n) >= drift_at
    centres = np.where(after[:, None], C2[lab], C1[lab])
    X = centres + rng.normal(0.0, 1.0, (n, d))
    P = np.where(after[:, None], P2[lab], P1[lab])
    u = rng.random(n)
    col = (u[:, None] > np.cumsum(P, axis=1)).sum(1).astype(np.int64)
    col = np.minimum(col, n_colors - 1)
    return StreamData(X, col, [f"c{j}" for j in range(n_colors)], None, f"drift(n={n}, seed={seed})",
                      [f"x{j}" for j in range(d)])


def load_dataset(name: str, attr: str | None = None, *, standardize_features: bool = True,
                 max_rows: int | None = None, shuffle_seed: int | None = None, download: bool | None = None,
                 drift_n: int = 20_000, drift_seed: int = 0) -> StreamData:
    """One of the paper's data sets, in file order (or a fixed shuffle).

    ``adult`` (attr ``sex`` | ``race``; 6 numeric features), ``diabetes`` (``gender`` | ``race``; 7 features; the one
    ``Unknown/Invalid`` gender row is dropped), ``bank`` (features ``age, balance, duration``; ``marital`` (3),
    ``married`` (married vs not) or ``default``), ``census`` (US Census 1990 from a local file: colour ``iSex``
    (``sex``) or ``dAge`` (``age``), every other column but ``caseid`` a feature), ``drift`` (synthetic).

    Raises:
        ValueError: unknown name or attribute.
        iclr25.core.data.DataNotFoundError: the mirrored file is missing (the message says where it was looked
            for and where it comes from).
    """
    if name not in ATTRIBUTES:
        raise ValueError(f"unknown dataset {name!r}; choose from {list(ATTRIBUTES)} or pass a file with --data")
    attrs = ATTRIBUTES[name]
    attr = attr if attr is not None else next(iter(attrs))
    if attr not in attrs:
        raise ValueError(f"dataset {name!r} has no attribute {attr!r}; choose from {list(attrs)}")
    if name == "drift":
        sd = drift_stream(drift_n, seed=drift_seed)
        if standardize_features:
            sd.X, sd.standardization = standardize(sd.X)
        return sd
    path = DATA.path(attrs[attr], download=download)
    if name == "adult":
        sd = load_csv(path, header="no", standardize_features=False)
        sd.feature_names = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
    elif name == "diabetes":
        sd = load_csv(path, header="no", standardize_features=False, drop_colors=("Unknown/Invalid",))
    elif name == "bank":
        col = "marital" if attr in ("marital", "married") else "default"
        sd = load_csv(path, delimiter=";", header="yes", features=["age", "balance", "duration"],
                      color_column=col, standardize_features=False)
        if attr == "married":
            married = sd.color_names.index("married")
            sd.colors = (sd.colors != married).astype(np.int64)
            sd.color_names = ["married", "not married"]
    else:  # census
        col = "iSex" if attr == "sex" else "dAge"
        with open(path, encoding="utf-8") as fh:
            hdr = next(csv.reader(io.StringIO(fh.readline())))
        feats = [h for h in hdr if h not in ("caseid", col)]
        sd = load_csv(path, header="yes", features=feats, color_column=col, standardize_features=False,
                      max_rows=max_rows)
    sd.name = f"{name}-{attr}"
    if standardize_features:  # z-score with the whole file's statistics (spec), before any truncation
        sd.X, sd.standardization = standardize(sd.X)
    if shuffle_seed is not None:
        perm = np.random.default_rng(shuffle_seed).permutation(len(sd))
        sd = StreamData(sd.X[perm], sd.colors[perm], sd.color_names, None, sd.name, sd.feature_names,
                        sd.standardization)
    if max_rows is not None:
        sd = sd.head(check_positive_int(max_rows, "max_rows"))
    return sd


def load_stream(*, dataset: str | None = None, attr: str | None = None, data: str | Path | None = None,
                features: Sequence[str] | None = None, color_column: str | None = None, delimiter: str = ",",
                header: str = "auto", colors: Sequence[str] | None = None, timestamp_column: str | None = None,
                standardize_features: bool = True, max_rows: int | None = None) -> StreamData:
    """A named data set (``dataset``) or a user file (``data``: ``.csv`` / ``.txt`` / ``.npz``)."""
    if (dataset is None) == (data is None):
        raise ValueError("give exactly one of --dataset (adult, diabetes, bank, census, drift) and --data FILE")
    if dataset is not None:
        return load_dataset(dataset, attr, standardize_features=standardize_features, max_rows=max_rows)
    p = Path(data)
    if not p.exists():
        raise FileNotFoundError(f"data file {p} does not exist")
    if p.suffix.lower() == ".npz":
        sd = load_npz(p, standardize_features=standardize_features, colors=colors)
        return sd.head(max_rows) if max_rows else sd
    return load_csv(p, features=features, color_column=color_column, delimiter=delimiter, header=header,
                    colors=colors, timestamp_column=timestamp_column, standardize_features=standardize_features,
                    max_rows=max_rows)

