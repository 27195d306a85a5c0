"""The LOTOS orthogonalisation penalty (paper Eq. 3 and Eq. 4).

For corresponding layers ``j`` of two members ``a ≠ b`` with stored top-``k`` right singular
vectors ``v'_1..v'_k`` of ``A_b^(j)``, the member ``a`` is penalised for its gain along them::

    term_{a←b}^{(j)} = Σ_i w_i · max(0, ‖A_a^(j) v'_i‖ / ‖v'_i‖ − mal) / Σ_i w_i,   w_i = 1 − 0.01 (i−1)

Summing over ordered pairs covers both halves of Eq. (3). The vectors are constants (no gradient
flows into them or into model ``b``); the gradient reaches only layer ``a``'s weight.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .clip import SpectralClip, spectral_layers
from .spectral import LinearOp

__all__ = ["lotos_similarity", "lotos_penalty", "default_weights", "matched_layers"]


def default_weights(k: int, *, decrement: float = 0.01, device=None, dtype=torch.float32) -> Tensor:
    """The code's non-increasing weights ``w_i = 1 − decrement·(i−1)``, ``(k,)``."""
    return (1.0 - decrement * torch.arange(k, device=device, dtype=dtype)).clamp_min(1e-6)


def _directional_gain(op: LinearOp, V: Tensor) -> Tensor:
    """``‖A v_i‖ / ‖v_i‖`` for each row of ``V`` ``(k, *in_shape)`` -> ``(k,)``."""
    out = op(V)
    return out.flatten(1).norm(dim=1) / V.flatten(1).norm(dim=1).clamp_min(1e-12)


def _weighted_hinge(gain: Tensor, mal: float, weights: Tensor) -> Tensor:
    return (weights * torch.relu(gain - mal)).sum() / weights.sum()


def lotos_similarity(op_a: LinearOp, op_b: LinearOp, V_a: Tensor, V_b: Tensor, mal: float = 0.8,
                     weights: Tensor | None = None) -> Tensor:
    """``S_k(f_a, f_b)`` of Eq. (3) for two layers (both directions), with the code's weight normaliser.

    Args:
        op_a, op_b: the layers' linear parts (:func:`~iclr25.lotos.spectral.linear_operator`).
        V_a, V_b: ``(k, *in_shape)`` top right singular vectors of ``A_a`` and ``A_b`` (detached here).
        mal: maximum allowed length (paper: 0.8).
        weights: ``(k,)`` non-increasing positive weights (default ``1 − 0.01(i−1)``).

    Returns:
        Scalar tensor ``Σ_i w_i [max(0,‖A_a v'_i‖−mal) + max(0,‖A_b v_i‖−mal)] / Σ_i w_i``.
        E.g. ``A = diag(3,1)``, ``B = diag(1,2)``, ``mal = 0.8`` gives 0.4; ``A = B = diag(3,1)`` gives 4.4.
    """
    k = V_a.shape[0]
    w = default_weights(k, device=V_a.device, dtype=V_a.dtype) if weights is None else weights
    return (_weighted_hinge(_directional_gain(op_a, V_b.detach()), mal, w)
            + _weighted_hinge(_directional_gain(op_b, V_a.detach()), mal, w))


def matched_layers(models: Sequence[nn.Module], layers: str = "conv") -> list[list[SpectralClip]]:
    """Per model, its wrapped layers (``layers='conv'`` or ``'all'``), checked to correspond.

    Returns:
        ``per_model[a][j]``: the ``SpectralClip`` of layer ``j`` of model ``a``.

    Raises:
        ValueError: fewer than 2 models; a model without ``SpectralClip`` layers; members with
            different numbers of layers; or corresponding layers with different input shapes.
    """
    if len(models) < 2:
        raise ValueError(f"LOTOS needs an ensemble of at least 2 models, got {len(models)}; "
                         "the penalty is defined between pairs of members (Eq. 4)")
    per_model = [spectral_layers(m, layers) for m in models]
    counts = [len(p) for p in per_model]
    if counts[0] == 0:
        raise ValueError("the models have no SpectralClip layers: build them with clip (e.g. "
                         "SmallConvNet(clip=1.0)) or wrap them with iclr25.lotos.wrap_layers(model)")
    if len(set(counts)) != 1:
        raise ValueError(f"ensemble members have mismatched numbers of {layers} layers {counts}; "
                         "LOTOS pairs corresponding layers, so all members need the same architecture")
    for j in range(counts[0]):
        shapes = {tuple(p[j].V.shape) for p in per_model if p[j].initialized}
        if len(shapes) > 1:
            raise ValueError(f"layer {j}: members have singular-vector buffers of different shapes "
                             f"{sorted(shapes)}; corresponding layers must see the same input shape")
    return per_model


def lotos_penalty(models: Sequence[nn.Module], mal: float = 0.8, lam: float = 0.05,
                  weights: Tensor | None = None, layers: str = "conv", normalize: bool = False) -> Tensor:
    """The LOTOS term of Eq. (4): ``λ · Σ_{a≠b} Σ_j term_{a←b}^{(j)}`` over ordered pairs.

    Uses each wrapper's stored vectors ``V`` (kept up to date by the per-forward PowerQR step of
    :class:`~iclr25.lotos.clip.SpectralClip`); run at least one training forward first.
    The other members' vectors are stacked so each (model, layer) costs one batched call.

    Args:
        models: the ``N ≥ 2`` ensemble members (same architecture, wrapped layers).
        mal: maximum allowed length (paper: 0.8).
        lam: ``λ`` (paper: 0.05 on CIFAR-10 without batch-norm).
        weights: ``(k,)`` weights (default ``1 − 0.01(i−1)``).
        layers: ``"conv"`` (code default: only convolutions are orthogonalised) or ``"all"``.
        normalize: divide by (#layers × #ordered pairs). The code computes this normaliser and
            then overwrites it with 1, hence ``False`` by default.

    Returns:
        Scalar tensor (differentiable w.r.t. every member's weights).

    Raises:
        ValueError: see :func:`matched_layers`; or a layer whose vectors are not initialised yet.
    """
    per_model = matched_layers(models, layers)
    n, L = len(models), len(per_model[0])
    total = None
    for j in range(L):
        for p in per_model:
            if not p[j].initialized:
                raise ValueError(f"layer {j} has no singular vectors yet: run one training-mode forward "
                                 "of every member before computing the LOTOS penalty")
        Vs = [p[j].V.detach() for p in per_model]
        k = Vs[0].shape[0]
        fast = k == 1 and weights is None  # w_1 = 1: the weighted mean is the plain hinge
        w = None if fast else (default_weights(k, device=Vs[0].device, dtype=Vs[0].dtype)
                               if weights is None else weights)
        for a in range(n):
            others = Vs[1 - a] if n == 2 else torch.cat([Vs[b] for b in range(n) if b != a], 0)
            gain = _directional_gain(per_model[a][j].op, others)
            if fast:
                t = torch.relu(gain - mal).sum()
            else:
                t = (w * torch.relu(gain.reshape(n - 1, k) - mal)).sum() / w.sum()
            total = t if total is None else total + t
    if normalize:
        total = total / (L * n * (n - 1))
    return lam * total
