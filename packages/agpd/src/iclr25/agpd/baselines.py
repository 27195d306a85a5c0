"""Baseline poisoned-sample detectors on penultimate features: Spectral Signatures and
Activation Clustering (as configured in BackdoorBench's detection folder)."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA, FastICA

__all__ = ["spectral_signatures", "activation_clustering"]


def _arrays(features, labels):
    f = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels).ravel()
    if f.ndim != 2 or len(f) != len(y):
        raise ValueError(f"features must be (N, D) with N = len(labels); got {f.shape} and {y.shape}")
    return f, y


def spectral_signatures(features, labels, ratio: float = 0.1, eps_mult: float = 1.5) -> np.ndarray:
    """Spectral Signatures (Tran et al. 2018): per class, centre the features, score each sample by
    its squared projection on the top right singular vector, flag the ``eps_mult * ratio * n_k``
    highest scores.

    Args:
        features: ``(N, D)`` float; labels: ``(N,)`` int (given labels).
        ratio: the assumed poisoning ratio.

    Returns:
        ``(N,)`` bool mask of flagged samples.
    """
    f, y = _arrays(features, labels)
    flag = np.zeros(len(y), dtype=bool)
    for k in np.unique(y):
        idx = np.flatnonzero(y == k)
        if len(idx) < 2:
            continue
        c = f[idx] - f[idx].mean(0)
        v = np.linalg.svd(c, full_matrices=False)[2][0]
        score = (c @ v) ** 2
        n_rm = min(int(eps_mult * ratio * len(idx)), len(idx))
        if n_rm:
            flag[idx[np.argsort(-score)[:n_rm]]] = True
    return flag


def activation_clustering(features, labels, n_components: int = 10, size_threshold: float = 0.35,
                          reducer: str = "ica", seed: int = 0) -> np.ndarray:
    """Activation Clustering (Chen et al. 2019): per class, reduce the features to ``n_components``
    dimensions (FastICA, or PCA), split them with 2-means, and flag the smaller cluster when its
    relative size is below ``size_threshold``.

    Returns:
        ``(N,)`` bool mask of flagged samples.
    """
    if reducer not in ("ica", "pca"):
        raise ValueError(f"reducer must be 'ica' or 'pca', got {reducer!r}")
    f, y = _arrays(features, labels)
    flag = np.zeros(len(y), dtype=bool)
    for k in np.unique(y):
        idx = np.flatnonzero(y == k)
        nc = min(n_components, len(idx) - 1, f.shape[1])
        if nc < 1:
            continue
        c = f[idx] - f[idx].mean(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            red = (FastICA(nc, random_state=seed, max_iter=400) if reducer == "ica"
                   else PCA(nc, random_state=seed)).fit_transform(c)
            lab = KMeans(2, n_init=10, random_state=seed).fit_predict(red)
        small = int(np.argmin(np.bincount(lab, minlength=2)))
        if np.mean(lab == small) < size_threshold:
            flag[idx[lab == small]] = True
    return flag
