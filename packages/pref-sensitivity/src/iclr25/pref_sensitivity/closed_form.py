"""Closed-form sensitivities of Bradley-Terry preferences (numpy, torch-free).

Notation (spec, Result 1-2): options ``i, k, j``; ``a = p_ik = P(i > k)``, ``b = p_kj = P(k > j)``.
Under Bradley-Terry (BT) ``p_ij = sigmoid(s_i - s_j)``, so ``logit p_ij = logit a + logit b`` and

    p_ij = g(a, b) = a b / (a b + (1 - a)(1 - b))                     (Result 1)
    dp_ij/da = b (1 - b) / D^2,   dp_ij/db = a (1 - a) / D^2,   D = a b + (1 - a)(1 - b)  (Result 2)

The derivative blows up when ``D -> 0`` faster than ``b(1-b)``: the pivot ``k`` is strongly
preferred over both ``i`` and ``j`` (``a -> 0, b -> 1``) or strongly dispreferred to both.
Every pairwise marginal of a Plackett-Luce model is BT, so all of this holds inside PL too.

All functions broadcast their arguments (numpy rules) and compute in ``float64``. Probabilities
exactly 0 or 1 are clipped to ``[eps, 1-eps]`` with a :class:`ProbabilityClippedWarning`; values
outside ``[0, 1]`` raise ``ValueError``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate
from scipy.special import expit, log_expit, logit

from ._checks import EPS, check_lam, check_probabilities

__all__ = [
    "bt_predict",
    "bt_sensitivity",
    "max_sensitivity",
    "amplifies",
    "sensitive_region_area",
    "log_dsigmoid",
    "log_bt_partials",
    "bt_sensitivity_from_scores",
]


def bt_predict(p_ik, p_kj, *, eps: float = EPS) -> np.ndarray:
    """Held-out preference implied by BT transitivity: ``p_ij = g(p_ik, p_kj)`` (Result 1).

    Computed as ``sigmoid(logit p_ik + logit p_kj)``, which equals ``ab / (ab + (1-a)(1-b))``.

    Args:
        p_ik: ``(...)`` float, ``P(i > k)`` in (0, 1).
        p_kj: ``(...)`` float, ``P(k > j)`` in (0, 1); broadcast against ``p_ik``.
        eps: clipping margin for values exactly 0 or 1.

    Returns:
        ``(...)`` float64 ``P(i > j)``.

    Raises:
        ValueError: a probability outside [0, 1] or NaN.
    """
    a = check_probabilities(p_ik, "p_ik", eps=eps)
    b = check_probabilities(p_kj, "p_kj", eps=eps)
    return expit(logit(a) + logit(b))


def log_dsigmoid(x):
    """``log sigma'(x) = log sigma(x) + log sigma(-x)``, exact for any finite ``x`` (float64)."""
    x = np.asarray(x, dtype=np.float64)
    return log_expit(x) + log_expit(-x)


def log_bt_partials(u, v) -> tuple[np.ndarray, np.ndarray]:
    """Natural logs of ``(d p_ij / d p_ik, d p_ij / d p_kj)`` from the logits ``u = logit p_ik``,
    ``v = logit p_kj`` (score differences ``s_i - s_k``, ``s_k - s_j``): Result 2 in logit space,
    ``d p_ij / d p_ik = sigma'(u + v) / sigma'(u)``.

    Args:
        u, v: ``(...)`` float, broadcast together.

    Returns:
        Two ``(...)`` float64 arrays (finite for finite input).
    """
    u, v = np.broadcast_arrays(np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64))
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite results are the caller's to report
        top = log_dsigmoid(u + v)
        return top - log_dsigmoid(u), top - log_dsigmoid(v)


def bt_sensitivity_from_scores(s_i, s_k, s_j) -> tuple[np.ndarray, np.ndarray]:
    """Result 2 from BT scores: ``(d p_ij / d p_ik, d p_ij / d p_kj)`` computed from the score
    differences in log space, accurate at any gap (values beyond the float range are ``inf``;
    use :func:`log_bt_partials` for their logarithms).

    Args:
        s_i, s_k, s_j: ``(...)`` float scores (BT log-strengths), broadcast together.

    Returns:
        Two ``(...)`` float64 arrays.
    """
    la, lb = log_bt_partials(np.subtract(s_i, s_k, dtype=np.float64), np.subtract(s_k, s_j, dtype=np.float64))
    with np.errstate(over="ignore"):
        return np.exp(la), np.exp(lb)


def bt_sensitivity(p_ik, p_kj, *, autograd: bool = False, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
    """Partial derivatives of the implied ``p_ij`` w.r.t. the two known preferences (Result 2).

    Args:
        p_ik: ``(...)`` float ``P(i > k)`` in (0, 1).
        p_kj: ``(...)`` float ``P(k > j)`` in (0, 1); broadcast against ``p_ik``.
        autograd: compute with torch autograd through a BT score model instead of the closed form
            (needs the ``[dpo]`` extra; used to cross-check, see :mod:`.autograd`).
        eps: clipping margin for values exactly 0 or 1.

    Returns:
        ``(d p_ij / d p_ik, d p_ij / d p_kj)``, each ``(...)`` float64, both > 0.

    Raises:
        ValueError: a probability outside [0, 1] or NaN.
    """
    a = check_probabilities(p_ik, "p_ik", eps=eps)
    b = check_probabilities(p_kj, "p_kj", eps=eps)
    a, b = np.broadcast_arrays(a, b)
    if autograd:
        from .autograd import bt_sensitivity_autograd

        return bt_sensitivity_autograd(a, b)
    la, lb = log_bt_partials(logit(a), logit(b))  # logit space: no cancellation in D near 0
    with np.errstate(over="ignore"):
        return np.exp(la), np.exp(lb)


def max_sensitivity(p_ik, *, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
    """Largest ``d p_ij / d p_ik`` over all ``p_kj`` for a fixed ``p_ik`` (Result 2, consequence 2).

    Args:
        p_ik: ``(...)`` float in (0, 1).

    Returns:
        ``(value, argmax_p_kj)``: ``1 / (4 p_ik (1 - p_ik))`` and ``1 - p_ik`` (where ``p_ij = 1/2``),
        each ``(...)`` float64. The value diverges as ``p_ik -> 0`` or ``1``.
    """
    a = check_probabilities(p_ik, "p_ik", eps=eps)
    return 1.0 / (4.0 * a * (1.0 - a)), 1.0 - a


def amplifies(p_ik, p_kj, *, eps: float = EPS) -> np.ndarray:
    """Whether a change of ``p_ik`` is amplified in ``p_ij`` (``d p_ij / d p_ik > 1``; consequence 5).

    Equivalent to ``|logit p_ij| < |logit p_ik|``: ``logit p_kj`` has the sign opposite to
    ``logit p_ik`` and ``|logit p_kj| < 2 |logit p_ik|``.

    Returns:
        ``(...)`` bool.
    """
    da, _ = bt_sensitivity(p_ik, p_kj, eps=eps)
    return da > 1.0


def _dsig(x):
    """sigma'(x) = sigma(x)(1 - sigma(x)), stable for large |x|."""
    e = np.exp(-np.abs(x))
    return e / (1.0 + e) ** 2


def _area_integrand(x: float, lam: float) -> float:
    c = lam * _dsig(x)
    if c > 0.25:
        return 0.0
    z = 2.0 * math.acosh(1.0 / (2.0 * math.sqrt(c))) if c > 0 else math.inf
    return float(_dsig(x) * (expit(z - x) - expit(-z - x)))


def sensitive_region_area(lam: float, method: str = "quad", *, grid_n: int = 4000, which: str = "ik") -> float:
    """Uniform measure of the sensitive region ``R(lam) = {(a, b) in (0,1)^2 : d p_ij / d a > lam}``.

    Result 2, consequence 6: ``A(1) = ln(2)/2``, ``A(2) = 0.07392``, ``A(5) = 0.01247``,
    ``A(10) = 0.003213``. With ``x = logit a`` and ``z*(x)`` solving ``sigma'(z*) = lam sigma'(x)``:
    ``A(lam) = int sigma'(x) [sigma(z* - x) - sigma(-z* - x)] 1[lam sigma'(x) <= 1/4] dx``.
    By symmetry the region of ``d p_ij / d b > lam`` has the same area.

    Args:
        lam: threshold ``lambda > 0`` (finite; the partial is positive everywhere, so
            ``lambda <= 0`` is rejected like in every other scan).
        method: ``"quad"`` (adaptive quadrature of the 1-D formula, ~1e-10 accurate) or ``"grid"``
            (midpoint rule on a ``grid_n x grid_n`` grid of (a, b); an independent check).
        grid_n: grid size for ``method="grid"``.
        which: ``"ik"`` (``d p_ij / d p_ik > lam``) or ``"either"`` (``max`` of both partials
            ``> lam``: the criterion of :func:`~.regions.sensitive_triples`; grid method only).

    Returns:
        Area in [0, 1].

    Raises:
        ValueError: unknown ``method``/``which``, ``lam`` not finite and > 0, ``grid_n < 2``, or
            ``which="either"`` with ``method="quad"``.
    """
    lam = check_lam(lam)
    if method not in ("quad", "grid"):
        raise ValueError(f"method must be 'quad' or 'grid', got {method!r}")
    if which not in ("ik", "either"):
        raise ValueError(f"which must be 'ik' or 'either', got {which!r}")
    if which == "either" and method != "grid":
        raise ValueError("which='either' is computed with method='grid'")
    if method == "grid":
        if grid_n < 2:
            raise ValueError(f"grid_n must be >= 2, got {grid_n}")
        u = (np.arange(grid_n) + 0.5) / grid_n
        count = 0
        for start in range(0, grid_n, 256):  # row chunks keep memory at 256 x grid_n
            a = u[start : start + 256, None]
            d = a * u[None, :] + (1 - a) * (1 - u[None, :])
            num = u[None, :] * (1 - u[None, :])
            if which == "either":
                num = np.maximum(num, a * (1 - a))
            count += int(np.count_nonzero(num / (d * d) > lam))
        return count / grid_n**2
    # the integrand is even in x; for lam > 1 it vanishes on |x| < x0 with sigma'(x0) = 1/(4 lam)
    x0 = 2.0 * math.acosh(math.sqrt(lam)) if lam > 1 else 0.0
    val, _ = integrate.quad(_area_integrand, x0, np.inf, args=(lam,), limit=200, epsabs=1e-13, epsrel=1e-11)
    return float(min(1.0, 2.0 * val))
