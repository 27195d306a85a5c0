"""Random-projection ridge ("a feedforward network in a simplified regime", paper Sec. 4).

The model is ``f(x) = v^T S x`` with a fixed random ``S in R^{m x d}`` (iid ``N(0, 1/d)``
entries) and ``v`` fitted by ridge on ``z = S x``. Conditional on ``S``, the features ``z`` are again
a Gaussian mixture with covariances ``Sigma~_k = S Sigma_k S^T`` (``m x m``); the part of the
teacher that ``z`` can express is ``beta_k = Sigma~_k^+ S Sigma_k w_k*`` and the rest,
``rho_k = w_k*^T Sigma_k w_k* - beta_k^T Sigma~_k beta_k >= 0``, is independent of ``z`` and acts as
extra label noise. Hence, exactly for each fixed ``S``::

    R_s(f_hat) = E_s[ Sigma~_1, Sigma~_2 ; beta_1, beta_2 ; sigma_k^2 + rho_k ] + rho_s

with ``E_s`` the classical ridge theory (:mod:`.theory`) in dimension ``m``. (The paper averages
over ``S`` with operator-valued free probability; the conditional form is exact and its
fluctuations over ``S`` shrink as ``m`` grows.) The theory runs in the column space of ``S``
(dimension ``rank(S) <= min(m, d)``, thin SVD); when all ``Sigma_k`` are multiples of one matrix
(e.g. isotropic), the reduced ``Sigma~_k`` commute and the fast spectral path is used.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .theory import GroupSpec, MixtureSpec, TheoryResult, _as_lam, ridge_risk_theory

__all__ = ["projection_matrix", "projected_mixture", "rp_risk_theory"]


def projection_matrix(m: int, d: int, seed: int = 0) -> np.ndarray:
    """The random projection ``S``: ``[m, d]`` float, iid ``N(0, 1/d)``, from
    ``numpy.random.default_rng(seed)`` (the same ``S`` as :func:`.simulate.simulate_rp` uses).

    Raises:
        ValueError: ``m < 1`` or ``d < 1``.
    """
    if int(m) != m or m < 1:
        raise ValueError(f"m: the number of random features must be an integer >= 1, got {m!r}")
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return np.random.default_rng(seed).standard_normal((int(m), int(d))) / np.sqrt(d)


def projected_mixture(mix: MixtureSpec, S: np.ndarray) -> tuple[MixtureSpec, np.ndarray]:
    """The exact ``z = S x`` mixture and the approximation errors ``rho_k``.

    The mixture is returned in the coordinates of the column space of ``S`` (thin SVD
    ``S = U diag(s) V^T``, dimension ``r = rank(S) <= min(m, d)``): ``z``'s component outside it is
    zero, so it carries no signal and changes no risk, and the theory runs in ``r`` instead of ``m``
    dimensions (``Sigma~_k = diag(s) V^T Sigma_k V diag(s)``).

    Args:
        mix: the mixture in ``x``-space (dimension ``d``).
        S: ``[m, d]`` projection.

    Returns:
        ``(mix_z, rho)``: the mixture of ``U^T z`` (dimension ``r``, teachers ``beta_k``, noise
        ``sigma_k^2 + rho_k``) and ``rho`` ``[K]``.

    Raises:
        ValueError: ``S`` is not ``[m, d]`` or is zero.
    """
    S = np.asarray(S, dtype=float)
    if S.ndim != 2 or S.shape[1] != mix.d:
        raise ValueError(f"S: expected shape [m, {mix.d}], got {S.shape}")
    _, sv, Vt = np.linalg.svd(S, full_matrices=False)
    keep = sv > sv.max(initial=0.0) * max(S.shape) * np.finfo(float).eps
    if not keep.any():
        raise ValueError("S: the projection is zero")
    B = Vt[keep].T * sv[keep][None, :]  # [d, r] = V diag(s): S^T U
    groups, rho = [], []
    for g in mix.groups:
        cov = g.cov
        CB = cov[:, None] * B if cov.ndim == 1 else cov @ B  # Sigma_k V diag(s)   [d, r]
        Ct = B.T @ CB
        Ct = (Ct + Ct.T) / 2
        rhs = CB.T @ g.teacher
        beta = np.linalg.lstsq(Ct, rhs, rcond=None)[0]  # Sigma~^+ S Sigma w  (min-norm)
        wCw = float(g.teacher @ (cov * g.teacher if cov.ndim == 1 else cov @ g.teacher))
        r = max(wCw - float(beta @ Ct @ beta), 0.0)
        rho.append(r)
        groups.append(GroupSpec(Ct, beta, g.noise_var + r))
    return MixtureSpec(tuple(groups), mix.proportions, mix.n), np.asarray(rho)


def rp_risk_theory(
    mix: MixtureSpec,
    lam: float | Sequence[float] | np.ndarray,
    *,
    m: int,
    seed: int = 0,
    S: np.ndarray | None = None,
    draws: int = 1,
) -> TheoryResult:
    """Group-wise test risk of random-projection ridge, exact conditional on ``S``.

    Args:
        mix: the mixture in ``x``-space.
        lam: ridge penalty on ``v`` (``> 0``), scalar or grid ``[L]``.
        m: number of random features (parameters).
        seed: seed of ``S`` (:func:`projection_matrix`); ignored when ``S`` is given.
        S: optional explicit ``[m, d]`` projection.
        draws: average the conditional theory over the projections of seeds ``seed, ...,
            seed + draws - 1`` (a Monte-Carlo estimate of the paper's ``S``-averaged curve; every
            array of the result is averaged). Must be 1 when ``S`` is given.

    Returns:
        :class:`.theory.TheoryResult` (``risk [L, K]``, ``[K]`` for a scalar ``lam``); ``risk = E_s + rho_s`` (excess risk against ``x^T w_s*``),
        ``bias`` includes ``rho_s``; ``noisy_risk = risk + sigma_s^2``.

    Raises:
        ValueError: ``lam <= 0``, bad ``m`` or ``S`` shape.
    """
    lam_arr, scalar = _as_lam(lam)
    if int(draws) != draws or draws < 1:
        raise ValueError(f"draws must be an integer >= 1, got {draws!r}")
    if draws > 1:
        if S is not None:
            raise ValueError("draws > 1 averages over seeded projections; do not pass S")
        runs = [rp_risk_theory(mix, lam_arr, m=m, seed=seed + i) for i in range(int(draws))]
        res = TheoryResult(*(np.mean([getattr(r, k) for r in runs], axis=0) for k in runs[0].keys()))
        return res.at(0) if scalar else res
    if S is None:
        S = projection_matrix(m, mix.d, seed)
    elif S.shape[0] != m:
        raise ValueError(f"S has {S.shape[0]} rows but m={m}")
    mz, rho = projected_mixture(mix, S)
    res = ridge_risk_theory(mz, lam_arr)
    noise = np.array([g.noise_var for g in mix.groups])
    res.risk = res.risk + rho[None, :]
    res.bias = res.bias + rho[None, :]
    res.noisy_risk = res.risk + noise[None, :]
    return res.at(0) if scalar else res
