"""Semi-synthetic colored digits: the offline substitute for Colored MNIST (paper Sec. 5).

scikit-learn's ``load_digits`` (1,797 8x8 images, shipped with scikit-learn) is rescaled to
``[0, 1]``, centred pixel-wise, and each image is assigned at random (seeded) to one of two colour
groups. Group ``k``'s image ``v in R^64`` becomes the RGB feature vector ``(c_R v, c_G v, c_B v)``
in ``R^192`` with colour mixing ``c = (1, 0.5, 0)`` (group 1) or ``(0.5, 1, 0)`` (group 2); the label
is ``y = +1`` if the digit is ``>= 5`` else ``-1``.

The theory is fed each group's empirical second-moment matrix ``F_k^T F_k / N_k``, least-squares
teacher and residual variance (estimated on all images of the group); ridge is fitted on random
train splits whose group-2 share is ``p_2`` and evaluated on the held-out images of each group
(mean squared error on the +-1 labels, i.e. the *noisy* risk). The data are finite and not
Gaussian, so only the ordering of the group errors and the ``lam``-trend of ODD are expected to match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .simulate import fit_ridge
from .theory import GroupSpec, MixtureSpec, _as_lam, ridge_risk_theory

__all__ = ["ColoredDigits", "load_colored_digits", "digits_mixture", "digits_experiment"]

DEFAULT_COLORS = ((1.0, 0.5, 0.0), (0.5, 1.0, 0.0))


@dataclass(frozen=True)
class ColoredDigits:
    """Colored digits.

    Attributes:
        features: ``[N, 192]`` float (RGB channels concatenated).
        labels: ``[N]`` float in ``{-1, +1}`` (``+1`` for digits ``>= 5``).
        group: ``[N]`` int in ``{0, 1}``.
    """

    features: np.ndarray
    labels: np.ndarray
    group: np.ndarray


def load_colored_digits(
    seed: int = 0, colors: Sequence[Sequence[float]] = DEFAULT_COLORS
) -> ColoredDigits:
    """Load scikit-learn's digits and colour them into two groups (module docstring).

    Args:
        seed: seed of the random group assignment (half of the images per group).
        colors: two RGB mixing triples.

    Raises:
        ValueError: ``colors`` is not two triples.
    """
    from sklearn.datasets import load_digits

    cols = np.asarray(colors, dtype=float)
    if cols.shape != (2, 3):
        raise ValueError(f"colors: expected two RGB triples, got shape {cols.shape}")
    X, digit = load_digits(return_X_y=True)
    X = X / 16.0
    X = X - X.mean(0)
    N = X.shape[0]
    group = np.zeros(N, dtype=int)
    group[np.random.default_rng(seed).permutation(N)[N // 2 :]] = 1
    mixing = cols[group]  # [N, 3]
    F = (mixing[:, :, None] * X[:, None, :]).reshape(N, -1)
    return ColoredDigits(F, np.where(digit >= 5, 1.0, -1.0), group)


def digits_mixture(data: ColoredDigits, p2: float, n: float) -> MixtureSpec:
    """The two-group mixture the theory sees: per-group second-moment matrices, least-squares
    teachers (min-norm) and residual variances, proportions ``(1 - p2, p2)``, ``n`` samples."""
    groups = []
    for k in range(2):
        Fk, yk = data.features[data.group == k], data.labels[data.group == k]
        C = Fk.T @ Fk / len(Fk)
        w = np.linalg.lstsq(Fk, yk, rcond=None)[0]
        res = yk - Fk @ w
        groups.append(GroupSpec((C + C.T) / 2, w, float(np.mean(res**2))))
    return MixtureSpec(tuple(groups), (1.0 - p2, p2), n)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (no ties expected among continuous risks)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def digits_experiment(
    lam: Sequence[float] | np.ndarray,
    p2_values: Sequence[float] = (0.5, 0.2),
    n_train: int = 600,
    splits: int = 20,
    seed: int = 0,
    data: ColoredDigits | None = None,
    resolve_z: float = 2.0,
) -> dict:
    """Theory vs empirical group errors of joint ridge on colored digits.

    Args:
        lam: ridge grid ``[L]`` (``> 0``).
        p2_values: group-2 shares of the training set.
        n_train: training-set size.
        splits: random train/test splits averaged.
        seed: seed of the group assignment and of the splits.
        data: pre-loaded data (default :func:`load_colored_digits` ``(seed)``).
        resolve_z: an empirical gap counts as resolved when ``|gap| >= resolve_z * sem``.

    Returns:
        dict with ``lam``, ``p2``, ``theory [P, L, 2]`` and ``empirical [P, L, 2]`` (noisy risks),
        ``empirical_sem [P, L, 2]``, ``ordering_agreement`` (fraction of ``(p2, lam)`` points where
        the sign of ``R_2 - R_1`` agrees), ``odd_trend_spearman [P]`` (rank correlation of ODD over
        ``lam``, theory vs empirical), and the statistics of the gap ``R_2 - R_1``:
        ``gap_theory [P, L]``, ``gap_empirical [P, L]`` (mean over splits of the paired per-split
        gap), ``gap_sem [P, L]`` (its standard error over splits), ``resolved [P, L]`` (bool: the
        empirical gap is at least ``resolve_z`` standard errors from 0, so its sign is known),
        ``n_resolved``, ``n_unresolved`` and ``ordering_agreement_resolved`` (the agreement over
        resolved points only; NaN when none is resolved).

    Raises:
        ValueError: ``lam <= 0``; a ``p2`` outside ``(0, 1)``; ``n_train`` too large for a group;
            ``splits < 2`` (a standard error needs two splits).
    """
    lam_arr, _ = _as_lam(lam)
    if splits < 2:
        raise ValueError(f"splits={splits}: need at least 2 random splits for a standard error")
    data = load_colored_digits(seed) if data is None else data
    idx_by_group = [np.flatnonzero(data.group == k) for k in range(2)]
    P = len(p2_values)
    theory = np.empty((P, lam_arr.size, 2))
    emp = np.empty((splits, P, lam_arr.size, 2))
    for j, p2 in enumerate(p2_values):
        if not 0 < p2 < 1:
            raise ValueError(f"p2_values: each share must be in (0, 1), got {p2}")
        n2 = int(round(p2 * n_train))
        n1 = n_train - n2
        if n1 >= len(idx_by_group[0]) or n2 >= len(idx_by_group[1]):
            raise ValueError(f"n_train={n_train}: not enough images for p2={p2} with a held-out test set")
        theory[j] = ridge_risk_theory(digits_mixture(data, p2, n_train), lam_arr).noisy_risk
        rng = np.random.default_rng([seed, j])
        for r in range(splits):
            perm = [rng.permutation(ix) for ix in idx_by_group]
            train = np.concatenate([perm[0][:n1], perm[1][:n2]])
            W = fit_ridge(data.features[train], data.labels[train], lam_arr)  # [L, 192]
            for k, test in enumerate((perm[0][n1:], perm[1][n2:])):
                pred = data.features[test] @ W.T
                emp[r, j, :, k] = ((pred - data.labels[test][:, None]) ** 2).mean(0)
    emp_mean = emp.mean(0)
    gap_t = theory[..., 1] - theory[..., 0]
    gaps = emp[..., 1] - emp[..., 0]  # [splits, P, L]: paired within a split
    gap_e = gaps.mean(0)
    gap_sem = gaps.std(0, ddof=1) / np.sqrt(splits)
    resolved = np.abs(gap_e) >= resolve_z * gap_sem
    sign_th = np.sign(gap_t)
    sign_emp = np.sign(gap_e)
    agree = sign_th == sign_emp
    rho = []
    for j in range(P):
        odd_t = np.abs(theory[j, :, 1] - theory[j, :, 0])
        odd_e = np.abs(emp_mean[j, :, 1] - emp_mean[j, :, 0])
        rho.append(_spearman(odd_t, odd_e) if lam_arr.size > 2 else float("nan"))
    return {
        "lam": lam_arr,
        "p2": np.asarray(p2_values, dtype=float),
        "theory": theory,
        "empirical": emp_mean,
        "empirical_sem": emp.std(0, ddof=1) / np.sqrt(splits),
        "ordering_agreement": float(np.mean(agree)),
        "odd_trend_spearman": np.asarray(rho),
        "gap_theory": gap_t,
        "gap_empirical": gap_e,
        "gap_sem": gap_sem,
        "resolved": resolved,
        "n_resolved": int(resolved.sum()),
        "n_unresolved": int((~resolved).sum()),
        "ordering_agreement_resolved": float(np.mean(agree[resolved])) if resolved.any() else float("nan"),
        "splits": splits,
        "resolve_z": resolve_z,
    }
