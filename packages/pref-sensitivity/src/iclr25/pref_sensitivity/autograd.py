"""Generic numerical sensitivities with torch autograd.

Needs the ``[dpo]`` extra (torch). Jacobians are taken with plain ``torch.autograd.grad`` (one
backward pass per output), which avoids ``torch.func``'s slow first call (it imports dynamo). Spec, "Generic numerical sensitivity": with scores ``s``
(gauge ``s_gauge = 0``), a target event probability ``t(s)`` and known event probabilities
``k(s) in R^m`` that identify ``s`` (full column rank Jacobian), the sensitivity matrix is
``dt/dk = (dt/ds) (dk/ds)^+`` (Moore-Penrose pseudo-inverse; an exact inverse when ``m = n - 1``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ._checks import check_probabilities

__all__ = [
    "sensitivity_matrix",
    "bt_sensitivity_autograd",
    "pl_tuple_sensitivity_autograd",
]

TensorFn = Callable[[torch.Tensor], torch.Tensor]


def _jacobian(fn: TensorFn, x: torch.Tensor) -> torch.Tensor:
    """Jacobian of ``fn: (..., d) -> (..., m)`` applied row-wise: returns ``(..., m, d)``.

    ``fn`` must treat the leading dimensions as independent batch dimensions.
    """
    x = x.detach().requires_grad_(True)
    y = fn(x)
    rows = []
    for t in range(y.shape[-1]):
        (g,) = torch.autograd.grad(y[..., t].sum(), x, retain_graph=t + 1 < y.shape[-1])
        rows.append(g)
    return torch.stack(rows, -2)


def _free_to_full(free: torch.Tensor, gauge: int, n: int) -> torch.Tensor:
    zero = free.new_zeros(1)
    g = gauge % n
    return torch.cat([free[:g], zero, free[g:]])


def sensitivity_matrix(scores: torch.Tensor, target_fn: TensorFn, known_fn: TensorFn, *,
                       gauge: int = -1, rank_tol: float = 1e-10) -> torch.Tensor:
    """``d target / d known`` at ``scores`` through a score model (autograd + pinv).

    Args:
        scores: ``(n,)`` float (use float64) scores; ``scores[gauge]`` is the fixed reference
            (the returned matrix does not depend on the gauge; only differences matter).
        target_fn: ``(n,) -> (t,)`` the target event probabilities (e.g. ``p_13``).
        known_fn: ``(n,) -> (m,)`` the known event probabilities, ``m >= n - 1``.
        gauge: index of the score held fixed.
        rank_tol: relative singular-value cut-off for the rank check.

    Returns:
        ``(t, m)`` tensor, entry ``[a, b] = d target_a / d known_b`` (other known events fixed).

    Raises:
        ValueError: ``scores`` not 1-D, or the known events do not identify the scores
            (``rank(dk/ds) < n - 1``).
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must be (n,), got shape {tuple(scores.shape)}")
    n = scores.shape[0]
    s = scores - scores[gauge % n]
    free = torch.cat([s[: gauge % n], s[gauge % n + 1:]])

    def tgt(f):
        return torch.atleast_1d(target_fn(_free_to_full(f, gauge, n)))

    def kn(f):
        return torch.atleast_1d(known_fn(_free_to_full(f, gauge, n)))

    jt = _jacobian(tgt, free)  # (t, n-1)
    jk = _jacobian(kn, free)  # (m, n-1)
    sv = torch.linalg.svdvals(jk)
    rank = int((sv > rank_tol * sv.max().clamp_min(1e-300)).sum())
    if rank < n - 1:
        raise ValueError(f"the known events identify only {rank} of the {n - 1} free score directions; "
                         "add known events (comparisons) that connect every option")
    return jt @ torch.linalg.pinv(jk)


def _bt_triangle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(..., 2) -> partials via a batched jacobian of the 3-option BT model (i=0, k=1, j=2)."""

    def known(free):  # free = (..., [s_i, s_k]), s_j = 0
        return torch.stack([torch.sigmoid(free[..., 0] - free[..., 1]), torch.sigmoid(free[..., 1])], -1)

    def target(free):
        return torch.sigmoid(free[..., :1])

    la, lb = torch.logit(a), torch.logit(b)
    free = torch.stack([la + lb, lb], -1)  # s_i - s_k = logit a, s_k - s_j = logit b
    jt = _jacobian(target, free)  # (B, 1, 2)
    jk = _jacobian(known, free)  # (B, 2, 2)
    return (jt @ torch.linalg.inv(jk))[:, 0, :]  # (B, 2)


def bt_sensitivity_autograd(p_ik, p_kj) -> tuple[np.ndarray, np.ndarray]:
    """Result 2 by autograd: ``(d p_ij/d p_ik, d p_ij/d p_kj)`` through a BT score model (float64).

    Args:
        p_ik, p_kj: broadcastable arrays of probabilities in (0, 1).

    Returns:
        Two float64 arrays of the broadcast shape.
    """
    a = check_probabilities(p_ik, "p_ik")
    b = check_probabilities(p_kj, "p_kj")
    a, b = np.broadcast_arrays(a, b)
    shape = a.shape
    ta = torch.as_tensor(a.reshape(-1), dtype=torch.float64)
    tb = torch.as_tensor(b.reshape(-1), dtype=torch.float64)
    out = _bt_triangle(ta, tb).numpy()
    return out[:, 0].reshape(shape), out[:, 1].reshape(shape)


def pl_tuple_sensitivity_autograd(q_a, q_b, k: int = 3, context_ratio: float = 1.0
                                  ) -> tuple[np.ndarray, np.ndarray]:
    """K-tuple PL partials by autograd (items ``i, j`` and a context ``C`` of ``k - 1`` items).

    Known events: ``q_A = q(i | {i} u C)``, ``q_B = q(j | {j} u C)`` and the ``k - 2`` BT
    preferences between consecutive context items (held fixed: the ratios inside ``C``).
    Target: ``p_ij = sigmoid(s_i - s_j)``. Batched over broadcast ``q_a, q_b`` row-wise.

    Args:
        q_a, q_b: broadcastable top-1 probabilities in (0, 1).
        k: tuple size ``>= 2``.
        context_ratio: ``w_{c_t} / w_{c_{t+1}}`` inside the context (the result must not depend on it).

    Returns:
        ``(d p_ij / d q_A, d p_ij / d q_B)``, float64 arrays of the broadcast shape.
    """
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    qa = check_probabilities(q_a, "q_a")
    qb = check_probabilities(q_b, "q_b")
    qa, qb = np.broadcast_arrays(qa, qb)
    shape = qa.shape
    # context log-strengths with log W_C = 0 and fixed inner ratios; gauge: the last context item
    c = torch.arange(k - 1, dtype=torch.float64) * -float(np.log(context_ratio))
    c = c - torch.logsumexp(c, 0)
    s_i = torch.as_tensor(np.log(qa / (1 - qa)).reshape(-1))
    s_j = torch.as_tensor(np.log(qb / (1 - qb)).reshape(-1))
    full = torch.cat([s_i[:, None], s_j[:, None], c.expand(s_i.shape[0], k - 1)], 1)
    free = (full - full[:, -1:])[:, :-1]  # (B, k) with the last score fixed at 0

    def unfree(f):
        return torch.cat([f, f.new_zeros(f.shape[:-1] + (1,))], -1)

    def known(f):
        s = unfree(f)
        ctx = s[..., 2:]
        lw = torch.logsumexp(ctx, -1)
        ev = [torch.sigmoid(s[..., 0] - lw), torch.sigmoid(s[..., 1] - lw)]
        ev += [torch.sigmoid(ctx[..., t] - ctx[..., t + 1]) for t in range(k - 2)]
        return torch.stack(ev, -1)

    def target(f):
        s = unfree(f)
        return torch.sigmoid(s[..., :1] - s[..., 1:2])

    jt = _jacobian(target, free)  # (B, 1, k)
    jk = _jacobian(known, free)  # (B, k, k)
    m = (jt @ torch.linalg.inv(jk))[:, 0, :].numpy()
    return m[:, 0].reshape(shape), m[:, 1].reshape(shape)
