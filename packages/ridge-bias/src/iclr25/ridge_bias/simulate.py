"""Monte-Carlo twin of the theory: sample the mixture, fit the estimators exactly, average risks.

Every fit is exact and vectorised over the ``lam`` (or ``t``) grid through one thin SVD of the
design matrix ``X = U diag(s) V^T`` per draw:

* ridge: ``w_hat(lam) = V diag( (s/n) / (s^2/n + lam) ) U^T y``  (= sklearn ``Ridge(alpha=n lam,
  fit_intercept=False)``);
* gradient flow from 0 on ``(1/2n)||X w - y||^2`` stopped at ``t``:
  ``w(t) = (I - exp(-t Sigma_hat)) Sigma_hat^+ X^T y / n = V diag( (1 - exp(-t s^2/n)) / s ) U^T y``;
* random projections: the same on ``z = S x`` (``S`` fixed by its seed), predictor ``S^T v``.

Test risk is computed in closed form, ``(w_hat - w_s*)^T Sigma_s (w_hat - w_s*)`` (no test sampling).
The joint model sees all ``n`` samples (``round(p_k n)`` from group ``k``); the separate model of
group ``k`` is refitted on that group's rows of the same draw.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from iclr25.core.progress import progress as progress_bar

from .random_projections import projection_matrix
from .theory import MixtureSpec, _as_lam

__all__ = [
    "group_counts",
    "sample_mixture",
    "fit_ridge",
    "fit_gradient_flow",
    "group_risks",
    "simulate_ridge",
    "simulate_rp",
    "simulate_gradient_flow",
]


def _cov_sqrt(mix: MixtureSpec) -> list[np.ndarray]:
    key = "cov_sqrt"
    if key not in mix._cache:
        roots = []
        for g in mix.groups:
            if g.cov.ndim == 1:
                roots.append(np.sqrt(g.cov))
            else:
                ev, U = np.linalg.eigh(g.cov)
                roots.append((U * np.sqrt(np.clip(ev, 0, None))) @ U.T)
        mix._cache[key] = roots
    return mix._cache[key]


def group_counts(mix: MixtureSpec) -> np.ndarray:
    """Integer sample counts per group, ``round(p_k n)`` adjusted to sum to ``round(n)``, ``[K]``."""
    n = int(round(mix.n))
    counts = np.floor(np.asarray(mix.proportions) * n + 0.5).astype(int)
    counts[-1] = n - counts[:-1].sum()
    if np.any(counts < 1):
        raise ValueError(f"MixtureSpec: n={n} gives an empty group (counts {counts.tolist()}); raise n")
    return counts


def sample_mixture(mix: MixtureSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw a training set.

    Returns:
        ``X [n, d]`` float, ``y [n]`` float, ``group [n]`` int (group index of each row, rows sorted
        by group).
    """
    counts = group_counts(mix)
    Xs, ys, gs = [], [], []
    for k, (g, root, nk) in enumerate(zip(mix.groups, _cov_sqrt(mix), counts)):
        Z = rng.standard_normal((nk, mix.d))
        X = Z * root[None, :] if root.ndim == 1 else Z @ root
        y = X @ g.teacher + np.sqrt(g.noise_var) * rng.standard_normal(nk)
        Xs.append(X)
        ys.append(y)
        gs.append(np.full(nk, k))
    return np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs)


def _svd_fit(X: np.ndarray, y: np.ndarray, gains) -> np.ndarray:
    """``V diag(gain(s)) U^T y`` for each grid value (thin SVD ``X = U diag(s) V^T``); ``[L, p]``.

    Computed from the smaller Gram matrix (``X^T X`` or ``X X^T``, one ``eigh``), ~3x cheaper than
    an SVD of ``X``; directions with ``s = 0`` contribute nothing.
    """
    n, p = X.shape
    if n >= p:
        ev, V = np.linalg.eigh(X.T @ X)
        s = np.sqrt(np.clip(ev, 0.0, None))
        proj = V.T @ (X.T @ y)  # = s * U^T y
    else:
        ev, U = np.linalg.eigh(X @ X.T)
        s = np.sqrt(np.clip(ev, 0.0, None))
        proj = s * (U.T @ y)
        V = None
    tiny = s <= s.max(initial=0.0) * max(n, p) * np.finfo(float).eps
    safe = np.where(tiny, 1.0, s)
    coef = np.where(tiny[None, :], 0.0, gains(safe) / safe[None, :])  # gain(s)/s, [L, r]
    if V is not None:
        return (coef * proj[None, :]) @ V.T
    # wide: V = X^T U diag(1/s)  =>  w = X^T U diag(gain/s^2 * s) U^T y ... in the same form
    return ((coef / safe[None, :]) * proj[None, :]) @ (U.T @ X)


def fit_ridge(X: np.ndarray, y: np.ndarray, lam: float | Sequence[float] | np.ndarray) -> np.ndarray:
    """Exact ridge ``(X^T X/n + lam I)^{-1} X^T y / n`` for each ``lam``.

    Args:
        X: ``[n, d]`` float; y: ``[n]`` float; lam: ``> 0``, scalar or ``[L]``.

    Returns:
        ``[L, d]`` float coefficients.

    Raises:
        ValueError: ``lam <= 0`` or mismatched ``X``/``y``.
    """
    lam_arr, _ = _as_lam(lam)
    X, y = np.asarray(X, float), np.asarray(y, float)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"fit_ridge: X must be [n, d] and y [n]; got {X.shape} and {y.shape}")
    n = X.shape[0]
    return _svd_fit(X, y, lambda s: (s / n)[None, :] / ((s * s / n)[None, :] + lam_arr[:, None]))


def fit_gradient_flow(X: np.ndarray, y: np.ndarray, t: float | Sequence[float] | np.ndarray) -> np.ndarray:
    """Gradient flow from ``w = 0`` on ``(1/2n)||X w - y||^2`` at times ``t``: ``[L, d]``.

    ``w(t) = (I - exp(-t Sigma_hat)) Sigma_hat^+ X^T y / n``; ``t -> inf`` gives the min-norm
    least-squares solution, ``t -> 0`` gives ``t X^T y / n``.

    Raises:
        ValueError: ``t <= 0``.
    """
    t_arr, _ = _as_lam(t, "t")
    X, y = np.asarray(X, float), np.asarray(y, float)
    n = X.shape[0]

    def gains(s):
        ev = s * s / n
        safe = np.where(s > 0, s, 1.0)
        g = -np.expm1(-t_arr[:, None] * ev[None, :]) / safe[None, :]
        return np.where(s[None, :] > 0, g, 0.0)

    return _svd_fit(X, y, gains)


def group_risks(mix: MixtureSpec, W: np.ndarray) -> np.ndarray:
    """Excess risks ``(w - w_s*)^T Sigma_s (w - w_s*)`` for coefficient rows ``W [L, d]``: ``[L, K]``."""
    out = np.empty((W.shape[0], mix.K))
    for s, g in enumerate(mix.groups):
        E = W - g.teacher[None, :]
        out[:, s] = ((E * g.cov[None, :]) * E).sum(-1) if g.cov.ndim == 1 else np.einsum("li,ij,lj->l", E, g.cov, E)
    return out


def _summary(all_joint: np.ndarray, all_sep: np.ndarray, lam: np.ndarray, noise: np.ndarray) -> dict:
    k = all_joint.shape[0]
    sem = (lambda a: a.std(0, ddof=1) / np.sqrt(k)) if k > 1 else (lambda a: np.full(a.shape[1:], np.nan))
    out = {
        "lam": lam,
        "seeds": k,
        "risk": all_joint,
        "risk_mean": all_joint.mean(0),
        "risk_sem": sem(all_joint),
        "noisy_risk_mean": all_joint.mean(0) + noise[None, :],
        "sep": all_sep,
        "sep_mean": all_sep.mean(0),
        "sep_sem": sem(all_sep),
    }
    if all_joint.shape[-1] == 2:
        odd = np.abs(all_joint[..., 1] - all_joint[..., 0])
        edd = np.abs(all_sep[..., 1] - all_sep[..., 0])
        out.update(
            ODD_mean=odd.mean(0),
            ODD_sem=sem(odd),
            EDD_mean=edd.mean(0),
            EDD_sem=sem(edd),
            ADD_of_means=np.abs(out["risk_mean"][:, 1] - out["risk_mean"][:, 0])
            / np.abs(out["sep_mean"][:, 1] - out["sep_mean"][:, 0]),
        )
    return out


def _simulate(
    mix: MixtureSpec,
    grid: np.ndarray,
    fit,
    seeds: int,
    seed: int,
    separate: bool,
    progress: bool,
    desc: str,
    S: np.ndarray | None = None,
) -> dict:
    if int(seeds) != seeds or seeds < 1:
        raise ValueError(f"seeds: the number of Monte-Carlo draws must be an integer >= 1, got {seeds!r}")
    noise = np.array([g.noise_var for g in mix.groups])
    children = np.random.SeedSequence(seed).spawn(int(seeds))
    joint = np.empty((int(seeds), grid.size, mix.K))
    sep = np.full((int(seeds), grid.size, mix.K), np.nan)
    it = progress_bar(children, desc=desc, unit="draw", quiet=None if progress else True)
    for i, ss in enumerate(it):
        X, y, grp = sample_mixture(mix, np.random.default_rng(ss))
        F = X if S is None else X @ S.T
        lift = (lambda V: V) if S is None else (lambda V: V @ S)  # predictor in x-space: S^T v
        joint[i] = group_risks(mix, lift(fit(F, y, grid)))
        if separate:
            for k in range(mix.K):
                rows = grp == k
                sub = mix.separate(k)
                sep[i, :, k] = group_risks(sub, lift(fit(F[rows], y[rows], grid)))[:, 0]
    return _summary(joint, sep, grid, noise)


def simulate_ridge(
    mix: MixtureSpec,
    lam: float | Sequence[float] | np.ndarray,
    seeds: int = 20,
    *,
    seed: int = 0,
    separate: bool = True,
    progress: bool = False,
) -> dict:
    """Monte-Carlo group risks of joint (and separately trained) ridge.

    Args:
        mix: the mixture (``n`` is rounded to an integer).
        lam: ``> 0``, scalar or grid ``[L]``.
        seeds: number of independent training sets.
        seed: root seed (``numpy.random.SeedSequence(seed).spawn(seeds)``).
        separate: also fit each group's own model (for EDD).
        progress: tqdm bar on stderr.

    Returns:
        dict: ``risk [seeds, L, K]``, ``risk_mean``/``risk_sem [L, K]``, ``noisy_risk_mean``,
        ``sep``/``sep_mean``/``sep_sem`` (NaN when ``separate=False``), and for two groups
        ``ODD_mean``/``ODD_sem``/``EDD_mean``/``EDD_sem``/``ADD_of_means [L]``.

    Raises:
        ValueError: ``lam <= 0``, ``seeds < 1``, an empty group at this ``n``.
    """
    lam_arr, _ = _as_lam(lam)
    return _simulate(mix, lam_arr, fit_ridge, seeds, seed, separate, progress, "MC ridge")


def simulate_rp(
    mix: MixtureSpec,
    lam: float | Sequence[float] | np.ndarray,
    m: int,
    seeds: int = 20,
    *,
    seed: int = 0,
    proj_seed: int = 0,
    separate: bool = True,
    progress: bool = False,
) -> dict:
    """Monte-Carlo of random-projection ridge ``f(x) = v^T S x`` with ``S`` =
    :func:`.random_projections.projection_matrix` ``(m, d, proj_seed)`` held fixed over draws (the
    theory :func:`.random_projections.rp_risk_theory` is conditional on the same ``S``).
    Returns the same keys as :func:`simulate_ridge`."""
    lam_arr, _ = _as_lam(lam)
    S = projection_matrix(m, mix.d, proj_seed)
    return _simulate(mix, lam_arr, fit_ridge, seeds, seed, separate, progress, f"MC rp m={m}", S=S)


def simulate_gradient_flow(
    mix: MixtureSpec,
    t: float | Sequence[float] | np.ndarray,
    seeds: int = 20,
    *,
    seed: int = 0,
    separate: bool = True,
    progress: bool = False,
) -> dict:
    """Monte-Carlo of gradient flow stopped at times ``t`` (``> 0``, grid ``[L]``); same keys as
    :func:`simulate_ridge` with ``lam`` holding ``t``. Compare with
    :func:`.theory.gradient_flow_risk_theory` (the ``lam = 1/t`` proxy)."""
    t_arr, _ = _as_lam(t, "t")
    return _simulate(mix, t_arr, fit_gradient_flow, seeds, seed, separate, progress, "MC gradient flow")

