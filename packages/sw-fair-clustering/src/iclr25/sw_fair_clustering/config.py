"""Command configs (dataclasses; the CLI is generated from them with tyro). Light: no numpy import.

Defaults are the spec's hyperparameters ("Hyperparameters" [design] unless marked): ``k = 5``, ``z = 1``
(the paper reports fair k-median), ``eps = 0.1``, ``eta = 0.2``, window ``W = 5000``, coreset cap 200 points per
bucket, block ``B = 2 * cap``, queries every ``W / 5`` arrivals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["DataOptions", "MethodOptions", "StreamConfig", "CompareConfig", "LowerBoundConfig", "ReproduceConfig"]


def _finite(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")


@dataclass(kw_only=True)
class DataOptions:
    """Where the stream comes from: one of the paper's data sets or the user's own file."""

    dataset: Literal["adult", "diabetes", "bank", "census", "drift"] | None = None
    """A named data set read from the mirror ($ICLR25_DATA); census needs a local USCensus1990.data.txt."""
    attr: str | None = None
    """Protected attribute: adult sex|race, diabetes gender|race, bank marital|married|default, census sex|age."""
    data: Path | None = None
    """Your own stream: a .csv/.txt (see --features/--color-column/--delimiter/--header) or an .npz with X [n, d],
    colors [n] (int or str) and optional timestamps [n]."""
    features: tuple[str, ...] = ()
    """CSV feature columns (names with a header, else 0-based indices); default every other column."""
    color_column: str | None = None
    """CSV colour column (name or index; default the last column). String colours are mapped to integers and the
    mapping is saved as colors.json in the run folder."""
    delimiter: str = ","
    """CSV field separator (';' for the UCI Bank file)."""
    header: Literal["auto", "yes", "no"] = "auto"
    """Whether the CSV has a header line (auto: detected)."""
    colors: tuple[str, ...] = ()
    """Declared colour set, in index order; a value outside it is an error naming the line."""
    timestamp_column: str | None = None
    """CSV column of event times (for --horizon time-based windows)."""
    standardize: bool = True
    """z-score the features with the whole file's mean and sd (spec); recorded in config.json."""
    max_rows: int | None = None
    """Read at most this many points."""

    def _check_data(self) -> None:
        if self.max_rows is not None and self.max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {self.max_rows}")
        if (self.dataset is None) == (self.data is None):
            raise ValueError("give exactly one of --dataset (adult, diabetes, bank, census, drift) and --data FILE")
        if len(self.delimiter) != 1:
            raise ValueError(f"delimiter must be one character, got {self.delimiter!r}")


@dataclass(kw_only=True)
class MethodOptions:
    """The sliding-window coreset and the fair solver."""

    window: int = 5000
    """W: the number of most recent points that count (spec W in {1000 (Bank), 5000})."""
    k: int = 5
    """Number of centres (spec k in {5, 10})."""
    z: int = 1
    """1 = k-median (the paper's curves), 2 = k-means."""
    eps: float = 0.1
    """Coreset precision (ring resolution) and the (1 + eps) relaxation, in (0, 1)."""
    eta: float = 0.2
    """Slack of the proportional bounds: lower = r_j (1 - eta), upper = r_j / (1 - eta), in [0, 1]."""
    coreset_size: int = 200
    """Hard cap on the stored points of each bucket."""
    block_size: int | None = None
    """B: points per block (default 2 * coreset_size; must be <= window)."""
    horizon: float | None = None
    """Time-based window length (needs timestamps); W then only sizes the level cap."""
    relaxed: float | None = None
    """Solve with the (1 + EPS)-relaxed bounds instead of the exact ones."""
    lower: tuple[float, ...] = ()
    """Fixed lower bounds per colour (with --upper); default: bounds from the summary's colour ratios and eta."""
    upper: tuple[float, ...] = ()
    """Fixed upper bounds per colour (with --lower)."""
    query_every: int | None = None
    """Arrivals between queries (default W / 5); the first query is at the first full window."""
    n_init: int = 10
    """Restarts of the vanilla k-median/k-means on the summary."""
    time_limit: float | None = None
    """Seconds per HiGHS solve (a hit is reported as status time_limit, never used as optimal)."""

    def _check_method(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.z not in (1, 2):
            raise ValueError(f"z must be 1 (k-median) or 2 (k-means), got {self.z}")
        _finite("eps", self.eps)
        if not 0 < self.eps < 1:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")
        _finite("eta", self.eta)
        if not 0 <= self.eta <= 1:
            raise ValueError(f"eta must be in [0, 1], got {self.eta}")
        if self.coreset_size < 1:
            raise ValueError(f"coreset_size must be >= 1, got {self.coreset_size}")
        if self.block_size is not None:
            if self.block_size < 1:
                raise ValueError(f"block_size must be >= 1, got {self.block_size}")
            if self.block_size > self.window:
                raise ValueError(f"block_size B = {self.block_size} is larger than the window W = {self.window}")
        elif 2 * self.coreset_size > self.window:
            raise ValueError(f"the default block 2 * coreset_size = {2 * self.coreset_size} is larger than the window "
                             f"W = {self.window}; pass a smaller --coreset-size or --block-size <= W")
        if self.relaxed is not None:
            _finite("relaxed", self.relaxed)
            if not 0 < self.relaxed < 1:
                raise ValueError(f"relaxed (the relaxation eps) must be in (0, 1), got {self.relaxed}")
        if bool(self.lower) != bool(self.upper) or len(self.lower) != len(self.upper):
            raise ValueError("--lower and --upper must be given together, one value per colour")
        for lo, up in zip(self.lower, self.upper):
            _finite("lower", lo)
            _finite("upper", up)
            if not (0 <= lo <= 1 and 0 <= up <= 1):
                raise ValueError(f"bounds must be in [0, 1], got lower {lo}, upper {up}")
            if lo > up:
                raise ValueError(f"lower bound {lo} > upper bound {up}")
        if self.query_every is not None and self.query_every < 1:
            raise ValueError(f"query_every must be >= 1, got {self.query_every}")
        if self.horizon is not None:
            _finite("horizon", self.horizon)
            if self.horizon <= 0:
                raise ValueError(f"horizon must be > 0, got {self.horizon}")
        if self.n_init < 1:
            raise ValueError(f"n_init must be >= 1, got {self.n_init}")
        if self.time_limit is not None:
            _finite("time_limit", self.time_limit)
            if self.time_limit <= 0:
                raise ValueError(f"time_limit must be > 0, got {self.time_limit}")


@dataclass(kw_only=True)
class StreamConfig(MethodOptions, DataOptions, SeedOption, CommonOptions):
    """Stream one data set or file through the sliding-window coreset; solve fair k-median/k-means on the summary
    every --query-every arrivals; write one JSON line per query (queries.jsonl), checkpoints for --resume."""

    resume: bool = False
    """Continue an interrupted run from the saved summary and stream offset in --out."""
    evaluate: bool = False
    """Also keep the exact window (linear memory, for checking) and report the true fair cost and colour error."""
    chunk_rows: int = 100_000
    """CSV rows read per chunk (large files are never held in memory twice)."""

    def __post_init__(self):
        self._check_data()
        self._check_method()
        if self.chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {self.chunk_rows}")


@dataclass(kw_only=True)
class CompareConfig(MethodOptions, DataOptions, SeedOption, CommonOptions):
    """Offline / SW-coreset / uniform / insertion-only on the same windows, bounds, centre sets and seed."""

    n_queries: int = 5
    """Queries at start + W + i W/5."""
    start: int = 0
    """Stream offset of the first window."""
    n_center_sets: int = 10
    """Random centre sets for the coreset error (metric (b)); 0 skips it."""
    insertion: bool = True
    """Include the insertion-only online coreset (ignores expiry)."""

    def __post_init__(self):
        self._check_data()
        self._check_method()
        if self.n_queries < 1 or self.n_center_sets < 0 or self.start < 0:
            raise ValueError("n_queries must be >= 1, n_center_sets >= 0 and start >= 0")
        if self.lower or self.horizon is not None:
            raise ValueError("compare derives the bounds from each window (eta) and uses count-based windows; "
                             "--lower/--upper and --horizon are for stream")


@dataclass(kw_only=True)
class LowerBoundConfig(SeedOption, CommonOptions):
    """The exact-feasibility flip behind the linear-space lower bound, and what a (1 ± eps) summary can decide."""

    window: int = 100
    """Window of the second demo (the first is the spec's W = 4 stream R, B, R, B, B, R, R)."""
    eps: float = 0.1
    """Relaxation of the summary's bounds."""
    length: int = 600
    """Stream length of the second demo."""
    coreset_size: int = 20
    """Bucket cap of the summary in the second demo."""

    def __post_init__(self):
        _finite("eps", self.eps)
        if not 0 < self.eps < 1:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")
        if self.window < 4 or self.window % 2:
            raise ValueError(f"window must be an even number >= 4, got {self.window}")
        if self.length < 2 * self.window:
            raise ValueError(f"length must be >= 2 * window = {2 * self.window}")
        if self.coreset_size < 1 or 2 * self.coreset_size > self.window:
            raise ValueError("coreset_size must be >= 1 and 2 * coreset_size <= window")


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims (--quick: < 3 min on 2 cores): one runner job per (data set, W, k), one for
    the drift stream, one for the space measurement; records under OUT/records/."""

    workers: int | None = None
    """Processes the jobs run in (default: from the cores and the number of jobs; 1: in this process)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (records/<job>.json); changed settings are refused."""
