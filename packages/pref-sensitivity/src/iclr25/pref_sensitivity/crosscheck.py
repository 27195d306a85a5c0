"""Cross-check of the closed forms (Results 2 and the PL K-tuple partials) against torch autograd.

Kept apart from :mod:`.autograd` so that imports stay one-way: :mod:`.closed_form` may call the autograd path
(``bt_sensitivity(..., autograd=True)``), and this module compares the two. Needs the ``[dpo]`` extra (torch).
"""

from __future__ import annotations

import numpy as np

from .autograd import bt_sensitivity_autograd, pl_tuple_sensitivity_autograd
from .closed_form import bt_sensitivity
from .plackett_luce import pl_tuple_sensitivity

__all__ = ["check_closed_form"]


def check_closed_form(grid=(0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99), *, pl_k: tuple[int, ...] = (3, 4)) -> float:
    """Largest absolute difference between closed-form and autograd partials on ``grid x grid``.

    Covers the BT triple (both partials, Result 2) and the K-tuple PL partials for each ``k`` in
    ``pl_k`` (generic :func:`sensitivity_matrix`).

    Returns:
        max abs difference (float).
    """
    g = np.asarray(grid, dtype=np.float64)
    A, B = np.meshgrid(g, g, indexing="ij")
    ca, cb = bt_sensitivity(A, B)
    aa, ab = bt_sensitivity_autograd(A, B)
    err = max(np.abs(ca - aa).max(), np.abs(cb - ab).max())
    x, y = pl_tuple_sensitivity(A, B)
    for k in pl_k:
        u, v = pl_tuple_sensitivity_autograd(A, B, k=k, context_ratio=2.0)
        err = max(err, np.abs(x - u).max(), np.abs(y - v).max())
    return float(err)
