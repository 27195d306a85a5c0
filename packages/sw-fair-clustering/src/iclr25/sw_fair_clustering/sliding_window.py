"""Algorithm 3 (``MergeAndReduce``): a sliding-window coreset from online coresets on the reversed stream.

An online coreset built on the *reversed* stream is a coreset of every *suffix*, and a window is a suffix.
The stream is cut into blocks of ``B`` points; a completed block becomes a level-0 bucket (its newest-first
online coreset); two buckets of the same level ``< L_top = ceil(log2(W / B))`` are merged (their union fed
newest-first to the online coreset) into one of the next level; buckets (and bucket points) that have left
the window are deleted. A query returns the stored points inside the window: the suffix coreset of the bucket
that straddles the window boundary, the buckets inside it, and the raw points of the current partial block
(spec Algorithm 3 [paper: structure], [design]: ``B``, the level cap, the per-bucket size).

Windows are count-based (the last ``W`` arrivals) by default, or time-based (``horizon``: points whose
timestamp is in ``(now - horizon, now]``), which is what makes summaries of stream partitions mergeable at
query time (:func:`merge_summaries`).
"""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._validate import as_colors, as_points, check_eps, check_finite_float, check_positive_int, check_z
from .coreset import calibrate_weights, online_sample, ring_coreset
from .weighted_set import WeightedSet

__all__ = ["SlidingWindowCoreset", "merge_summaries", "Bucket"]

_FORMAT = "iclr25-sw-fair-clustering/sliding-window-coreset/1"


@dataclass
class Bucket:
    """Stored points of one bucket with the bookkeeping of its online coreset.

    Per kept point (processing order = newest first): ``points [m, d]``, ``ht`` (HT weights), ``colors``,
    ``timestamps``, ``index`` (arrival index), ``gid`` (group), ``cum_excl`` (group input weight before the
    point), ``w_in`` (its input weight). Per group: ``gtot``, ``gfac``, ``gcol``. ``lo``/``hi``: the oldest and
    newest position (arrival index, or timestamp for time-based windows) the bucket summarises.
    """

    level: int
    points: np.ndarray
    ht: np.ndarray
    colors: np.ndarray
    timestamps: np.ndarray
    index: np.ndarray
    gid: np.ndarray
    cum_excl: np.ndarray
    w_in: np.ndarray
    gtot: np.ndarray
    gfac: np.ndarray
    gcol: np.ndarray
    lo: float
    hi: float

    ARRAYS = ("points", "ht", "colors", "timestamps", "index", "gid", "cum_excl", "w_in")
    GROUP_ARRAYS = ("gtot", "gfac", "gcol")

    def __len__(self) -> int:
        return int(self.index.size)


class SlidingWindowCoreset:
    """Sliding-window coreset for fair k-median / k-means (Algorithm 3 over Algorithm 1).

    Args:
        window: ``W``, the number of most recent points that count (count-based window); with ``horizon``
            it is the expected number of points per horizon (it sizes the level cap).
        k: number of clusters the coresets are built for.
        z: 1 (k-median) or 2 (k-means).
        eps: ring precision (``r_min = -ceil(log2 1/eps)``) and the target colour-weight accuracy.
        n_colors: number of colours ``l``.
        coreset_size: hard cap on each bucket's stored points; ``None`` keeps every point (the identity
            coreset: a query returns exactly the window, with weights 1).
        block_size: ``B`` (default ``2 * coreset_size``, spec "Hyperparameters"; required when
            ``coreset_size`` is None unless ``B = min(W, 256)`` is fine). Must be ``<= W``.
        horizon: time-based window length (same units as the timestamps given to :meth:`insert_many`).
        seed: int seed of all sampling randomness.
        gamma, phi: Meyerson constants (see :class:`~iclr25.sw_fair_clustering.MeyersonSketch`).
        suffix_share: share of the every-prefix schedule in the online sampling rate (1 = the pure online
            coreset of Algorithm 1; the default 0.5 adds a uniform floor inside each bucket [design]).
        max_level: cap the merge levels below ``ceil(log2(W / B))`` (more, smaller buckets).
        color_counts: calibrate each query's colour totals to per-chunk colour counters (chunks of
            ``eps W / (10 l)`` arrivals, ``10 l / eps`` counters whatever ``W``) [design]; off for the identity
            coreset.

    Raises:
        ValueError: ``W < 1``, ``B < 1`` or ``B > W``, ``z`` not in {1, 2}, ``eps`` outside (0, 1), ...
    """

    def __init__(self, window: int, k: int, z: int = 1, eps: float = 0.1, *, n_colors: int = 2,
                 coreset_size: int | None = 200, block_size: int | None = None, horizon: float | None = None,
                 seed: int = 0, gamma: float = 4.0, phi: float = 1.0, suffix_share: float = 0.5,
                 max_level: int | None = None, color_counts: bool = True):
        self.suffix_share = float(suffix_share)
        if not 0.0 <= self.suffix_share <= 1.0:
            raise ValueError(f"suffix_share must be in [0, 1], got {suffix_share}")
        self.window = check_positive_int(window, "window (W)")
        self.k = check_positive_int(k, "k")
        self.z = check_z(z)
        self.eps = check_eps(eps)
        self.n_colors = check_positive_int(n_colors, "n_colors")
        self.coreset_size = None if coreset_size is None else check_positive_int(coreset_size, "coreset_size")
        if block_size is None:
            block_size = min(self.window, 256) if self.coreset_size is None else min(self.window, 2 * self.coreset_size)
        self.block_size = check_positive_int(block_size, "block_size (B)")
        if self.block_size > self.window:
            raise ValueError(f"block_size B = {self.block_size} is larger than the window W = {self.window}; "
                             "use B <= W (default 2 * coreset_size)")
        self.horizon = None if horizon is None else check_finite_float(horizon, "horizon")
        if self.horizon is not None and self.horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.seed = int(seed)
        self.gamma = check_finite_float(gamma, "gamma")
        self.phi = check_finite_float(phi, "phi")
        self.top_level = max(0, int(math.ceil(math.log2(self.window / self.block_size))))
        if max_level is not None:
            self.top_level = min(self.top_level, check_positive_int(max_level, "max_level", minimum=0))
        self.rng = np.random.default_rng(self.seed)
        self.t = 0  # points inserted
        self.dim: int | None = None
        self.buckets: list[Bucket] = []
        self._blk_x: np.ndarray | None = None
        self._blk_c = np.zeros(self.block_size, np.int64)
        self._blk_ts = np.zeros(self.block_size)
        self._fill = 0
        self._last_ts = -math.inf
        self._pruned_now = -math.inf
        self.n_merges = 0
        self.n_builds = 0
        # colour counts per chunk of g arrivals (ring buffer) for the colour calibration of queries [design]
        self.color_counts = bool(color_counts) and self.coreset_size is not None
        self.chunk = max(1, int(self.eps * self.window / (10 * self.n_colors)))
        self._cc_slots = -(-self.window // self.chunk) + 2
        self._cc = np.zeros((self._cc_slots, self.n_colors))
        self._cc_id = np.full(self._cc_slots, -1, np.int64)
        self._cc_t0 = np.zeros(self._cc_slots)
        self._cc_t1 = np.zeros(self._cc_slots)
        self.max_level = max_level

    # ------------------------------------------------------------------ insertion
    def insert(self, x, color: int, timestamp: float | None = None) -> None:
        """Insert one point (``x``: ``[d]`` float, ``color``: int in ``[0, n_colors)``)."""
        self.insert_many(np.asarray(x, dtype=np.float64).reshape(1, -1), [color],
                         None if timestamp is None else [timestamp])

    def insert_many(self, X, colors, timestamps=None) -> None:
        """Insert a batch in arrival order (vectorised: only completed blocks trigger work).

        Args:
            X: ``[n, d]`` float features.
            colors: ``[n]`` int colours in ``[0, n_colors)``.
            timestamps: ``[n]`` nondecreasing floats (default: the arrival index ``t``); required for a
                time-based window.

        Raises:
            ValueError: NaN/inf features (naming the stream position), a dimension change, a colour outside
                ``[0, n_colors)``, decreasing timestamps, missing timestamps with ``horizon``.
        """
        X = as_points(X, "points", dim=self.dim, offset=self.t, n_colors_given=int(np.size(colors)))
        n = X.shape[0]
        if n == 0:
            return
        c = as_colors(colors, n, self.n_colors, offset=self.t)
        if timestamps is None:
            if self.horizon is not None:
                raise ValueError("a time-based window (horizon=...) needs timestamps for every point")
            ts = np.arange(self.t + 1, self.t + n + 1, dtype=np.float64)
        else:
            ts = np.asarray(timestamps, dtype=np.float64).reshape(-1)
            if ts.shape != (n,):
                raise ValueError(f"timestamps must have shape ({n},), got {ts.shape}")
            if not np.isfinite(ts).all():
                raise ValueError("timestamps must be finite")
            prev = np.r_[self._last_ts, ts[:-1]]
            bad = np.flatnonzero(ts < prev)
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"timestamps must be nondecreasing: point {self.t + i} has timestamp {ts[i]} "
                                 f"< the previous {prev[i]}")
        if self.dim is None:
            self.dim = X.shape[1]
            self._blk_x = np.zeros((self.block_size, self.dim))
        if self.color_counts:
            self._count_colors(c, ts)
        i = 0
        B = self.block_size
        while i < n:
            take = min(B - self._fill, n - i)
            sl = slice(self._fill, self._fill + take)
            self._blk_x[sl] = X[i:i + take]
            self._blk_c[sl] = c[i:i + take]
            self._blk_ts[sl] = ts[i:i + take]
            self._fill += take
            self.t += take
            i += take
            self._last_ts = float(ts[i - 1])
            if self._fill == B:
                self._close_block()

    def _count_colors(self, c: np.ndarray, ts: np.ndarray) -> None:
        """Add a batch to the per-chunk colour counts (vectorised)."""
        cid = (np.arange(self.t, self.t + c.size, dtype=np.int64)) // self.chunk
        keep = cid > cid[-1] - self._cc_slots  # older chunks of a long batch would be overwritten anyway
        cid, c, ts = cid[keep], c[keep], ts[keep]
        slot = cid % self._cc_slots
        ucid, first = np.unique(cid, return_index=True)
        us = ucid % self._cc_slots
        fresh = self._cc_id[us] != ucid
        self._cc[us[fresh]] = 0.0
        self._cc_id[us[fresh]] = ucid[fresh]
        self._cc_t0[us[fresh]] = ts[first[fresh]]
        np.add.at(self._cc, (slot, c), 1.0)
        last = np.r_[first[1:] - 1, c.size - 1]
        self._cc_t1[us] = ts[last]

    def window_color_counts(self, now: float | None = None) -> np.ndarray | None:
        """Per-colour counts of the window from the chunk counters: exact for whole chunks, the chunk that
        straddles the boundary split in proportion of its positions (error at most ``chunk`` points, i.e.
        ``eps W / (10 l)``). ``None`` if the counters are off or no longer cover the window (a time window that
        received more than ``window`` points)."""
        if not self.color_counts or self.t == 0:
            return None
        now_v = float(self.t) if self.horizon is None else (self._last_ts if now is None else float(now))
        bound = self._bound(now_v)
        live = self._cc_id >= 0
        ids = self._cc_id[live]
        cnt = self._cc[live]
        if self.horizon is None:
            lo = ids * self.chunk + 1.0
            hi = np.minimum((ids + 1) * self.chunk, self.t).astype(np.float64)
            frac = np.clip((hi - bound) / (hi - lo + 1.0), 0.0, 1.0)
            oldest_lo = lo.min()
            covered = oldest_lo <= bound + 1
        else:
            t0, t1 = self._cc_t0[live], self._cc_t1[live]
            span = t1 - t0
            frac = np.where(t1 <= bound, 0.0, np.where(t0 > bound, 1.0,
                            np.clip((t1 - bound) / np.where(span > 0, span, 1.0), 0.0, 1.0)))
            covered = t0.min() <= bound or self._cc_id.max() < self._cc_slots - 1
        if not covered:
            return None
        return (frac[:, None] * cnt).sum(0)

    def _pos(self, b_index: np.ndarray, b_ts: np.ndarray) -> np.ndarray:
        return b_index.astype(np.float64) if self.horizon is None else b_ts

    def _make_bucket(self, level: int, S: WeightedSet, idx: np.ndarray, lo: float, hi: float) -> Bucket:
        """Online coreset of ``S`` (given newest-first, arrival indices ``idx``) as a bucket."""
        m = len(S)
        if self.coreset_size is None or m <= self.coreset_size:
            ar = np.arange(m, dtype=np.int64)
            return Bucket(level, S.points, S.weights.copy(), S.colors, S.timestamps, idx, ar, np.zeros(m),
                          S.weights.copy(), S.weights.copy(), ar, S.colors.copy(), lo, hi)
        gs = online_sample(S, self.k, self.z, self.eps, size=self.coreset_size, seed=self.rng, gamma=self.gamma,
                           phi=self.phi, suffix_share=self.suffix_share)
        i = gs.kept
        return Bucket(level, S.points[i], gs.ht, S.colors[i], S.timestamps[i], idx[i], gs.gid, gs.cum_excl, gs.w_in,
                      gs.gtot, gs.gfac, gs.gcol, lo, hi)

    def _close_block(self) -> None:
        B = self.block_size
        first = self.t - B + 1
        idx = np.arange(first, self.t + 1, dtype=np.int64)[::-1]
        rev = slice(None, None, -1)
        S = WeightedSet(self._blk_x[rev].copy(), np.ones(B), self._blk_c[rev].copy(), self._blk_ts[rev].copy(),
                        self.n_colors)
        lo, hi = (float(first), float(self.t)) if self.horizon is None else (float(self._blk_ts[0]),
                                                                              float(self._blk_ts[B - 1]))
        self.buckets.append(self._make_bucket(0, S, idx, lo, hi))
        self._fill = 0
        self.n_builds += 1
        self._expire(self._now_default())
        while (len(self.buckets) >= 2 and self.buckets[-1].level == self.buckets[-2].level
               and self.buckets[-1].level < self.top_level):
            new, old = self.buckets.pop(), self.buckets.pop()
            bound = self._bound(self._now_default())
            parts = [self._bucket_window(new, bound), self._bucket_window(old, bound)]
            pts = np.concatenate([p[0] for p in parts])
            w = np.concatenate([p[1] for p in parts])
            col = np.concatenate([p[2] for p in parts])
            ts = np.concatenate([p[3] for p in parts])
            ind = np.concatenate([p[4] for p in parts])
            order = np.argsort(-ind, kind="stable")  # newest first
            U = WeightedSet(pts[order], w[order], col[order], ts[order], self.n_colors)
            lo = max(old.lo, bound + (1.0 if self.horizon is None else 0.0))
            self.buckets.append(self._make_bucket(new.level + 1, U, ind[order], lo, new.hi))
            self.n_merges += 1

    # ------------------------------------------------------------------ expiry and queries
    def _now_default(self) -> float:
        return float(self.t) if self.horizon is None else self._last_ts

    def _bound(self, now: float) -> float:
        """Positions ``> bound`` are inside the window at time ``now``."""
        return now - self.window if self.horizon is None else now - self.horizon

    def _expire(self, now: float) -> None:
        """Delete buckets none of whose points can be in a window again (a bucket that straddles the boundary
        keeps its expired points: they anchor the calibration of its window part)."""
        bound = self._bound(now)
        self.buckets = [b for b in self.buckets if b.hi > bound]
        if self.horizon is not None:
            self._pruned_now = max(self._pruned_now, now)

    def _bucket_window(self, b: Bucket, bound: float):
        """The bucket's points inside the window (positions ``> bound``) with calibrated weights.

        Each group's window weight is known exactly at its oldest kept point inside the window
        (``cum_excl + w_in``); the group's points between that point and the next kept point outside the window
        (or the bucket's oldest position) are split in proportion of positions [design]. Groups with no kept
        point inside pass their estimated weight to the same facility and colour (:func:`calibrate_weights`).
        Returns ``(points, weights, colors, timestamps, index)``.
        """
        pos = self._pos(b.index, b.timestamps)
        inw = pos > bound
        if not inw.any() and b.hi <= bound:
            e = np.zeros(0)
            return np.zeros((0, b.points.shape[1])), e, np.zeros(0, np.int64), e, np.zeros(0, np.int64)
        G = b.gtot.size
        unit = 1.0 if self.horizon is None else 0.0  # integer positions: points strictly between anchors
        if b.lo > bound:
            target = b.gtot
        else:
            target = np.zeros(G)
            I = np.flatnonzero(inw)
            O = np.flatnonzero(~inw)
            # q: per group, the oldest kept point inside; q2: per group, the newest kept point outside
            q = np.full(G, -1, np.int64)
            if I.size:
                o = I[np.lexsort((pos[I], b.gid[I]))]
                first = np.r_[True, np.diff(b.gid[o]) != 0]
                q[b.gid[o[first]]] = o[first]
            q2 = np.full(G, -1, np.int64)
            if O.size:
                o = O[np.lexsort((-pos[O], b.gid[O]))]
                first = np.r_[True, np.diff(b.gid[o]) != 0]
                q2[b.gid[o[first]]] = o[first]
            has = q >= 0
            gq = np.flatnonzero(has)
            A = b.cum_excl[q[gq]] + b.w_in[q[gq]]
            pq = pos[q[gq]]
            nxt = q2[gq]
            with_next = nxt >= 0
            gap = np.where(with_next, b.cum_excl[np.maximum(nxt, 0)] - A, b.gtot[gq] - A)
            lo_ref = np.where(with_next, pos[np.maximum(nxt, 0)], b.lo - unit)
            num = pq - unit - bound
            den = pq - unit - lo_ref
            frac = np.clip(np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0), 0.0, 1.0)
            target[gq] = A + np.maximum(gap, 0.0) * frac
            # groups with no kept point inside: the weight before their first kept point (or all of it)
            gn = np.flatnonzero(~has)
            q2n = q2[gn]
            wb = np.where(q2n >= 0, b.cum_excl[np.maximum(q2n, 0)], b.gtot[gn])
            top = np.where(q2n >= 0, pos[np.maximum(q2n, 0)], b.lo - unit)
            den = b.hi - top
            frac = np.clip(np.where(den > 0, (b.hi - bound) / np.where(den > 0, den, 1.0), 0.0), 0.0, 1.0)
            target[gn] = wb * frac
        I = np.flatnonzero(inw)
        w, _ = calibrate_weights(b.ht[I], b.gid[I], target, b.gfac, b.gcol, self.n_colors)
        return b.points[I], w, b.colors[I], b.timestamps[I], b.index[I]

    def query(self, now: float | None = None) -> WeightedSet:
        """The summary of the current window: a weighted coloured set (``points [m, d]``, ``weights``,
        ``colors``, ``timestamps``).

        Args:
            now: query time for a time-based window (default: the latest timestamp; it may not be earlier than
                the latest inserted timestamp); ignored for a count-based window (always the last ``W`` arrivals).

        Raises:
            ValueError: no point inserted yet; ``now`` earlier than the latest timestamp.
        """
        if self.t == 0:
            raise ValueError("query() before any insert: the window is empty; insert points first")
        if self.horizon is None:
            now_v = float(self.t)
        else:
            now_v = self._last_ts if now is None else check_finite_float(now, "now")
            if now_v < self._last_ts:
                raise ValueError(f"query time now = {now_v} is earlier than the latest inserted timestamp "
                                 f"{self._last_ts}; a summary answers for the present window only")
        self._expire(now_v)
        bound = self._bound(now_v)
        parts = []
        for b in self.buckets:
            X, w, c, ts, _ = self._bucket_window(b, bound)
            parts.append(WeightedSet(X, w, c, ts, self.n_colors))
        counts = self.window_color_counts(now_v)
        if counts is not None and parts:
            # colour calibration: the buckets' weight of each colour is rescaled to the window's colour count
            # (minus the exact raw points of the partial block)
            raw = np.zeros(self.n_colors)
            if self._fill:
                bidx = np.arange(self.t - self._fill + 1, self.t + 1, dtype=np.int64)
                m = self._pos(bidx, self._blk_ts[: self._fill]) > bound
                raw = np.bincount(self._blk_c[: self._fill][m], minlength=self.n_colors)[: self.n_colors]
            B = WeightedSet.concat(parts, n_colors=self.n_colors, dim=self.dim)
            have = B.color_weights()
            want = np.maximum(counts - raw, 0.0)
            fac = np.where(have > 0, want / np.where(have > 0, have, 1.0), 1.0)
            parts = [WeightedSet(B.points, B.weights * fac[B.colors], B.colors, B.timestamps, self.n_colors)]
        if self._fill:
            bidx = np.arange(self.t - self._fill + 1, self.t + 1, dtype=np.int64)
            m = self._pos(bidx, self._blk_ts[: self._fill]) > bound
            parts.append(WeightedSet(self._blk_x[: self._fill][m].copy(), np.ones(int(m.sum())),
                                     self._blk_c[: self._fill][m].copy(), self._blk_ts[: self._fill][m].copy(),
                                     self.n_colors))
        return WeightedSet.concat(parts, n_colors=self.n_colors, dim=self.dim)

    def stats(self) -> dict:
        """Stored-size statistics: ``stored_points`` (all points held: buckets + partial block),
        ``bucket_points``, ``partial_block``, ``buckets``, ``levels`` (per bucket, oldest first),
        ``max_buckets`` (the bound ``2 (ceil(log2(W / B)) + 1)``), ``inserted``."""
        bp = sum(len(b) for b in self.buckets)
        return {"stored_points": bp + self._fill, "bucket_points": bp, "partial_block": self._fill,
                "buckets": len(self.buckets), "levels": [b.level for b in self.buckets],
                "max_buckets": 2 * (self.top_level + 1), "top_level": self.top_level, "inserted": self.t,
                "block_size": self.block_size, "coreset_size": self.coreset_size, "window": self.window,
                "merges": self.n_merges, "builds": self.n_builds,
                "color_count_chunks": int((self._cc_id >= 0).sum()) if self.color_counts else 0,
                "chunk": self.chunk if self.color_counts else None}

    @property
    def stored_points(self) -> int:
        return self.stats()["stored_points"]

    # ------------------------------------------------------------------ persistence
    def config(self) -> dict:
        return {"window": self.window, "k": self.k, "z": self.z, "eps": self.eps, "n_colors": self.n_colors,
                "coreset_size": self.coreset_size, "block_size": self.block_size, "horizon": self.horizon,
                "seed": self.seed, "gamma": self.gamma, "phi": self.phi,
                "suffix_share": self.suffix_share, "max_level": self.max_level, "color_counts": self.color_counts}

    def save(self, path: str | Path) -> Path:
        """Write the full state (configuration, buckets with their bookkeeping, partial block, counters, RNG
        state) to an ``.npz`` without pickles. :meth:`load` restores it exactly, so a resumed stream continues
        identically."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": _FORMAT, "config": self.config(), "t": self.t, "dim": self.dim, "fill": self._fill,
                 "last_ts": self._last_ts if math.isfinite(self._last_ts) else None,
                 "pruned_now": self._pruned_now if math.isfinite(self._pruned_now) else None,
                 "buckets": [{"level": b.level, "size": len(b), "groups": int(b.gtot.size), "lo": b.lo, "hi": b.hi}
                             for b in self.buckets],
                 "rng": self.rng.bit_generator.state, "merges": self.n_merges, "builds": self.n_builds}
        d = self.dim or 0
        arrays = {"state": np.array(json.dumps(state))}
        for name in Bucket.ARRAYS + Bucket.GROUP_ARRAYS:
            if self.buckets:
                arrays[name] = np.concatenate([getattr(b, name) for b in self.buckets])
            else:
                arrays[name] = np.zeros((0, d)) if name == "points" else np.zeros(0)
        arrays["block_x"] = self._blk_x[: self._fill] if self._blk_x is not None else np.zeros((0, d))
        arrays["block_c"] = self._blk_c[: self._fill]
        arrays["block_ts"] = self._blk_ts[: self._fill]
        arrays["cc"], arrays["cc_id"], arrays["cc_t0"], arrays["cc_t1"] = self._cc, self._cc_id, self._cc_t0, self._cc_t1
        tmp = p.with_name(p.name + ".tmp.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.replace(p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> SlidingWindowCoreset:
        """Restore a structure written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file. ValueError: not a saved summary of this package.
        """
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"no saved summary at {p}")
        try:
            with np.load(p, allow_pickle=False) as z:
                a = {key: z[key] for key in z.files}
            state = json.loads(str(a["state"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise ValueError(f"{p} is not a saved SlidingWindowCoreset (unreadable or truncated .npz: "
                             f"{type(e).__name__}: {e}); save it again with SlidingWindowCoreset.save") from None
        if state.get("format") != _FORMAT:
            raise ValueError(f"{p}: unknown format {state.get('format')!r}, expected {_FORMAT!r}")
        sw = cls(**state["config"])
        sw.t, sw.dim, sw._fill = state["t"], state["dim"], state["fill"]
        sw._last_ts = -math.inf if state["last_ts"] is None else state["last_ts"]
        sw._pruned_now = -math.inf if state["pruned_now"] is None else state["pruned_now"]
        sw.n_merges, sw.n_builds = state["merges"], state["builds"]
        sw._cc, sw._cc_id = a["cc"].astype(np.float64), a["cc_id"].astype(np.int64)
        sw._cc_t0, sw._cc_t1 = a["cc_t0"].astype(np.float64), a["cc_t1"].astype(np.float64)
        sw.rng.bit_generator.state = state["rng"]
        off = goff = 0
        ints = {"colors", "index", "gid", "gfac", "gcol"}
        for bd in state["buckets"]:
            sl, gsl = slice(off, off + bd["size"]), slice(goff, goff + bd["groups"])
            kw = {n: (a[n][sl].astype(np.int64) if n in ints else a[n][sl].copy()) for n in Bucket.ARRAYS}
            kw.update({n: (a[n][gsl].astype(np.int64) if n in ints else a[n][gsl].copy()) for n in Bucket.GROUP_ARRAYS})
            sw.buckets.append(Bucket(level=int(bd["level"]), lo=float(bd["lo"]), hi=float(bd["hi"]), **kw))
            off += bd["size"]
            goff += bd["groups"]
        if sw.dim is not None:
            sw._blk_x = np.zeros((sw.block_size, sw.dim))
            sw._blk_x[: sw._fill] = a["block_x"]
            sw._blk_c[: sw._fill] = a["block_c"]
            sw._blk_ts[: sw._fill] = a["block_ts"]
        return sw


def merge_summaries(summaries, *, now: float | None = None, reduce_to: int | None = None, k: int | None = None,
                    z: int = 1, eps: float = 0.1, seed=0) -> WeightedSet:
    """Merge the window summaries of several stream partitions at query time.

    The union of coresets of disjoint point sets is a coreset of their union (costs add up), so the summaries
    held by the workers of a partitioned stream (Spark state, Ray actors, Dask futures) are combined here.
    For time-based windows pass the same ``now`` to every partition's query.

    Args:
        summaries: :class:`SlidingWindowCoreset` objects (queried at ``now``) or already-queried
            :class:`WeightedSet` objects.
        now: common query time (time-based windows).
        reduce_to: optionally shrink the union with :func:`ring_coreset` to this many points (needs ``k``).

    Returns:
        The merged :class:`WeightedSet`.
    """
    sets = [s.query(now) if isinstance(s, SlidingWindowCoreset) else s for s in summaries]
    if not sets:
        raise ValueError("merge_summaries: no summaries given")
    U = WeightedSet.concat(sets)
    if reduce_to is not None and len(U) > reduce_to:
        if k is None:
            raise ValueError("merge_summaries: reduce_to needs k")
        U = ring_coreset(U, k, z, eps, size=reduce_to, seed=seed)
    return U
