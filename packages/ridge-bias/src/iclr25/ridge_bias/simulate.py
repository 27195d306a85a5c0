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
    "simulate_ridge_decomposition",
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
    t_arr, _ = _as_lam(t, "t", time=True)
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
    t_arr, _ = _as_lam(t, "t", time=True)
    return _simulate(mix, t_arr, fit_gradient_flow, seeds, seed, separate, progress, "MC gradient flow")



def simulate_ridge_decomposition(
    mix: MixtureSpec,
    lam: float | Sequence[float] | np.ndarray,
    seeds: int = 20,
    *,
    seed: int = 0,
) -> dict:
    """Monte-Carlo of the quantities the theory is built from, for the joint ridge estimator.

    For each draw of the training inputs ``X`` (labels are not needed), with
    ``R = (Sigma_hat + lam I)^{-1}``, ``Sigma_hat = X^T X / n``, ``P_k = X_k^T X_k / n``:

    * resolvent traces ``tr(Sigma_k R) / n`` -- the empirical counterpart of the fixed point
      ``delta_k = tr(Sigma_k Q) / n`` (the theory's effective-regularisation scalars);
    * the bias term of test group ``s``, exact given ``X``: ``(w_b - w_s*)^T Sigma_s (w_b - w_s*)``
      with ``w_b = R sum_k P_k w_k*`` (ridge on noiseless labels) -- the theory's ``B_s``;
    * the variance term of test group ``s``, the exact expectation over the label noise given
      ``X``: ``sum_k sigma_k^2 tr(Sigma_s R P_k R) / n`` -- the theory's ``V_s``.

    Averaging over draws estimates the expectations over ``X`` that the deterministic equivalents
    predict (bias + variance = the expected excess risk of :func:`simulate_ridge`).

    Args:
        mix: the mixture (``n`` rounded to an integer; covariances as spectra or matrices).
        lam: ``> 0``, scalar or grid ``[L]``.
        seeds: number of independent input draws (``>= 2``: a standard error needs two).
        seed: root seed (``numpy.random.SeedSequence(seed).spawn(seeds)``).

    Returns:
        dict with ``lam [L]``, ``seeds``, and ``[L, K]`` float arrays ``trace_mean``/``trace_sem``,
        ``bias_mean``/``bias_sem``, ``var_mean``/``var_sem`` (means and standard errors over draws).

    Raises:
        ValueError: ``lam <= 0``, ``seeds < 2``, an empty group at this ``n``.
    """
    lam_arr, _ = _as_lam(lam)
    if int(seeds) != seeds or seeds < 2:
        raise ValueError(f"seeds: the number of Monte-Carlo draws must be an integer >= 2, got {seeds!r}")
    K, L = mix.K, lam_arr.size
    covs = [g.cov_matrix() for g in mix.groups]  # [d, d] each
    noise = np.array([g.noise_var for g in mix.groups])
    counts = group_counts(mix)
    n = int(counts.sum())
    bounds = np.concatenate([[0], np.cumsum(counts)])
    tr = np.empty((int(seeds), L, K))
    bias = np.empty((int(seeds), L, K))
    var = np.empty((int(seeds), L, K))
    for i, ss in enumerate(np.random.SeedSequence(seed).spawn(int(seeds))):
        X, _, _ = sample_mixture(mix, np.random.default_rng(ss))
        ev, V = np.linalg.eigh(X.T @ X / n)
        r = 1.0 / (np.clip(ev, 0.0, None)[None, :] + lam_arr[:, None])  # [L, d] eigenvalues of R
        Xk = [X[bounds[k]:bounds[k + 1]] @ V for k in range(K)]  # group rows in R's eigenbasis
        Ck = [V.T @ C @ V for C in covs]  # Sigma_k in R's eigenbasis
        tr[i] = np.einsum("li,ki->lk", r, np.stack([np.diag(C) for C in Ck])) / n
        # w_b = R sum_k P_k w_k*  (eigenbasis coordinates), [L, d]
        pw = sum(Xk[k].T @ (Xk[k] @ (V.T @ g.teacher)) for k, g in enumerate(mix.groups)) / n
        wb = r * pw[None, :]
        for s, g in enumerate(mix.groups):
            e = wb - (V.T @ g.teacher)[None, :]
            bias[i, :, s] = np.einsum("li,ij,lj->l", e, Ck[s], e)
            # sum_k sigma_k^2 tr(Sigma_s R P_k R)/n = (1/n^2) sum_k sigma_k^2 sum_rows (x R) Sigma_s (x R)^T
            v = np.zeros(L)
            for k in range(K):
                if noise[k] == 0.0:
                    continue
                G = Xk[k].T @ Xk[k]  # [d, d]: sum of x x^T over group-k rows (eigenbasis)
                # tr(Sigma_s R G R) with R = diag(r_l)
                v += noise[k] * np.einsum("li,ij,lj,ji->l", r, Ck[s], r, G)
            var[i, :, s] = v / n**2
    k = int(seeds)
    sem = lambda a: a.std(0, ddof=1) / np.sqrt(k)  # noqa: E731
    return {"lam": lam_arr, "seeds": k, "trace_mean": tr.mean(0), "trace_sem": sem(tr),
            "bias_mean": bias.mean(0), "bias_sem": sem(bias), "var_mean": var.mean(0), "var_sem": sem(var)}
