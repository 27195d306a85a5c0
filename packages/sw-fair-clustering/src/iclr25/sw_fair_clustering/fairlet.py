"""Optional two-colour fairlet solver on a randomly shifted quadtree, in the spirit of Fairtree
(Backurs et al., ICML 2019), the offline solver the paper's experiments used.

1. A randomly shifted quadtree (an HST) over the points;
2. bottom-up ``(p, q)``-fairlet decomposition: in every cell, as many fairlets of ``p`` minority and ``q``
   majority points as the cell's unmatched points allow; the rest moves up to the parent; what is left at the
   root joins the nearest fairlets until every fairlet has balance ``>= p/q``;
3. weighted k-median / k-means on the fairlet representatives (medoids), every point following its fairlet.

Every cluster is a union of fairlets, each with ``min(#a/#b, #b/#a) >= p/q``, so every cluster meets the
requested balance exactly (spec known-answer test 9). This is a reconstruction, not the authors' code: their
fairlet step minimises the fairlet cost on the tree more carefully (see the README).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validate import as_colors, as_points, check_k, check_positive_int, check_z
from .clustering import kclustering
from .lp import dist_z
from .weighted_set import WeightedSet

__all__ = ["FairletResult", "fairlet_tree_solver", "balance"]


def balance(colors: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per-cluster balance ``min(#0/#1, #1/#0)`` of a two-colour clustering (``[k]``; 0 for a one-colour
    cluster, ``nan`` for an empty one)."""
    c0 = np.bincount(labels[colors == 0], minlength=k).astype(float)
    c1 = np.bincount(labels[colors == 1], minlength=k).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.minimum(c0 / c1, c1 / c0)
    b = np.where((c0 == 0) & (c1 == 0), np.nan, np.nan_to_num(b, nan=0.0, posinf=0.0))
    return b


@dataclass
class FairletResult:
    """Output of :func:`fairlet_tree_solver`.

    Attributes:
        centers: ``[k, d]``; labels: ``[n]`` cluster of every (expanded) point; fairlet: ``[n]`` fairlet id;
        cost: ``sum_p dist(p, centre)^z``; balances: ``[k]`` per-cluster balance; points/colors: the expanded
        input (weights rounded to multiplicities).
    """

    centers: np.ndarray
    labels: np.ndarray
    fairlet: np.ndarray
    cost: float
    balances: np.ndarray
    points: np.ndarray
    colors: np.ndarray


def _expand(S: WeightedSet) -> tuple[np.ndarray, np.ndarray]:
    m = np.round(S.weights)
    if np.any(np.abs(m - S.weights) > 1e-9):
        raise ValueError("fairlet_tree_solver needs integral multiplicities: round the weights first "
                         "(e.g. S.with_weights(np.round(S.weights)))")
    m = m.astype(np.int64)
    return np.repeat(S.points, m, axis=0), np.repeat(S.colors, m)


def fairlet_tree_solver(S, k: int, p: int, q: int, *, z: int = 1, colors=None, seed=0,
                        max_depth: int = 32) -> FairletResult:
    """Fair clustering with two colours and balance ``p/q`` by fairlets on a random quadtree.

    Args:
        S: a :class:`WeightedSet` with two colours and integral weights, or ``[n, d]`` points (then ``colors``).
        k: clusters.
        p, q: integers ``1 <= p <= q``; every cluster gets ``min(#a/#b, #b/#a) >= p/q``.
        z: 1 or 2.
        seed: shift of the quadtree and the k-median seeding.

    Raises:
        ValueError: not two colours, ``p/q`` above the data's own balance, bad ``k``/``p``/``q``.
    """
    z = check_z(z)
    p = check_positive_int(p, "p")
    q = check_positive_int(q, "q")
    if p > q:
        raise ValueError(f"balance p/q needs p <= q, got p = {p}, q = {q}")
    if isinstance(S, WeightedSet):
        if S.n_colors != 2:
            raise ValueError(f"the fairlet solver handles two colours, got {S.n_colors} (use fair_assignment_lp)")
        X, col = _expand(S)
    else:
        X = as_points(S, n_colors_given=None if colors is None else int(np.size(colors)))
        col = as_colors(colors, X.shape[0], 2)
    n = X.shape[0]
    n1 = int(col.sum())
    n0 = n - n1
    minority = 0 if n0 <= n1 else 1
    r_all, b_all = min(n0, n1), max(n0, n1)
    if r_all == 0 or q * r_all < p * b_all:
        raise ValueError(f"requested balance {p}/{q} = {p / q:.4g} exceeds the data's balance "
                         f"{(r_all / b_all) if b_all else 0:.4g} ({r_all} vs {b_all} points)")
    k = check_k(k, n, what="the point set")
    rng = np.random.default_rng(seed)
    is_min = col == minority
    # randomly shifted quadtree: cells of side 2 * span / 2^level
    lo = X.min(0)
    span = float((X.max(0) - lo).max()) or 1.0
    shift = rng.uniform(0.0, span, X.shape[1])
    Y = (X - lo + shift) / (2.0 * span)  # in [0, 1)
    fairlet = np.full(n, -1, np.int64)
    next_id = 0
    for level in range(max_depth, -1, -1):
        free = np.flatnonzero(fairlet < 0)
        if free.size == 0:
            break
        cells = np.floor(Y[free] * (2.0 ** level)).astype(np.int64)
        _, cid = np.unique(cells, axis=0, return_inverse=True)
        cid = cid.ravel()
        ncell = int(cid.max()) + 1
        r = np.bincount(cid[is_min[free]], minlength=ncell)
        b = np.bincount(cid[~is_min[free]], minlength=ncell)
        m = np.minimum(r // p, b // q)
        if not m.any():
            continue
        base = next_id + np.r_[0, np.cumsum(m)[:-1]]
        next_id += int(m.sum())
        # rank of each free point within (cell, colour), random order
        key_col = is_min[free].astype(np.int64)
        order = np.lexsort((rng.random(free.size), key_col, cid))
        grp = cid[order] * 2 + key_col[order]
        starts = np.r_[0, np.flatnonzero(np.diff(grp)) + 1]
        rank = np.empty(free.size, np.int64)
        rank[order] = np.arange(free.size) - np.repeat(starts, np.diff(np.r_[starts, free.size]))
        per = np.where(key_col == 1, p, q)
        take = rank < m[cid] * per
        fairlet[free[take]] = base[cid[take]] + rank[take] // per[take]
    left = np.flatnonzero(fairlet < 0)
    if left.size and next_id == 0:
        fairlet[:] = 0
        next_id = 1
        left = left[:0]
    if left.size:
        assigned = fairlet >= 0
        cnt = np.bincount(fairlet[assigned], minlength=next_id).astype(float)
        reps = np.zeros((next_id, X.shape[1]))
        np.add.at(reps, fairlet[assigned], X[assigned])
        reps /= cnt[:, None]
        fmin = np.bincount(fairlet[assigned & is_min], minlength=next_id)
        fmaj = np.bincount(fairlet[assigned & ~is_min], minlength=next_id)
        # surplus minority points join the nearest fairlet that stays balanced: (p + x, q) has balance
        # min((p + x) / q, q / (p + x)) >= p / q while p + x <= q^2 / p
        lm = left[is_min[left]]
        if lm.size:
            order = np.argsort(dist_z(X[lm], reps, 2), axis=1)
            for row, i in enumerate(lm):  # leftover points only (at most p + q per root cell pass)
                for f in order[row]:
                    if q * q >= p * (fmin[f] + 1) and fmin[f] + 1 <= fmaj[f] * q // p:
                        fairlet[i] = f
                        fmin[f] += 1
                        break
        left = np.flatnonzero(fairlet < 0)
    if left.size:
        # what is still left joins the fairlets nearest to its centroid until the union is balanced
        cen = X[left].mean(0)
        near = np.argsort(dist_z(reps, cen[None], 2)[:, 0])
        a = int(is_min[left].sum())
        bb = left.size - a
        target = int(near[0])
        joined = [target]
        a += fmin[target]
        bb += fmaj[target]
        i = 1
        while not (q * min(a, bb) >= p * max(a, bb)) and i < near.size:
            f = int(near[i])
            joined.append(f)
            a += fmin[f]
            bb += fmaj[f]
            i += 1
        fairlet[left] = target
        fairlet[np.isin(fairlet, joined)] = target
    # compact ids
    _, fairlet = np.unique(fairlet, return_inverse=True)
    fairlet = fairlet.ravel()
    F = int(fairlet.max()) + 1
    sizes = np.bincount(fairlet, minlength=F)
    reps = _medoids(X, fairlet, F, sizes, z)
    R = WeightedSet(reps, sizes.astype(float), np.zeros(F, np.int64), np.arange(F, dtype=float), 1)
    kk = min(k, F)
    C, _ = kclustering(R, kk, z, seed=rng, n_init=3)
    flab = dist_z(reps, C, z).argmin(1)
    labels = flab[fairlet]
    cost = float(dist_z(X, C, z)[np.arange(n), labels].sum())
    return FairletResult(C, labels, fairlet, cost, balance(col, labels, kk), X, col)


def _medoids(X: np.ndarray, fid: np.ndarray, F: int, sizes: np.ndarray, z: int) -> np.ndarray:
    """Medoid of every fairlet, vectorised over fairlets padded to the largest size (fairlets are small)."""
    smax = int(sizes.max())
    if smax > 256:  # the merged root fairlet can be large: its medoid is computed on its own
        big = np.flatnonzero(sizes > 256)
    else:
        big = np.zeros(0, np.int64)
    order = np.argsort(fid, kind="stable")
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    pos = np.arange(X.shape[0]) - np.repeat(starts, sizes)
    small = sizes <= 256
    cap = int(sizes[small].max()) if small.any() else 1
    pad = np.zeros((F, cap, X.shape[1]))
    mask = np.zeros((F, cap), bool)
    sel = small[fid[order]]
    pad[fid[order][sel], pos[sel]] = X[order][sel]
    mask[fid[order][sel], pos[sel]] = True
    d2 = ((pad[:, :, None, :] - pad[:, None, :, :]) ** 2).sum(-1)
    d = d2 if z == 2 else np.sqrt(d2)
    d = np.where(mask[:, None, :], d, 0.0).sum(-1)
    d = np.where(mask, d, math.inf)
    reps = pad[np.arange(F), d.argmin(1)]
    for f in big:
        P = X[fid == f]
        dd = dist_z(P, P, z).sum(1)
        reps[f] = P[dd.argmin()]
    return reps
