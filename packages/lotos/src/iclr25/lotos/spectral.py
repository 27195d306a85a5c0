"""Singular values / vectors of implicitly linear layers (paper §4, FastClip's PowerQR).

The official LOTOS code never materialises a layer's matrix: it treats every layer as the
implicit linear operator ``A x = f(x) - f(0)`` on the real input shape ``(C_in, H, W)`` (so the
stride, dilation and padding are those of the real layer) and runs *PowerQR*, a block power
iteration on the shifted operator ``I + AᵀA`` with a thin QR re-orthonormalisation.

:func:`conv_singular_values_fft` is the exact spectrum of a stride-1 *circular* convolution
(Sedghi et al., 2019), used as an independent reference in tests and :command:`iclr25-lotos demo`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "LinearOp",
    "linear_operator",
    "check_linear",
    "power_qr",
    "power_qr_step",
    "gram_operator",
    "layer_top_singular",
    "explicit_matrix",
    "conv_singular_values_fft",
    "dense_singular_values", "ritz_power_qr"]

LinearOp = Callable[[Tensor], Tensor]

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def linear_operator(layer: nn.Module) -> LinearOp:
    """The linear part ``x ↦ layer(x) - layer(0)`` of an affine layer, as a callable.

    For ``nn.Conv{1,2,3}d`` (any stride, dilation, groups, padding mode) and ``nn.Linear`` the
    bias is simply dropped (``F.conv*(x, W, None)`` / ``F.linear(x, W)``), which equals
    ``layer(x) - layer(0)`` exactly and keeps the graph to the weight (needed by the LOTOS
    penalty, Eq. 4). Any other module is used as ``layer(x) - layer(zeros_like(x))``; call
    :func:`check_linear` first if you are not sure it is affine.

    Args:
        layer: the affine module.

    Returns:
        ``op(x: (B, *in_shape) float) -> (B, *out_shape) float``.
    """
    if isinstance(layer, _CONV):
        return lambda x: layer._conv_forward(x, layer.weight, None)
    if isinstance(layer, nn.Linear):
        return lambda x: F.linear(x, layer.weight)
    if isinstance(layer, nn.Identity):
        return lambda x: x
    return lambda x: layer(x) - layer(torch.zeros_like(x))


@torch.no_grad()
def check_linear(op: LinearOp, in_shape: Sequence[int], *, name: str = "layer", rtol: float = 1e-4,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
    """Check numerically that ``op`` is linear (additive and homogeneous) on ``in_shape``.

    Args:
        op: the candidate linear map (e.g. from :func:`linear_operator`).
        in_shape: the input shape without the batch axis, e.g. ``(3, 32, 32)``.
        name: used in the error message.
        rtol: relative tolerance of the test ``op(a x + b y) = a op(x) + b op(y)``.

    Raises:
        ValueError: when ``op`` is not linear (e.g. a module containing a ReLU) or fails on
            ``in_shape``, naming the module and the fix.
    """
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(2, *in_shape, generator=g).to(device=device, dtype=dtype)
    try:
        ox, oy, oxy = op(x[:1]), op(x[1:]), op(2.0 * x[:1] - 3.0 * x[1:])
    except Exception as e:  # noqa: BLE001 - re-raised with context
        raise ValueError(f"{name}: cannot apply it to an input of shape (1, {', '.join(map(str, in_shape))})"
                         f": {e}. Pass the layer's real input shape (C_in, H, W).") from e
    want = 2.0 * ox - 3.0 * oy
    err = (oxy - want).norm() / want.norm().clamp_min(1e-12)
    if not torch.isfinite(err) or err > rtol:
        raise ValueError(
            f"{name} is not a linear map (relative error {float(err):.2e} in op(2x-3y) = 2op(x)-3op(y)); "
            "PowerQR needs an affine layer such as nn.Conv2d or nn.Linear, not a module with "
            "non-linearities (ReLU, pooling with max, ...). Pass the conv/linear layer itself."
        )


def _qr_positive(Y: Tensor) -> tuple[Tensor, Tensor]:
    """Thin QR with a non-negative diagonal of R (so Q is unique and iterations are stable)."""
    Q, R = torch.linalg.qr(Y, mode="reduced")
    s = torch.sign(torch.diagonal(R))
    s = torch.where(s == 0, torch.ones_like(s), s)
    return Q * s, R * s[:, None]


def gram_operator(layer: nn.Module) -> Callable[[Tensor], Tensor] | None:
    """A closed-form ``x ↦ AᵀA x`` for ``nn.Linear`` and zero-padded ``nn.Conv2d`` (conv followed by
    the matching transposed conv), or ``None`` when the layer has no such form (then autograd is used)."""
    if isinstance(layer, nn.Linear):
        W = layer.weight
        return lambda x: F.linear(F.linear(x, W), W.T)
    if isinstance(layer, nn.Conv2d) and layer.padding_mode == "zeros" and not isinstance(layer.padding, str):

        def gram(x: Tensor) -> Tensor:
            W = layer.weight
            y = F.conv2d(x, W, None, layer.stride, layer.padding, layer.dilation, layer.groups)
            size = [(y.shape[2 + i] - 1) * layer.stride[i] - 2 * layer.padding[i]
                    + layer.dilation[i] * (W.shape[2 + i] - 1) + 1 for i in range(2)]
            opad = [x.shape[2 + i] - size[i] for i in range(2)]
            return F.conv_transpose2d(y, W, None, layer.stride, layer.padding, opad, layer.groups, layer.dilation)

        return gram
    return None


def power_qr_step(op: LinearOp, V: Tensor, gram: Callable[[Tensor], Tensor] | None = None
                  ) -> tuple[Tensor, Tensor]:
    """One PowerQR iteration (FastClip): ``Y = (I + AᵀA) V``, thin QR ``Y = QR``, ``V ← Qᵀ``.

    ``AᵀA V`` is the gradient of ``½‖A V‖²`` w.r.t. ``V`` (autograd; no transpose operator is
    needed), or ``gram(V)`` when a closed form is given (:func:`gram_operator`, same result, faster).
    The gradient is taken w.r.t. ``V`` only: parameters of ``op`` receive none. For ``k = 1`` the
    QR is a normalisation.

    Args:
        op: linear map, ``(k, *in_shape) -> (k, *out_shape)``.
        V: ``(k, *in_shape)`` float, current vectors (rows need not be orthonormal).
        gram: optional closed-form ``AᵀA``.

    Returns:
        ``(V_new, sigma)``: ``V_new`` ``(k, *in_shape)`` with orthonormal rows (after flattening),
        ``sigma`` ``(k,)`` = ``sqrt(|R_ii| - 1)`` (clamped at 0), the singular-value estimates.
    """
    k = V.shape[0]
    X = V.detach()
    if gram is not None:
        with torch.no_grad():
            G = gram(X)
    else:
        with torch.enable_grad():
            Xg = X.clone().requires_grad_(True)
            loss = 0.5 * op(Xg).pow(2).sum()
            (G,) = torch.autograd.grad(loss, Xg)
    Y = (X + G).reshape(k, -1)
    if k == 1:
        r = Y.norm()
        return (Y / r).reshape(V.shape), (r - 1.0).abs().sqrt().reshape(1)
    Q, R = _qr_positive(Y.T)  # Y.T: (d, k)
    sigma = (torch.diagonal(R) - 1.0).abs().sqrt()
    return Q.T.reshape(V.shape).contiguous(), sigma


def power_qr(op: LinearOp, x0: Tensor, n_iters: int = 100, gram: Callable[[Tensor], Tensor] | None = None
             ) -> tuple[Tensor, Tensor]:
    """Top-``k`` right singular vectors and values of a linear map by PowerQR (FastClip).

    Args:
        op: linear map ``(k, *in_shape) -> (k, *out_shape)`` (e.g. :func:`linear_operator`).
        x0: ``(k, *in_shape)`` float, the starting block (Gaussian noise, or the previous
            vectors for a warm start). ``k`` must not exceed the input dimension.
        n_iters: number of iterations (≥ 1). Convergence is linear with rate
            ``(1+σ_{k+1}²)/(1+σ_k²)``.
        gram: optional closed-form ``AᵀA`` (:func:`gram_operator`); default autograd.

    Returns:
        ``(V, sigma)``: ``V`` ``(k, *in_shape)`` with orthonormal flattened rows ordered by
        decreasing singular value, ``sigma`` ``(k,)`` float (≈ ``σ_1 ≥ … ≥ σ_k``).

    Raises:
        ValueError: if ``n_iters < 1`` or ``k`` exceeds the input dimension.
    """
    if n_iters < 1:
        raise ValueError(f"n_iters must be >= 1, got {n_iters}")
    k = x0.shape[0]
    d = x0[0].numel()
    if k > d:
        raise ValueError(f"k={k} singular vectors requested but the input dimension is only {d}")
    V, sigma = x0, None
    for _ in range(n_iters):
        V, sigma = power_qr_step(op, V, gram)
    return V, sigma


def layer_top_singular(layer: nn.Module, in_shape: Sequence[int], k: int = 1, n_iters: int = 100,
                       v0: Tensor | None = None, *, generator: torch.Generator | None = None,
                       check: bool = True) -> tuple[Tensor, Tensor]:
    """Top-``k`` singular vectors/values of an affine layer acting on inputs of shape ``in_shape``.

    Uses ``x ↦ layer(x) - layer(0)`` (:func:`linear_operator`), so zero padding and stride are
    those of the layer — the operator the paper's Eq. (3) is about.

    Args:
        layer: ``nn.Conv2d``/``nn.Linear`` or any affine module (checked with :func:`check_linear`).
        in_shape: input shape without batch, e.g. ``(C_in, H, W)`` or ``(in_features,)``.
        k: number of singular directions (paper: 1).
        n_iters: PowerQR iterations (the official code initialises with 100).
        v0: optional warm start ``(k, *in_shape)``.
        generator: RNG for the Gaussian start when ``v0`` is None.
        check: verify linearity first.

    Returns:
        ``(V (k, *in_shape), sigma (k,))`` on the layer's device/dtype.

    Raises:
        ValueError: non-linear module, wrong ``in_shape``, or ``k`` too large.
    """
    p = next(layer.parameters(), None)
    device = p.device if p is not None else torch.device("cpu")
    dtype = p.dtype if p is not None else torch.float32
    op = linear_operator(layer)
    if check:
        check_linear(op, in_shape, name=type(layer).__name__, device=device, dtype=dtype)
    if v0 is None:
        v0 = torch.randn(k, *in_shape, generator=generator).to(device=device, dtype=dtype)
    elif tuple(v0.shape) != (k, *in_shape):
        raise ValueError(f"v0 has shape {tuple(v0.shape)}, expected {(k, *in_shape)}")
    return power_qr(op, v0, n_iters)


@torch.no_grad()
def explicit_matrix(op: LinearOp, in_shape: Sequence[int], *, dtype: torch.dtype = torch.float32,
                    device: torch.device | str | None = None, chunk: int = 1024) -> Tensor:
    """The explicit matrix ``M`` (``(d_out, d_in)``, ``dtype``) of a linear map, by applying it to the
    standard basis (``dtype``/``device`` must match the layer's). Only for small layers (tests,
    demos): memory is ``d_in · d_out`` numbers.
    """
    d = 1
    for s in in_shape:
        d *= int(s)
    cols = []
    for i in range(0, d, chunk):
        eye = torch.eye(d, dtype=dtype, device=device)[i:i + chunk].reshape(-1, *in_shape)
        cols.append(op(eye).reshape(eye.shape[0], -1))
    return torch.cat(cols, 0).T


def conv_singular_values_fft(weight: Tensor, n: int | tuple[int, int]) -> Tensor:
    """All singular values of a stride-1 2-D convolution with *circular* padding (Sedghi et al. 2019).

    Pad the kernel to ``n×n``, take the 2-D DFT over the spatial axes to get
    ``P[u, v] ∈ C^{c_out×c_in}`` per frequency; the operator's singular values are the union of
    the singular values of all ``P[u, v]``. Cross-correlation vs. convolution does not change them.
    For zero-padded layers this is only an approximation (used by Theorem 4.1 of the paper).

    Args:
        weight: ``(c_out, c_in, s_h, s_w)`` float kernel (``nn.Conv2d.weight``).
        n: spatial input size ``n`` or ``(n_h, n_w)``; must be ≥ the kernel size.

    Returns:
        ``(n_h·n_w·min(c_in, c_out),)`` float, sorted in decreasing order.

    Raises:
        ValueError: wrong number of dimensions, or kernel larger than the input.
    """
    if weight.dim() != 4:
        raise ValueError(f"weight must be (c_out, c_in, s, s), got shape {tuple(weight.shape)}")
    nh, nw = (n, n) if isinstance(n, int) else n
    if weight.shape[2] > nh or weight.shape[3] > nw:
        raise ValueError(f"kernel {tuple(weight.shape[2:])} is larger than the input size {(nh, nw)}")
    P = torch.fft.fft2(weight.detach().to(torch.float64), s=(nh, nw))  # (c_out, c_in, nh, nw)
    sv = torch.linalg.svdvals(P.permute(2, 3, 0, 1))  # (nh, nw, min)
    return sv.flatten().sort(descending=True).values.to(weight.dtype)


def dense_singular_values(W: Tensor) -> Tensor:
    """Singular values of a dense matrix ``W`` (``(out, in)``), decreasing (``torch.linalg.svdvals``)."""
    if W.dim() != 2:
        raise ValueError(f"W must be a matrix (out, in), got shape {tuple(W.shape)}")
    return torch.linalg.svdvals(W.detach())


@torch.no_grad()
def ritz_power_qr(op: LinearOp, V0: Tensor, n_iters: int, gram: Callable[[Tensor], Tensor] | None = None,
                  k: int | None = None) -> tuple[Tensor, Tensor]:
    """Block PowerQR from ``V0`` followed by a Rayleigh-Ritz step: the block is rotated to the
    eigenvectors of its ``b × b`` Gram matrix ``(A V)(A V)ᵀ``, so the returned vectors are ordered by
    their Ritz values even when the spectrum is flat (plain PowerQR keeps the starting order then).

    Args:
        op: linear map ``(b, *in_shape) -> (b, *out_shape)``.
        V0: ``(b, *in_shape)`` starting block (e.g. the previous vectors plus a few noise vectors).
        n_iters: PowerQR iterations before the Ritz step (``>= 1``).
        gram: optional closed-form ``AᵀA``.
        k: keep the top ``k`` (default all ``b``).

    Returns:
        ``(V (k, *in_shape), sigma (k,))``, orthonormal rows, ``sigma`` decreasing (Ritz values:
        lower bounds of the top singular values that converge as ``n_iters`` grows).
    """
    b = V0.shape[0]
    k = b if k is None else k
    V, _ = power_qr(op, V0, n_iters, gram)
    flat = V.reshape(b, -1)
    AV = op(V).reshape(b, -1)
    G = (AV @ AV.T).double()
    evals, evecs = torch.linalg.eigh(G)
    order = torch.argsort(evals, descending=True)[:k]
    rot = evecs[:, order].T.to(flat.dtype)  # (k, b)
    Vr = (rot @ flat).reshape(k, *V.shape[1:]).contiguous()
    return Vr, evals[order].clamp_min(0).sqrt().to(flat.dtype)
