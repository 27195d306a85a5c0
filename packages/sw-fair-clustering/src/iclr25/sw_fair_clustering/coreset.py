"""Assignment-preserving coresets: the offline ring coreset (Algorithm 2) and the online coreset over a
Meyerson sketch (Algorithm 1).

Both split every cluster of a rough solution into colour classes and distance rings
``R_{a,j,r} = {p : 2^r rho_a <= dist(p, a) < 2^{r+1} rho_a}`` (plus one inner ring below ``2^{r_min} rho_a``,
``r_min = -ceil(log2(1/eps))``) and sample uniformly inside each ring, so each colour's weight in each ring
is preserved in expectation -- the property the fair-clustering reduction needs (spec "Assignment-preserving
coreset").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validate import (
    as_colors,
    as_points,
    as_weights,
    check_eps,
    check_finite_float,
    check_k,
    check_positive_int,
    check_z,
)
from .clustering import kclustering
from .lp import dist_z
from .meyerson import MeyersonSketch
from .weighted_set import WeightedSet

__all__ = ["ring_coreset", "OnlineCoreset", "online_coreset", "uniform_sample", "stratified_uniform_sample", "ring_bounds", "R_MAX"]

R_MAX = 40
"""Largest ring index kept separate (farther points share the last ring); numerical guard only."""


def ring_bounds(eps: float) -> int:
    """``r_min = -ceil(log2(1/eps))`` (spec Algorithm 2 [design])."""
    return -int(math.ceil(math.log2(1.0 / eps)))


def _ring_index(d: np.ndarray, rho: np.ndarray, r_min: int) -> np.ndarray:
    """``floor(log2(d / rho))`` clipped to ``[r_min - 1, R_MAX]``; ``r_min - 1`` is the inner ring (``d = 0``
    included)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.floor(np.log2(d / np.maximum(rho, 1e-300)))
    r = np.where(np.isfinite(r), r, r_min - 1)
    return np.clip(r, r_min - 1, R_MAX).astype(np.int64)


def _group_keys(assign, colors, rings, n_colors: int, r_min: int) -> np.ndarray:
    n_r = R_MAX - (r_min - 1) + 1
    return (assign.astype(np.int64) * n_colors + colors) * n_r + (rings - (r_min - 1))


def _cumulative_group_weight(keys: np.ndarray, w: np.ndarray, prior_keys: np.ndarray | None = None,
                             prior_tot: np.ndarray | None = None) -> np.ndarray:
    """``W_g(p)``: weight of the points of ``p``'s group seen so far (earlier in ``keys`` order, ``p``
    included, plus ``prior_tot`` for groups seen in earlier batches). Vectorised (stable sort + cumsum)."""
    n = keys.size
    if n == 0:
        return np.zeros(0)
    uniq, inv = np.unique(keys, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    ws = w[order]
    cs = np.cumsum(ws)
    sid = inv[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sid)) + 1]
    offset = cs[starts] - ws[starts]
    out = np.empty(n)
    out[order] = cs - offset[sid]
    if prior_keys is not None and prior_keys.size:
        pos = np.searchsorted(prior_keys, uniq)
        pos_c = np.minimum(pos, prior_keys.size - 1)
        hit = prior_keys[pos_c] == uniq
        add = np.where(hit, prior_tot[pos_c], 0.0)
        out += add[inv]
    return out


def _merge_totals(prior_keys, prior_tot, keys, w):
    uniq, inv = np.unique(keys, return_inverse=True)
    tot = np.bincount(inv, weights=w, minlength=uniq.size)
    if prior_keys is None or prior_keys.size == 0:
        return uniq, tot
    allk = np.concatenate([prior_keys, uniq])
    allt = np.concatenate([prior_tot, tot])
    u2, inv2 = np.unique(allk, return_inverse=True)
    return u2, np.bincount(inv2, weights=allt, minlength=u2.size)


def _expected_kept(s: float, w: np.ndarray, Wc: np.ndarray) -> float:
    """``sum_p min(1, s w_p / Wc_p)``; ``Wc`` is the per-point denominator (the group's running weight for the
    online schedule)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.minimum(1.0, np.where(Wc > 0, s * w / Wc, 0.0)).sum())


def _solve_group_size(w: np.ndarray, Wc: np.ndarray, target: float) -> float:
    """The ``s`` with ``E[kept] = sum_p min(1, s w_p / Wc_p) = target`` (``inf`` when the target is at least the
    number of points with positive weight). ``E`` is piecewise linear in ``s`` with breakpoints ``Wc_p / w_p``, so
    the solution is exact: sort the rates ``r_p = w_p / Wc_p``; between the ``(j-1)``-th and ``j``-th largest rate
    ``E(s) = (j - 1) + s * sum_{i >= j} r_(i)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where((Wc > 0) & (w > 0), w / Wc, 0.0)
    r = np.sort(r[r > 0])[::-1]
    n_pos = r.size
    if target >= n_pos:
        return math.inf
    if target <= 0:
        return 0.0
    suffix = np.cumsum(r[::-1])[::-1]  # suffix[j] = sum_{i >= j} r_i (0-based)
    j = np.arange(n_pos)
    e_at = j + 1 + np.r_[suffix[1:], 0.0] / r  # E at s = 1 / r_j: points 0..j saturated
    first = int(np.searchsorted(e_at, target))  # first breakpoint whose E reaches the target
    return float((target - first) / suffix[first])


def _inclusion(w: np.ndarray, Wc: np.ndarray, s: float) -> np.ndarray:
    if math.isinf(s):
        return (w > 0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.minimum(1.0, np.where(Wc > 0, s * w / Wc, 0.0))


def _sample(w: np.ndarray, Wc: np.ndarray, s: float, rng: np.random.Generator, gid: np.ndarray | None = None,
            base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Online sampling inside groups: ``p`` is kept with probability ``pi = min(1, s w_p / W_g(p))`` and gets the
    HT weight ``w_p / pi``.

    With ``gid`` (groups ``[n]`` in ``[0, G)``) the draws are *systematic* inside each group [design]: ``p`` is
    kept iff ``floor(C_p) > floor(C_p - pi_p)`` with ``C_p = u_g + sum of pi over the group's points up to p``
    and one uniform offset ``u_g`` per group (``base``: the groups' running ``C`` from earlier batches, default
    fresh offsets). Each point is still kept with probability exactly ``pi_p`` and the decision uses only the
    past, but the number kept in any prefix of a group is within one of its expectation.

    Returns:
        ``(keep [n] bool, weights [n] (0 where dropped), new running C per group or None)``.
    """
    pi = _inclusion(w, Wc, s)
    if gid is None:
        keep = rng.random(w.size) < pi
        state = None
    else:
        G = int(gid.max()) + 1 if gid.size else 0
        if base is None:
            base = rng.random(G)
        C = _cumulative_group_weight(gid, pi) + base[gid]
        keep = (np.floor(C) > np.floor(C - pi)) & (pi > 0)
        state = base + np.bincount(gid, weights=pi, minlength=G)
    neww = np.zeros_like(w)
    neww[keep] = w[keep] / pi[keep]
    return keep, neww, state


def uniform_sample(S: WeightedSet, m: int, seed=0) -> WeightedSet:
    """Baseline *uniform*: ``m`` points of ``S`` drawn uniformly without replacement, each with weight
    ``w(S) / m`` (``W / m`` for a raw window).

    Raises:
        ValueError: ``m < 1`` or ``m > |S|``.
    """
    m = check_positive_int(m, "m (sample size)")
    if m > len(S):
        raise ValueError(f"uniform sample of {m} points from a set of {len(S)}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(S), m, replace=False))
    sub = S.subset(idx)
    return sub.with_weights(np.full(m, S.total_weight() / m))


def stratified_uniform_sample(S: WeightedSet, m: int, seed=0) -> WeightedSet:
    """Baseline *stratified uniform*: about ``m`` points of ``S`` drawn uniformly without replacement
    *within each colour*, ``m_j`` points of colour ``j`` (proportional to colour ``j``'s weight, largest
    remainders, at least one per present colour), each of weight ``w(S ∩ P_j) / m_j``. Its colour weights
    equal ``S``'s exactly, so a fairness constraint that ``S`` satisfies stays satisfiable: the fair
    comparison for a summary that keeps colour totals.

    Raises:
        ValueError: ``m < 1``, ``m > |S|``, or ``m`` smaller than the number of colours present.
    """
    m = check_positive_int(m, "m (sample size)")
    if m > len(S):
        raise ValueError(f"stratified uniform sample of {m} points from a set of {len(S)}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    present = [j for j in range(S.n_colors) if np.any(S.colors == j)]
    if m < len(present):
        raise ValueError(f"stratified uniform sample of {m} points cannot hold the {len(present)} colours present")
    n_j = np.array([np.sum(S.colors == j) for j in present], dtype=np.int64)
    share = m * n_j / n_j.sum()
    m_j = np.maximum(1, np.floor(share).astype(np.int64))
    while m_j.sum() > m:  # the floor of 1 overshot: take back from the largest
        m_j[np.argmax(m_j - share)] -= 1
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    for i in order[: m - int(m_j.sum())]:
        m_j[i] += 1
    m_j = np.minimum(m_j, n_j)
    idx, w = [], []
    for j, mj in zip(present, m_j):
        pool = np.flatnonzero(S.colors == j)
        pick = rng.choice(pool, int(mj), replace=False)
        idx.append(pick)
        w.append(np.full(int(mj), S.weights[pool].sum() / mj))
    order_all = np.argsort(np.concatenate(idx), kind="stable")
    ids = np.concatenate(idx)[order_all]
    return S.subset(ids).with_weights(np.concatenate(w)[order_all])


def ring_coreset(S: WeightedSet, k: int, z: int = 1, eps: float = 0.1, *, size: int | None = None,
                 s: int | None = None, seed=0, n_init: int = 1) -> WeightedSet:
    """Algorithm 2 (``RingCoreset``), offline.

    A rough solution ``A`` (weighted D^z seeding + Lloyd/Weiszfeld, :func:`kclustering`) defines clusters
    ``P_a`` with ``rho_a = (cost(P_a, a) / w(P_a))^{1/z}``; every ``P_a ∩ P_j`` is split into rings and each
    ring keeps ``s`` of its points uniformly without replacement (all of them when it has at most ``s``),
    each with weight ``w_p |R| / s`` (Horvitz-Thompson; ``|R| / s`` for raw points).

    Args:
        S: ``[m]`` weighted coloured points.
        k, z, eps: clusters of ``A``, objective, ring precision (``r_min = -ceil(log2 1/eps)``).
        size: target number of points (``s`` chosen per ring so the total is exactly ``min(size, |S|)``).
        s: points per ring (alternative to ``size``).
        seed: int or Generator.

    Returns:
        The coreset (timestamps carried over).

    Raises:
        ValueError: neither or both of ``size`` and ``s``; bad ``k``/``z``/``eps``.
    """
    z = check_z(z)
    eps = check_eps(eps)
    if (size is None) == (s is None):
        raise ValueError("ring_coreset: give exactly one of size= (target points) or s= (points per ring)")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pos = S.weights > 0
    check_k(k, int(pos.sum()), what="the point set")
    A, _ = kclustering(S, k, z, seed=rng, n_init=n_init, max_iter=10)
    D = dist_z(S.points, A, z)
    a = D.argmin(1)
    dz = D[np.arange(len(S)), a]
    cost_a = np.bincount(a, weights=S.weights * dz, minlength=k)
    w_a = np.bincount(a, weights=S.weights, minlength=k)
    rho = np.where(w_a > 0, (cost_a / np.maximum(w_a, 1e-300)), 0.0) ** (1.0 / z)
    r_min = ring_bounds(eps)
    rings = _ring_index(dz ** (1.0 / z), rho[a], r_min)
    keys = _group_keys(a, S.colors, rings, S.n_colors, r_min)
    keys = np.where(pos, keys, -1)
    uniq, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)
    valid = uniq >= 0
    if size is not None:
        size = check_positive_int(size, "size")
        budget = min(size, int(pos.sum()))
        c = np.where(valid, counts, 0)
        lo, hi = 0, int(c.max()) if c.size else 0
        while lo < hi:  # largest per-ring quota s with sum min(|R|, s) <= budget
            mid = (lo + hi + 1) // 2
            if np.minimum(c, mid).sum() <= budget:
                lo = mid
            else:
                hi = mid - 1
        quota = np.minimum(c, lo)
        left = budget - int(quota.sum())
        if left > 0:  # one more point for the largest rings that still have unsampled points
            cand = np.flatnonzero(c > quota)
            cand = cand[np.argsort(-c[cand], kind="stable")][:left]
            quota[cand] += 1
    else:
        s = check_positive_int(s, "s")
        quota = np.where(valid, np.minimum(counts, s), 0)
    # uniform without replacement inside each ring: rank points by a random key within their ring
    order = np.lexsort((rng.random(len(S)), inv))
    sid = inv[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sid)) + 1]
    rank = np.empty(len(S), np.int64)
    rank[order] = np.arange(len(S)) - np.repeat(starts, np.diff(np.r_[starts, len(S)]))
    take = rank < quota[inv]
    take &= pos
    wmul = np.where(quota > 0, counts / np.maximum(quota, 1), 0.0)
    idx = np.flatnonzero(take)
    return WeightedSet(S.points[idx], S.weights[idx] * wmul[inv[idx]], S.colors[idx], S.timestamps[idx], S.n_colors)


def calibrate_weights(ht: np.ndarray, gid: np.ndarray, target: np.ndarray, gfac: np.ndarray, gcol: np.ndarray,
                      n_colors: int) -> tuple[np.ndarray, float]:
    """Ratio calibration of Horvitz-Thompson weights to known group totals [design].

    Inside each group the kept points keep their HT proportions, rescaled so the group's weight equals
    ``target[g]`` (its exactly known input weight). A group with no kept point passes its weight to the kept
    points of the same facility and colour, then of the same colour (so colour totals stay exact); only a
    colour with no kept point at all loses weight.

    Args:
        ht: ``[m]`` HT weights of the kept points; gid: ``[m]`` their group in ``[0, G)``.
        target: ``[G]`` group totals; gfac, gcol: ``[G]`` facility and colour of each group.

    Returns:
        ``(weights [m], lost_weight)``.
    """
    G = target.size
    m = ht.size
    if G == 0:
        return ht.copy(), 0.0
    Sg = np.bincount(gid, weights=ht, minlength=G) if m else np.zeros(G)
    w = np.zeros(m)
    if m:
        ok = Sg[gid] > 0
        w[ok] = ht[ok] * target[gid[ok]] / Sg[gid[ok]]
    lost_g = np.where(Sg > 0, 0.0, target)
    if not np.any(lost_g > 0):
        return w, 0.0
    ncol = int(n_colors)
    # level 1: same facility and colour
    fc_g = gfac.astype(np.int64) * ncol + gcol
    uniq, inv = np.unique(fc_g, return_inverse=True)
    pool = np.bincount(inv, weights=lost_g, minlength=uniq.size)
    kept_fc = inv[gid] if m else np.zeros(0, np.int64)
    mass = np.bincount(kept_fc, weights=w, minlength=uniq.size) if m else np.zeros(uniq.size)
    give = mass > 0
    if m:
        fac = np.where(give[kept_fc], 1.0 + pool[kept_fc] / np.where(give[kept_fc], mass[kept_fc], 1.0), 1.0)
        w = w * fac
    pool = np.where(give, 0.0, pool)
    # level 2: same colour
    col_of_fc = uniq % ncol
    pool_c = np.bincount(col_of_fc, weights=pool, minlength=ncol)
    col_k = gcol[gid] if m else np.zeros(0, np.int64)
    mass_c = np.bincount(col_k, weights=w, minlength=ncol) if m else np.zeros(ncol)
    give_c = mass_c > 0
    if m:
        w = w * np.where(give_c[col_k], 1.0 + pool_c[col_k] / np.where(give_c[col_k], mass_c[col_k], 1.0), 1.0)
    return w, float(pool_c[~give_c].sum())


@dataclass
class GroupedSample:
    """An online coreset with the bookkeeping that lets any prefix be calibrated (Algorithm 1 output).

    All per-point arrays are over the kept points, in processing order.

    Attributes:
        kept: ``[m]`` positions of the kept points in the input sequence.
        ht: ``[m]`` Horvitz-Thompson weights ``w_p / pi_p``.
        gid: ``[m]`` group of each kept point in ``[0, G)``.
        cum_excl: ``[m]`` input weight of the point's group *before* it in processing order.
        w_in: ``[m]`` input weight of the kept point.
        gtot: ``[G]`` total input weight of each group; gfac, gcol: ``[G]`` its facility and colour.
        info: :class:`OnlineCoresetInfo`.
    """

    kept: np.ndarray
    ht: np.ndarray
    gid: np.ndarray
    cum_excl: np.ndarray
    w_in: np.ndarray
    gtot: np.ndarray
    gfac: np.ndarray
    gcol: np.ndarray
    info: OnlineCoresetInfo


@dataclass
class OnlineCoresetInfo:
    """Diagnostics of one :func:`online_coreset` call."""

    n_in: int
    n_kept: int
    facilities: int
    doublings: int
    groups: int
    group_size: float
    passes: int
    ring_coarsening: int = 0


def online_sample(S: WeightedSet, k: int, z: int = 1, eps: float = 0.1, *, size: int | None = None,
                  group_size: float | None = None, seed=0, gamma: float = 4.0, phi: float = 1.0,
                  suffix_share: float = 1.0) -> GroupedSample:
    """Algorithm 1 (``OnlineCoreset``) on the points of ``S`` *in their order*, with its group bookkeeping
    (see :func:`online_coreset` for the algorithm and the arguments)."""
    z = check_z(z)
    eps = check_eps(eps)
    k = check_positive_int(k, "k")
    if (size is None) == (group_size is None):
        raise ValueError("online_coreset: give exactly one of size= and group_size=")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n = len(S)
    e = np.zeros(0)
    ei = np.zeros(0, np.int64)
    if n == 0:
        return GroupedSample(ei, e, ei, e, e, e, ei, ei, OnlineCoresetInfo(0, 0, 0, 0, 0, 0.0, 0))
    sk = MeyersonSketch(k, z, gamma=gamma, phi=phi, seed=rng)
    assign, dz, _ = sk.insert_many(S.points, S.weights)
    r_min = ring_bounds(eps)
    rings0 = _ring_index(dz ** (1.0 / z), sk.rho[assign], r_min)
    a = float(suffix_share)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"suffix_share must be in [0, 1], got {suffix_share}")
    w = S.weights
    if size is not None:
        size = check_positive_int(size, "size")
        target = max(1.0, size - 2.0 * math.sqrt(size)) if size >= 16 else 0.75 * size
    coarsen = 0
    while True:
        # rings of ratio 2^(2^coarsen): coarsened only when keeping the first point of every group (s = 1)
        # would already exceed the size target [design]
        rings = (r_min - 1) + ((rings0 - (r_min - 1)) >> coarsen)
        keys = _group_keys(assign, S.colors, rings, S.n_colors, r_min)
        uniq, gid_all = np.unique(keys, return_inverse=True)
        Wc_run = _cumulative_group_weight(gid_all, w)
        G = uniq.size
        gtot = np.bincount(gid_all, weights=w, minlength=G)
        # pi = min(1, s w (a / W_run + (1 - a) / W_total)) = min(1, s w / Wc) with the effective denominator Wc
        Wc = 1.0 / (a / np.maximum(Wc_run, 1e-300) + (1.0 - a) / np.maximum(gtot[gid_all], 1e-300))
        if size is None or coarsen >= 6 or _expected_kept(1.0, w, Wc) <= target:
            break
        coarsen += 1
    if size is not None:
        s = _solve_group_size(w, Wc, target)
    else:
        s = float(group_size)
        if math.isnan(s) or s <= 0:
            raise ValueError(f"group_size must be > 0 (inf keeps every point), got {group_size}")
    keep, neww, _ = _sample(w, Wc, s, rng, gid_all)
    passes = 1
    idx = np.flatnonzero(keep)
    if size is not None:
        while idx.size > size and passes < 50:
            # re-sample the kept sequence online (same groups, same order) to meet the cap; keep the first
            # point of every group (s >= 1) unless that alone is over the cap
            gg, ww = gid_all[idx], neww[idx]
            Wc2 = _cumulative_group_weight(gg, ww)
            s2 = _solve_group_size(ww, Wc2, max(1.0, 0.9 * size))
            if passes < 4:
                s2 = max(1.0, s2)
            keep2, neww2, _ = _sample(ww, Wc2, s2, rng, np.unique(gg, return_inverse=True)[1])
            neww = np.zeros_like(neww)
            neww[idx[keep2]] = neww2[keep2]
            idx = idx[keep2]
            passes += 1
        if idx.size > size:
            raise RuntimeError(f"online_coreset: could not meet the cap of {size} points in 50 passes")
    n_r = R_MAX - (r_min - 1) + 1
    gfac = uniq // (S.n_colors * n_r)
    gcol = (uniq // n_r) % S.n_colors
    info = OnlineCoresetInfo(n, int(idx.size), sk.n_facilities, sk.doublings, int(G), float(s), passes, coarsen)
    return GroupedSample(idx, neww[idx], gid_all[idx], Wc_run[idx] - w[idx], w[idx], gtot, gfac, gcol, info)


def online_coreset(S: WeightedSet, k: int, z: int = 1, eps: float = 0.1, *, size: int | None = None,
                   group_size: float | None = None, seed=0, gamma: float = 4.0, phi: float = 1.0,
                   calibrate: bool = True, suffix_share: float = 1.0) -> tuple[WeightedSet, OnlineCoresetInfo]:
    """Algorithm 1 (``OnlineCoreset``) on the points of ``S`` *in their order*: the kept subset of every prefix
    is a weighted coreset of that prefix.

    1. Meyerson sketch (:class:`MeyersonSketch`) gives each point a facility ``a(p)`` and ``dist(p, a(p))``;
    2. ring ``r(p) = floor(log2(dist / rho_a))`` (``rho_a`` frozen when ``a`` opened);
    3. within group ``g = (a(p), c(p), r(p))`` keep ``p`` with ``pi = min(1, s w_p / W_g(p))`` where ``W_g(p)``
       is the group's weight seen so far (``p`` included); HT weight ``w_p / pi``, so ``E[kept weight of any
       prefix of a group] =`` its true weight.
    4. (``calibrate=True``, default [design]) the HT weights of each group are rescaled to the group's exactly
       known total (:func:`calibrate_weights`): the relative standard deviation of a group total under online
       sampling is about ``1 / sqrt(2 s)``, far too large at practical sizes, while the exact counts cost one
       number per group. :class:`SlidingWindowCoreset` calibrates every window prefix the same way.

    Args:
        S: input in processing order (Algorithm 3 passes blocks and merges newest-first).
        k, z, eps: target clusters of the sketch, objective, ring precision.
        size: hard cap on the kept points: ``s`` is solved so that ``E[kept] = size - 2 sqrt(size)`` (about two
            standard deviations below the cap); if a draw still exceeds it, the kept sequence is re-sampled
            online in the same groups and order (composition keeps the every-prefix property) [design].
        group_size: fixed ``s`` instead (``inf`` keeps every point: the identity coreset).
        seed: int or Generator; gamma, phi: sketch constants.
        calibrate: ratio-calibrate the weights to the group totals (False: plain HT weights).

    Returns:
        ``(kept WeightedSet in input order, OnlineCoresetInfo)``.
    """
    gs = online_sample(S, k, z, eps, size=size, group_size=group_size, seed=seed, gamma=gamma, phi=phi,
                       suffix_share=suffix_share)
    w = gs.ht
    if calibrate and gs.kept.size:
        w, _ = calibrate_weights(gs.ht, gs.gid, gs.gtot, gs.gfac, gs.gcol, S.n_colors)
    i = gs.kept
    return WeightedSet(S.points[i], w, S.colors[i], S.timestamps[i], S.n_colors), gs.info


class OnlineCoreset:
    """Algorithm 1 as an incremental structure: points arrive in batches, each point is kept or discarded
    irrevocably on arrival, and :meth:`summary` is a coreset of everything inserted so far. It never deletes
    anything, so it is also the *insertion-only* baseline (a summary that ignores expiry).

    Args:
        k, z, eps: clusters of the sketch, objective, ring precision.
        n_colors: number of colours ``l``.
        group_size: ``s``, the per-group sampling constant (``inf`` keeps every point).
        calibrate: :meth:`summary` rescales each group's HT weights to its exact running total (default).
        seed: int or Generator.
        gamma, phi: Meyerson constants (see :class:`MeyersonSketch`).
    """

    def __init__(self, k: int, z: int = 1, eps: float = 0.1, *, n_colors: int = 2, group_size: float = 4.0,
                 calibrate: bool = True, seed=0, gamma: float = 4.0, phi: float = 1.0):
        self.k = check_positive_int(k, "k")
        self.z = check_z(z)
        self.eps = check_eps(eps)
        self.n_colors = check_positive_int(n_colors, "n_colors")
        gs = float(group_size)
        if math.isnan(gs) or gs <= 0:
            raise ValueError(f"group_size must be > 0, got {group_size}")
        self.group_size = gs
        self.calibrate = bool(calibrate)
        check_finite_float(gamma, "gamma")
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.sketch = MeyersonSketch(self.k, self.z, gamma=gamma, phi=phi, seed=self.rng)
        self._r_min = ring_bounds(self.eps)
        self._n_r = R_MAX - (self._r_min - 1) + 1
        self._gkeys = np.zeros(0, np.int64)
        self._gtot = np.zeros(0)
        self._gsys = np.zeros(0)
        self._parts: list[tuple] = []
        self.n_seen = 0
        self.dim: int | None = None

    def insert_many(self, X, colors, weights=None, timestamps=None) -> np.ndarray:
        """Insert a batch in order. Returns the ``[n]`` bool mask of kept points.

        Raises:
            ValueError: NaN/inf, dimension change, colours outside ``[0, n_colors)``.
        """
        X = as_points(X, "points", dim=self.dim, offset=self.n_seen, n_colors_given=int(np.size(colors)))
        n = X.shape[0]
        if n == 0:
            return np.zeros(0, bool)
        self.dim = X.shape[1]
        c = as_colors(colors, n, self.n_colors, offset=self.n_seen)
        w = as_weights(weights, n)
        ts = (np.arange(self.n_seen + 1, self.n_seen + n + 1, dtype=np.float64) if timestamps is None
              else np.asarray(timestamps, dtype=np.float64).reshape(n))
        assign, dz, _ = self.sketch.insert_many(X, w)
        rings = _ring_index(dz ** (1.0 / self.z), self.sketch.rho[assign], self._r_min)
        keys = _group_keys(assign, c, rings, self.n_colors, self._r_min)
        Wc = _cumulative_group_weight(keys, w, self._gkeys, self._gtot)
        uniq, inv = np.unique(keys, return_inverse=True)
        pos = np.searchsorted(self._gkeys, uniq)
        pos_c = np.minimum(pos, max(self._gkeys.size - 1, 0))
        seen = (self._gkeys.size > 0) & (self._gkeys[pos_c] == uniq) if self._gkeys.size else np.zeros(uniq.size, bool)
        base = self.rng.random(uniq.size)
        if self._gkeys.size:
            base[seen] = self._gsys[pos_c[seen]]
        keep, neww, state = _sample(w, Wc, self.group_size, self.rng, inv, base)
        allk = np.concatenate([self._gkeys, uniq])
        allsys = np.concatenate([self._gsys, state])
        self._gkeys, self._gtot = _merge_totals(self._gkeys, self._gtot, keys, w)
        # running systematic state per group: the batch's value replaces the old one
        order = np.argsort(allk, kind="stable")
        last = np.r_[allk[order][1:] != allk[order][:-1], True]
        self._gsys = allsys[order][last]
        idx = np.flatnonzero(keep)
        self._parts.append((X[idx], neww[idx], c[idx], ts[idx], keys[idx]))
        self.n_seen += n
        return keep

    def insert(self, x, color, weight: float = 1.0, timestamp: float | None = None) -> bool:
        """Insert one point; returns whether it was kept."""
        ts = None if timestamp is None else [timestamp]
        return bool(self.insert_many(np.atleast_2d(np.asarray(x, dtype=np.float64)), [color], [weight], ts)[0])

    def _concat(self):
        if len(self._parts) > 1:
            self._parts = [tuple(np.concatenate([p[i] for p in self._parts]) for i in range(5))]
        return self._parts[0]

    def summary(self) -> WeightedSet:
        """The kept points (weighted), a coreset of every point inserted so far (group weights calibrated to
        the exact running group totals unless ``calibrate=False``).

        Raises:
            ValueError: nothing inserted yet.
        """
        if self.n_seen == 0:
            raise ValueError("OnlineCoreset.summary(): no point has been inserted yet")
        X, ht, c, ts, keys = self._concat()
        w = ht
        if self.calibrate and keys.size:
            gid = np.searchsorted(self._gkeys, keys)
            gfac = self._gkeys // (self.n_colors * self._n_r)
            gcol = (self._gkeys // self._n_r) % self.n_colors
            w, _ = calibrate_weights(ht, gid, self._gtot, gfac, gcol, self.n_colors)
        return WeightedSet(X, w, c, ts, self.n_colors)

    def __len__(self) -> int:
        return sum(len(p[0]) for p in self._parts)
