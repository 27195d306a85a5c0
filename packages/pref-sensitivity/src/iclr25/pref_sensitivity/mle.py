"""Maximum-likelihood Bradley-Terry and Plackett-Luce scores (numpy + scipy L-BFGS).

Both negative log-likelihoods are convex in the scores; they are minimised with L-BFGS on the
exact gradient and returned in the gauge ``sum(s) = 0``. The unregularised MLE exists iff the
"beats" digraph (an edge ``i -> j`` whenever ``i`` was preferred to ``j``) is strongly connected
(Zermelo 1929; Hunter 2004): an option that never loses (or never wins) drives its score to
``+inf`` (``-inf``). Then ``l2 = 0`` raises :class:`MLEDoesNotExistError`; ``l2 > 0`` fits the
regularised problem and warns with :class:`MLEExistenceWarning`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.sparse import coo_matrix, csc_matrix
from scipy.sparse import identity as sparse_identity
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import spsolve
from scipy.special import expit, log_expit
from threadpoolctl import threadpool_limits

from .plackett_luce import _check_rankings

__all__ = ["MLEDoesNotExistError", "MLEExistenceWarning", "ConvergenceWarning", "FitInfo", "FittedScores",
           "wins_matrix", "fit_bt", "fit_bt_counts", "fit_pl"]

GRAD_TOL = 1e-9
"""A fit counts as converged when the largest gradient entry of the mean negative log-likelihood
(plus ridge) is at most ``max(tol, GRAD_TOL)``."""


class MLEDoesNotExistError(ValueError):
    """The unregularised MLE is infinite (the beats graph is not strongly connected)."""


class MLEExistenceWarning(UserWarning):
    """The unregularised MLE would not exist; the returned scores are those of the l2-regularised fit."""


class ConvergenceWarning(UserWarning):
    """The optimiser stopped before the gradient was small (iteration cap or line-search failure)."""


@dataclass(frozen=True)
class FitInfo:
    """How a maximum-likelihood fit ended.

    Attributes:
        converged: the final gradient's largest entry is at most ``max(tol, GRAD_TOL)``.
        iterations: optimiser iterations used.
        grad_norm: ``max |grad|`` of the objective (mean NLL + ridge) at the returned scores.
        message: the solver's own message.
        method: ``"newton"`` (BT) or ``"L-BFGS-B"`` (PL).
        maxiter: the iteration cap.
        objective: the objective's value at the returned scores.
    """

    converged: bool
    iterations: int
    grad_norm: float
    message: str
    method: str
    maxiter: int
    objective: float

    def to_dict(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


class FittedScores(np.ndarray):
    """``(n,)`` float64 scores (an ``ndarray``) with the fit's :class:`FitInfo` as ``.info``."""

    info: FitInfo | None

    def __array_finalize__(self, obj) -> None:
        self.info = getattr(obj, "info", None)


def _attach(s: np.ndarray, info: FitInfo, what: str) -> FittedScores:
    out = np.asarray(s, dtype=np.float64).view(FittedScores)
    out.info = info
    if not info.converged:
        warnings.warn(f"{what} did not converge: max |gradient| = {info.grad_norm:.3g} after {info.iterations} "
                      f"iterations (cap {info.maxiter}; {info.message}). The scores are not the MLE; raise "
                      "maxiter or check the data", ConvergenceWarning, stacklevel=3)
    return out


def _names(items, n):
    return [str(i) for i in range(n)] if items is None else [str(x) for x in items]


def _index_array(x, name: str, n: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of item indices, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise ValueError(f"{name}: item indices must be integers, got dtype {a.dtype}")
    bad = (a < 0) | (a >= n)
    if bad.any():
        t = int(np.argmax(bad))
        raise ValueError(f"{name}[{t}] = {int(a[t])} is outside [0, {n - 1}] (n_items={n})")
    return a.astype(np.int64)


def wins_matrix(n_items: int, winners, losers, counts=None) -> np.ndarray:
    """Aggregate comparisons into ``W[i, j]`` = (weighted) number of times ``i`` beat ``j``.

    Args:
        n_items: number of options ``n``.
        winners, losers: ``(N,)`` int item indices of each comparison.
        counts: ``(N,)`` non-negative weights (default 1 each).

    Returns:
        ``(n, n)`` float64.

    Raises:
        ValueError: length mismatch, index out of range, a self-comparison, negative counts.
    """
    if int(n_items) < 2:
        raise ValueError(f"n_items must be >= 2, got {n_items}")
    n = int(n_items)
    w = _index_array(winners, "winners", n)
    lo = _index_array(losers, "losers", n)
    if w.shape != lo.shape:
        raise ValueError(f"winners and losers must have the same length, got {w.size} and {lo.size}")
    same = w == lo
    if same.any():
        t = int(np.argmax(same))
        raise ValueError(f"comparison {t} pits item {int(w[t])} against itself; drop it")
    c = np.ones(w.size) if counts is None else np.asarray(counts, dtype=np.float64)
    if c.shape != w.shape:
        raise ValueError(f"counts must have the same length as winners ({w.size}), got {c.shape}")
    if (c < 0).any() or not np.isfinite(c).all():
        raise ValueError("counts must be finite and non-negative")
    W = np.zeros((n, n))
    np.add.at(W, (w, lo), c)
    return W


def _existence(beats: np.ndarray, names: list[str], l2: float) -> None:
    """beats: (n, n) bool adjacency i -> j when i was preferred to j at least once."""
    n = beats.shape[0]
    involved = beats.any(0) | beats.any(1)
    if not involved.all():
        i = int(np.argmin(involved))
        raise ValueError(f"item {names[i]!r} takes part in no comparison; its score is undefined. "
                         "Drop it or add comparisons involving it")
    ncomp, _ = connected_components(coo_matrix(beats), directed=True, connection="strong")
    if ncomp == 1:
        return
    never_lose = [names[i] for i in range(n) if not beats[:, i].any()]
    never_win = [names[i] for i in range(n) if not beats[i].any()]
    detail = []
    if never_lose:
        detail.append(f"never lose: {never_lose[:10]}")
    if never_win:
        detail.append(f"never win: {never_win[:10]}")
    msg = ("the unregularised MLE does not exist: the 'beats' graph is not strongly connected "
           f"({ncomp} components{'; ' + ', '.join(detail) if detail else ''})")
    if l2 <= 0:
        raise MLEDoesNotExistError(msg + ". Pass l2 > 0 (e.g. 1e-6) for finite regularised scores")
    warnings.warn(msg + f"; returning the l2={l2:g} regularised fit", MLEExistenceWarning, stacklevel=3)


_SINGLE = [0]


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit BLAS to one thread (re-entrant). L-BFGS on a handful of scores is ~10x slower with
    a multi-threaded BLAS on a busy machine; wrap loops of many small fits in this once."""
    if _SINGLE[0]:
        _SINGLE[0] += 1
        try:
            yield
        finally:
            _SINGLE[0] -= 1
        return
    with threadpool_limits(1, user_api="blas"):
        _SINGLE[0] += 1
        try:
            yield
        finally:
            _SINGLE[0] -= 1


def _check_solver_args(l2: float, tol: float, maxiter: int) -> None:
    for name, v in (("l2", l2), ("tol", tol)):
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be finite and >= 0, got {v}")
    if int(maxiter) < 1:
        raise ValueError(f"maxiter must be >= 1, got {maxiter}")


def _minimise(f, n: int, l2: float, tol: float, maxiter: int) -> tuple[np.ndarray, FitInfo]:
    def obj(s):
        v, g = f(s)
        return v + 0.5 * l2 * s @ s, g + l2 * s

    with single_threaded_blas():
        res = minimize(obj, np.zeros(n), jac=True, method="L-BFGS-B",
                       options={"maxiter": maxiter, "gtol": tol, "ftol": 0.0, "maxcor": 20})
    s = res.x - res.x.mean() if l2 == 0 else res.x
    val, g = obj(s)
    gn = float(np.max(np.abs(g)))
    info = FitInfo(converged=bool(gn <= max(tol, GRAD_TOL)), iterations=int(res.nit), grad_norm=gn,
                   message=str(res.message), method="L-BFGS-B", maxiter=int(maxiter), objective=float(val))
    return s, info


def _newton_bt(iw, jw, cw, n: int, l2: float, tol: float, maxiter: int) -> tuple[np.ndarray, FitInfo]:
    """Damped Newton on the BT objective with the exact sparse Hessian.

    The Hessian is the weighted Laplacian ``sum_e c_e sigma(d_e) sigma(-d_e) (e_i - e_j)(e_i - e_j)^T``
    plus ``l2 I``; with ``l2 = 0`` it is singular along the all-ones vector (the gauge), so the
    step is solved with the first coordinate held fixed and the scores re-centred.
    """

    def obj(s):
        d = s[iw] - s[jw]
        val = -(cw * log_expit(d)).sum() + 0.5 * l2 * s @ s
        r = cw * expit(-d)
        g = np.bincount(jw, r, minlength=n) - np.bincount(iw, r, minlength=n) + l2 * s
        return val, g, d

    s = np.zeros(n)
    val, g, d = obj(s)
    gtol = max(tol, GRAD_TOL)
    it, message = 0, "maximum number of iterations reached"
    rows = np.concatenate([iw, jw, iw, jw])
    cols = np.concatenate([iw, jw, jw, iw])
    while it < maxiter:
        gn = float(np.max(np.abs(g)))
        if gn <= tol:
            message = "converged (gradient below tolerance)"
            break
        h = cw * expit(d) * expit(-d)
        H = csc_matrix(coo_matrix((np.concatenate([h, h, -h, -h]), (rows, cols)), shape=(n, n)))
        if l2 > 0:
            step = spsolve(H + l2 * sparse_identity(n, format="csc"), -g)
        else:
            step = np.zeros(n)
            step[1:] = spsolve(H[1:, 1:], -g[1:])
        if not np.all(np.isfinite(step)):
            message = "Newton step not finite (singular Hessian)"
            break
        dec = float(-g @ step)  # Newton decrement squared
        if dec <= 1e-30:
            message = "converged (Newton decrement below 1e-30)"
            break
        t = 1.0
        while True:
            s_new = s + t * step
            v_new, g_new, d_new = obj(s_new)
            if v_new <= val - 1e-4 * t * dec or t < 1e-12:
                break
            t *= 0.5
        it += 1
        if v_new > val:  # no descent possible at machine precision
            message = "converged (no further descent at machine precision)"
            break
        s, val, g, d = s_new, v_new, g_new, d_new
    if l2 == 0:
        s = s - s.mean()
        val, g, _ = obj(s)
    gn = float(np.max(np.abs(g)))
    info = FitInfo(converged=bool(gn <= gtol), iterations=it, grad_norm=gn, message=message, method="newton",
                   maxiter=int(maxiter), objective=float(val))
    return s, info


def fit_bt_counts(W, *, l2: float = 0.0, items: Sequence[str] | None = None, tol: float = 1e-12,
                  maxiter: int = 200) -> FittedScores:
    """BT maximum-likelihood scores from a wins matrix (Bradley & Terry 1952; spec Algorithm 5).

    Minimises ``(1/N) sum_ij W_ij softplus(s_j - s_i) + (l2/2) ||s||^2`` (``N = sum W``).

    Args:
        W: ``(n, n)`` non-negative float, ``W[i, j]`` = times ``i`` beat ``j``.
        l2: ridge coefficient ``>= 0`` on the mean negative log-likelihood.
        items: names used in messages.
        tol: gradient tolerance (``max |grad|``); the fit counts as converged at ``max(tol, GRAD_TOL)``.
        maxiter: Newton iteration cap (a few dozen suffice in practice).

    Returns:
        :class:`FittedScores` ``(n,)`` float64 with ``sum(s) = 0`` (for ``l2 = 0``) and ``.info``
        (:class:`FitInfo`); ``sigmoid(s_i - s_j)`` is the fitted ``P(i > j)``.

    Raises:
        ValueError: bad ``W``, ``l2``, ``tol`` or ``maxiter``, or an item with no comparison.
        MLEDoesNotExistError: the MLE is infinite and ``l2 == 0``. Warns MLEExistenceWarning when
        ``l2 > 0`` rescues it, and :class:`ConvergenceWarning` when the fit did not converge.
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 2:
        raise ValueError(f"W must be a square (n, n) matrix with n >= 2, got shape {W.shape}")
    if not np.isfinite(W).all() or (W < 0).any():
        raise ValueError("W must hold finite non-negative counts")
    _check_solver_args(l2, tol, maxiter)
    n = W.shape[0]
    W = W.copy()
    np.fill_diagonal(W, 0.0)
    _existence(W > 0, _names(items, n), l2)
    total = W.sum()
    iw, jw = np.nonzero(W)
    cw = W[iw, jw] / total
    s, info = _newton_bt(iw, jw, cw, n, l2, tol, int(maxiter))
    return _attach(s, info, f"Bradley-Terry fit of {n} items")


def fit_bt(n_items: int, winners, losers, *, counts=None, l2: float = 0.0,
           items: Sequence[str] | None = None, tol: float = 1e-12, maxiter: int = 200) -> FittedScores:
    """BT maximum-likelihood scores from individual comparisons.

    Args:
        n_items: number of options ``n``.
        winners, losers: ``(N,)`` int indices: comparison ``t`` says ``winners[t] > losers[t]``.
        counts: optional ``(N,)`` weights.
        l2, items, tol, maxiter: see :func:`fit_bt_counts`.

    Returns:
        :class:`FittedScores` ``(n,)`` with ``.info``, ``sum(s) = 0``.

    Raises:
        see :func:`wins_matrix` and :func:`fit_bt_counts`.
    """
    return fit_bt_counts(wins_matrix(n_items, winners, losers, counts), l2=l2, items=items, tol=tol,
                         maxiter=maxiter)


def fit_pl(n_items: int, rankings, *, counts=None, n_stages: int | None = None, l2: float = 0.0,
           items: Sequence[str] | None = None, tol: float = 1e-12, maxiter: int = 10_000) -> FittedScores:
    """Plackett-Luce maximum-likelihood scores from rankings of K-tuples (Hunter 2004).

    Args:
        n_items: number of options ``n``.
        rankings: ``(N, K)`` int, each row a ranking of ``K`` distinct items, best first. ``K = 2``
            rows are pairwise comparisons (BT).
        counts: optional ``(N,)`` non-negative weights.
        n_stages: choice stages used per ranking (``1``: top-1 choice among the K items;
            ``None``: all ``K - 1``).
        l2, items, tol: see :func:`fit_bt_counts`.
        maxiter: L-BFGS iteration cap.

    Returns:
        :class:`FittedScores` ``(n,)`` with ``.info``, ``sum(s) = 0`` (for ``l2 = 0``).

    Raises:
        ValueError: bad rankings (index out of range, repeated items), an item never ranked, bad
        ``l2``/``tol``/``maxiter``. MLEDoesNotExistError / MLEExistenceWarning /
        ConvergenceWarning as for BT.
    """
    n = int(n_items)
    r = _check_rankings(rankings, n)
    if r.ndim != 2:
        raise ValueError(f"rankings must be (N, K), got shape {r.shape}")
    N, K = r.shape
    m = K - 1 if n_stages is None else int(n_stages)
    if not 1 <= m <= K - 1:
        raise ValueError(f"n_stages must be in [1, {K - 1}], got {n_stages}")
    c = np.ones(N) if counts is None else np.asarray(counts, dtype=np.float64)
    if c.shape != (N,) or (c < 0).any() or not np.isfinite(c).all():
        raise ValueError(f"counts must be ({N},) finite and non-negative")
    _check_solver_args(l2, tol, maxiter)
    # beats graph: stage winner pi_t beats every later item pi_u (t < m, u > t)
    tt, uu = np.triu_indices(K, 1)
    sel = tt < m
    beats = np.zeros((n, n), dtype=bool)
    pos = c > 0
    beats[r[pos][:, tt[sel]].ravel(), r[pos][:, uu[sel]].ravel()] = True
    _existence(beats, _names(items, n), l2)
    w = c / c.sum()
    flat = r.ravel()

    def f(s):
        sr = s[r]  # (N, K)
        lse = np.flip(np.logaddexp.accumulate(np.flip(sr, 1), axis=1), 1)
        val = -(w * (sr[:, :m] - lse[:, :m]).sum(1)).sum()
        # d/ds_{pi_u} = -1[u < m] + sum_{t <= min(u, m-1)} exp(s_{pi_u} - lse_t)
        logc = np.logaddexp.accumulate(-lse[:, :m], axis=1)
        logc = np.concatenate([logc, np.repeat(logc[:, -1:], K - m, 1)], 1)
        gpos = np.exp(sr + logc)
        gpos[:, :m] -= 1.0
        g = np.bincount(flat, (w[:, None] * gpos).ravel(), minlength=n)
        return val, g

    s, info = _minimise(f, n, l2, tol, int(maxiter))
    return _attach(s, info, f"Plackett-Luce fit of {n} items")
