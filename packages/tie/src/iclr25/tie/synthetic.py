"""The synthetic "paper-model": embeddings with a spurious block, a core block and noise.

[design] (spec "CPU-scale reproduction"): ground truth for known-answer tests and mechanism claims,
not the default encoder. In ``d`` dimensions with orthonormal ``u_core``, ``u_spu`` (random QR):

* image ``h = normalize((2y−1)·c·u_core + (2a−1)·s·u_spu + σ·ε)``, ``ε ~ N(0, I_d)``;
* class prompts ``t_y = normalize((2y−1)(u_core + γ·u_spu) + τ·ε)`` (the text side is itself biased
  toward the spurious direction);
* spurious prompts ``s_a = normalize((2a−1)(u_spu + κ·u_core) + τ·ε)`` (κ: core semantics leaking
  into the attribute prompt).

Pool (for λ): ``n_pool`` images, ``y ~ Bernoulli(½)``, ``a = y`` with probability ``rho``
(Waterbirds-like). Test: groups (0,0), (0,1), (1,0), (1,1) of sizes ``test_sizes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticData", "make_synthetic", "oracle_translation"]


@dataclass(frozen=True)
class SyntheticData:
    """One draw of the paper-model (all float64).

    Attributes:
        pool_emb: ``[M, d]``; pool_y, pool_a: ``[M]`` int64.
        test_emb: ``[N, d]``; test_y, test_a: ``[N]`` int64.
        text_emb_class: ``[2, d]`` (row y); text_emb_spurious: ``[2, d]`` (row a).
        u_core, u_spu: ``[d]`` orthonormal directions; params: the generating parameters.
    """

    pool_emb: np.ndarray
    pool_y: np.ndarray
    pool_a: np.ndarray
    test_emb: np.ndarray
    test_y: np.ndarray
    test_a: np.ndarray
    text_emb_class: np.ndarray
    text_emb_spurious: np.ndarray
    u_core: np.ndarray
    u_spu: np.ndarray
    params: dict


def _check(name: str, v: float, lo: float, hi: float = math.inf, *, lo_open: bool = False) -> float:
    v = float(v)
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        rng = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v}")
    return v


def make_synthetic(seed: int = 0, *, c: float = 0.5, s: float = 0.6, sigma: float = 0.2, gamma: float = 1.0,
                   kappa: float = 0.0, tau: float = 0.02, d: int = 64, n_pool: int = 4795, rho: float = 0.95,
                   test_sizes: tuple[int, int, int, int] = (2255, 2255, 642, 642)) -> SyntheticData:
    """Draw the synthetic paper-model (defaults: spec "CPU-scale reproduction").

    Args:
        seed: RNG seed (numpy ``default_rng``).
        c, s: core and spurious signal strengths (``c > 0``, ``s >= 0``).
        sigma: image noise scale; gamma: spurious bias of the class prompts; kappa: core leak
            into the spurious prompts; tau: text noise scale (all finite, ``>= 0``).
        d: dimension (``>= 2``); n_pool: pool size; rho: P(a = y) in the pool, in ``[0, 1]``.
        test_sizes: sizes of test groups (0,0), (0,1), (1,0), (1,1).

    Returns:
        :class:`SyntheticData`.

    Raises:
        ValueError: a parameter outside its range (named).
    """
    c = _check("c", c, 0.0, lo_open=True)
    s = _check("s", s, 0.0)
    sigma, gamma, kappa, tau = (_check(n, v, 0.0) for n, v in
                                (("sigma", sigma), ("gamma", gamma), ("kappa", kappa), ("tau", tau)))
    rho = _check("rho", rho, 0.0, 1.0)
    if int(d) < 2:
        raise ValueError(f"d must be >= 2, got {d}")
    if int(n_pool) < 1 or len(test_sizes) != 4 or any(int(n) < 0 for n in test_sizes):
        raise ValueError(f"n_pool must be >= 1 and test_sizes four sizes >= 0, got {n_pool}, {test_sizes}")
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    u_core, u_spu = q[:, 0], q[:, 1]

    def images(y: np.ndarray, a: np.ndarray) -> np.ndarray:
        h = ((2 * y - 1)[:, None] * c * u_core + (2 * a - 1)[:, None] * s * u_spu
             + sigma * rng.standard_normal((y.size, d)))
        return h / np.linalg.norm(h, axis=1, keepdims=True)

    pool_y = rng.integers(0, 2, n_pool)
    pool_a = np.where(rng.random(n_pool) < rho, pool_y, 1 - pool_y)
    test_y = np.repeat([0, 0, 1, 1], test_sizes)
    test_a = np.repeat([0, 1, 0, 1], test_sizes)
    pool_emb, test_emb = images(pool_y, pool_a), images(test_y, test_a)
    sign = np.array([-1.0, 1.0])[:, None]
    t = sign * (u_core + gamma * u_spu) + tau * rng.standard_normal((2, d))
    sp = sign * (u_spu + kappa * u_core) + tau * rng.standard_normal((2, d))
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    sp /= np.linalg.norm(sp, axis=1, keepdims=True)
    params = dict(seed=seed, c=c, s=s, sigma=sigma, gamma=gamma, kappa=kappa, tau=tau, d=int(d),
                  n_pool=int(n_pool), rho=rho, test_sizes=[int(n) for n in test_sizes])
    return SyntheticData(pool_emb, pool_y.astype(np.int64), pool_a.astype(np.int64), test_emb,
                         test_y.astype(np.int64), test_a.astype(np.int64), t, sp, u_core, u_spu, params)


def oracle_translation(data: SyntheticData, *, spurious_block: np.ndarray | None = None) -> np.ndarray:
    """The theory's optimal translation ``v*_a = −E[P h | a]`` (synthetic only: needs the true
    spurious block).

    [reconstruction] Paper Sec. 3 as restated from the official code and third-party citations:
    ``P`` is the orthogonal projection onto the spurious block, here ``span(u_spu)``; the
    expectation is estimated on the pool with the true attribute labels.

    Args:
        data: a :class:`SyntheticData` draw.
        spurious_block: ``[k, d]`` orthonormal rows spanning the spurious block (default ``u_spu``).

    Returns:
        ``[2, d]`` float64, row ``a`` = ``v*_a`` (translate an image with attribute ``a`` by
        ``h + v*_a``).
    """
    B = np.atleast_2d(data.u_spu if spurious_block is None else spurious_block)
    h = data.pool_emb / np.linalg.norm(data.pool_emb, axis=1, keepdims=True)
    ph = (h @ B.T) @ B                                  # P h
    out = np.zeros((2, h.shape[1]))
    for a in (0, 1):
        m = data.pool_a == a
        if not m.any():
            raise ValueError(f"oracle_translation: the pool has no image with a={a}")
        out[a] = -ph[m].mean(axis=0)
    return out
