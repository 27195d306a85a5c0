"""``SpectralClip``: per-forward PowerQR tracking and periodic FastClip clipping of one layer.

Paper §3 / App. (the ``C = 1`` baseline and the clipping part of LOTOS), official wrapper
``models/spectral_normalization_deflate_complex_both_bn.py`` (reimplemented from the spec).
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor, nn

from .spectral import (
    conv_singular_values_fft,
    explicit_matrix,
    gram_operator,
    linear_operator,
    power_qr,
    power_qr_step,
    ritz_power_qr,
)

__all__ = ["SpectralClip", "spectral_layers", "wrap_layers", "refresh_vectors", "true_top_singular",
           "spectral_report", "final_clip_"]

log = logging.getLogger(__name__)


class SpectralClip(nn.Module):
    """Wrap an affine layer: track its top-``k`` singular vectors, clip its top singular value.

    In training mode every forward first runs one warm-started PowerQR iteration on
    ``x ↦ layer(x) - layer(0)`` at the real input shape (buffers ``V`` ``(k, *in_shape)`` and
    ``sigma`` ``(k,)``), and every ``clip_every`` training forwards runs one FastClip event
    (:meth:`clip_now`). The first forward initialises ``V`` with 100 PowerQR iterations from
    Gaussian noise (seeded by ``seed``, the global RNG is not touched). In eval mode (or with
    ``track=False``) the wrapper is a plain call of the layer.

    Args:
        module: ``nn.Conv2d`` / ``nn.Linear`` (or any affine module).
        clip: the clip value ``C`` for ``σ_1`` (paper: 1.0). ``None`` tracks without clipping.
        k: number of tracked singular directions (paper and code: 1).
        clip_every: training forwards between clip events (code: 100 without BN, 50 with BN).
        opt_steps: gradient steps per clip event (code: 1 without BN, 5 with BN).
        step_size: step size of those steps (code: 0.35).
        exact: "exact" mode of the code: clip when ``σ_1 > C`` *or* ``C - σ_1 ≥ 0.05`` (push
            ``σ_1`` towards ``C`` from both sides); ``False`` only clips from above.
        track: run PowerQR in training forwards.
        power_every: run the PowerQR step every this many training forwards (1 = code).
        init_iters: PowerQR iterations at initialisation (code: 100).
        refresh_iters: PowerQR iterations after a clip event (code: 10).
        refresh: how ``V`` is recomputed after a clip event: ``"warm"`` (default; a block of the
            current ``V`` plus 2 noise vectors, ``refresh_iters`` PowerQR iterations and a
            Rayleigh-Ritz step, so a direction that overtook the clipped one is found) or ``"code"``
            (the official code: ``U[0,1)`` noise, ``refresh_iters`` iterations; the estimate runs low).
            The warm refresh runs ``min(refresh_iters, 3)`` iterations: it starts from the current
            vector, and the per-forward PowerQR steps refine it afterwards.
        seed: seed of the initial noise.

    Buffers (in ``state_dict``): ``V``, ``sigma``, ``n_forward``.
    """

    def __init__(self, module: nn.Module, clip: float | None = 1.0, k: int = 1, clip_every: int = 100,
                 opt_steps: int = 1, step_size: float = 0.35, exact: bool = True, track: bool = True,
                 power_every: int = 1, init_iters: int = 100, refresh_iters: int = 10, seed: int = 0,
                 refresh: str = "warm"):
        super().__init__()
        if clip is not None and not (math.isfinite(clip) and clip > 0):
            raise ValueError(f"clip must be finite and > 0 (or None), got {clip}")
        if refresh not in ("warm", "code"):
            raise ValueError(f"refresh must be 'warm' or 'code', got {refresh!r}")
        if not (math.isfinite(step_size) and step_size > 0):
            raise ValueError(f"step_size must be finite and > 0, got {step_size}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if clip_every < 1 or power_every < 1:
            raise ValueError("clip_every and power_every must be >= 1")
        if not any(True for _ in module.parameters()):
            raise ValueError(f"SpectralClip wraps a layer with a weight, got {type(module).__name__}")
        self.module = module
        self.clip = clip
        self.k = k
        self.clip_every = clip_every
        self.opt_steps = opt_steps
        self.step_size = step_size
        self.exact = exact
        self.track = track
        self.power_every = power_every
        self.init_iters = init_iters
        self.refresh_iters = refresh_iters
        self.refresh = refresh
        #: PowerQR iterations of the warm refresh (it starts from the current vector, so fewer suffice)
        self.warm_refresh_iters = max(1, min(refresh_iters, 3))
        self.seed = seed
        self.register_buffer("V", torch.empty(0))
        self.register_buffer("sigma", torch.zeros(k))
        self.register_buffer("n_forward", torch.zeros((), dtype=torch.long))
        self._count = 0  # python mirror of n_forward (no tensor op per forward); synced in state_dict
        self._gen = torch.Generator().manual_seed(seed)

    # -- the operator -------------------------------------------------------------------------
    @property
    def is_conv(self) -> bool:
        return isinstance(self.module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))

    @property
    def initialized(self) -> bool:
        return self.V.numel() > 0

    @property
    def in_shape(self) -> tuple[int, ...]:
        return tuple(self.V.shape[1:])

    def op(self, x: Tensor) -> Tensor:
        """The linear part ``A x`` (bias dropped), differentiable w.r.t. the layer's weight."""
        return linear_operator(self.module)(x)

    def _noise(self, uniform: bool = False) -> Tensor:
        w = self.module.weight
        z = torch.rand if uniform else torch.randn
        return z(self.k, *self.in_shape, generator=self._gen).to(device=w.device, dtype=w.dtype)

    @torch.no_grad()
    def init_vectors(self, in_shape: tuple[int, ...], n_iters: int | None = None) -> None:
        """(Re)initialise ``V`` for inputs of shape ``in_shape`` (without batch) by PowerQR."""
        w = self.module.weight
        self.V = torch.empty(self.k, *in_shape, device=w.device, dtype=w.dtype)
        V, s = power_qr(self.op, self._noise(), n_iters or self.init_iters, gram_operator(self.module))
        self.V.copy_(V)
        self.sigma.copy_(s)

    @property
    def num_forward(self) -> int:
        """Training forwards seen so far (persisted as the ``n_forward`` buffer)."""
        return self._count

    @torch.no_grad()
    def power_step(self) -> Tensor:
        """One warm-started PowerQR iteration; returns the new ``sigma`` ``(k,)``."""
        self.V, self.sigma = power_qr_step(self.op, self.V, gram_operator(self.module))
        return self.sigma

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.track:
            if self.V.shape[1:] != x.shape[1:] or not self.initialized:
                shape = tuple(x.shape[1:])
                if self.initialized:
                    log.warning("SpectralClip: input shape changed %s -> %s; re-initialising V",
                                self.in_shape, shape)
                self.init_vectors(shape)
            self._count += 1
            n = self._count
            if n % self.power_every == 0:
                self.power_step()
            if self.clip is not None and n % self.clip_every == 0:
                self.clip_now()
        return self.module(x)

    # -- clipping -------------------------------------------------------------------------------
    def needs_clip(self) -> bool:
        """Whether ``σ_1`` is above ``C`` (or, in exact mode, 0.05 or more below it)."""
        if self.clip is None or not self.initialized:
            return False
        s1 = float(self.sigma[0])
        return s1 > self.clip or (self.exact and self.clip - s1 >= 0.05)

    @torch.no_grad()
    def clip_now(self, force: bool = False) -> bool:
        """One FastClip event; returns whether the layer was changed.

        With the current top vector ``v`` and value ``σ_1``, take ``opt_steps`` gradient steps
        (step ``step_size``) on the weight (not the bias) minimising
        ``‖A_new v − (C/σ_1) A_old v‖²`` (conv: squared error summed over channels and height and
        averaged over width, as in the code), then refresh ``V`` from ``U[0,1)`` noise with
        ``refresh_iters`` PowerQR iterations. For a dense layer one step is the rank-one update
        ``W ← W − 2·step·(σ_1 − C) u_1 v_1ᵀ`` (``σ_1 → 0.3σ_1 + 0.7C`` at step 0.35).

        Raises:
            RuntimeError: if called before the vectors are initialised (no forward seen yet).
        """
        if not self.initialized:
            raise RuntimeError("SpectralClip.clip_now(): no input seen yet; run a training forward "
                               "or call init_vectors(in_shape) first")
        if self.clip is None or not (force or self.needs_clip()):
            return False
        s1 = abs(float(self.sigma[0]))
        if s1 < 1e-12:
            return False
        v = self.V[:1]
        w = self.module.weight
        target = linear_operator(self.module)(v) * (self.clip / s1)
        for _ in range(self.opt_steps):
            with torch.enable_grad():
                wv = w.detach().clone().requires_grad_(True)
                if self.is_conv:
                    out = self.module._conv_forward(v, wv, None)
                    err = (out - target).pow(2)
                    loss = err.sum(dim=(1, 2)).mean() if err.dim() == 4 else err.sum()
                else:
                    out = torch.nn.functional.linear(v, wv)
                    loss = (out - target).pow(2).sum()
                (g,) = torch.autograd.grad(loss, wv)
            w.sub_(self.step_size * g)
        self.refresh_vectors_after_clip()
        return True

    @torch.no_grad()
    def refresh_vectors_after_clip(self) -> None:
        """Recompute ``V``/``sigma`` after the weight changed (see ``refresh``)."""
        gram = gram_operator(self.module)
        if self.refresh == "code":
            V, s = power_qr(self.op, self._noise(uniform=True), self.refresh_iters, gram)
        else:
            d = self.V[0].numel()
            extra = min(2, d - self.k)
            noise = torch.randn(extra, *self.in_shape, generator=self._gen).to(self.V)
            block = torch.cat([self.V, noise])
            V, s = ritz_power_qr(self.op, block, self.warm_refresh_iters, gram, k=self.k)
        self.V.copy_(V)
        self.sigma.copy_(s)

    @torch.no_grad()
    def exact_clip_(self) -> None:
        """Exact rank-one clip of a dense layer: ``W ← W − (σ_1 − C) u_1 v_1ᵀ`` (full SVD).

        Afterwards ``σ_1' = max(C, σ_2)``. Only for ``nn.Linear`` (a conv kernel cannot express a
        rank-one change of its operator).

        Raises:
            TypeError: for a non-``nn.Linear`` layer.
        """
        if not isinstance(self.module, nn.Linear):
            raise TypeError("exact_clip_ needs an nn.Linear layer; use clip_now() for convolutions")
        if self.clip is None:
            return
        W = self.module.weight
        U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
        if S[0] > self.clip:
            W.sub_(((S[0] - self.clip) * torch.outer(U[:, 0], Vh[0])).to(W.dtype))
        if self.initialized:
            self.V.copy_(Vh[: self.k].to(W.dtype).reshape(self.V.shape))
            S2 = torch.linalg.svdvals(W.double())
            self.sigma.copy_(S2[: self.k].to(W.dtype))

    # -- state dict with lazily shaped V --------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix, keep_vars):
        self.n_forward.fill_(self._count)
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "V"
        if key in state_dict and state_dict[key].shape != self.V.shape:
            w = self.module.weight
            self.V = torch.empty_like(state_dict[key], device=w.device, dtype=w.dtype)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._count = int(self.n_forward)

    def extra_repr(self) -> str:
        return (f"clip={self.clip}, k={self.k}, clip_every={self.clip_every}, "
                f"opt_steps={self.opt_steps}, step_size={self.step_size}, exact={self.exact}, "
                f"refresh={self.refresh}")


def spectral_layers(model: nn.Module, layers: str = "conv") -> list[SpectralClip]:
    """The ``SpectralClip`` wrappers of ``model`` in module order.

    Args:
        model: a model built with wrapped layers (e.g. ``SmallConvNet(clip=1.0)``).
        layers: ``"conv"`` (conv layers only, the code's ``conv_only``), or ``"all"``.

    Raises:
        ValueError: unknown ``layers``.
    """
    if layers not in ("conv", "all"):
        raise ValueError(f"layers must be 'conv' or 'all', got {layers!r}")
    out = [m for m in model.modules() if isinstance(m, SpectralClip)]
    if layers == "conv":
        out = [m for m in out if m.is_conv]
    return out


def wrap_layers(model: nn.Module, **kwargs) -> nn.Module:
    """Replace every ``nn.Conv*d`` and ``nn.Linear`` inside ``model`` by ``SpectralClip(layer, **kwargs)``
    (in place; returns ``model``). Layers already wrapped are left alone. Seeds differ per layer."""
    counter = iter(range(10**9))

    def _wrap(parent: nn.Module) -> None:
        for name, child in list(parent.named_children()):
            if isinstance(child, SpectralClip):
                continue
            if isinstance(child, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)):
                kw = dict(kwargs)
                kw["seed"] = kw.get("seed", 0) * 1000 + next(counter)
                setattr(parent, name, SpectralClip(child, **kw))
            else:
                _wrap(child)

    _wrap(model)
    return model



@torch.no_grad()
def refresh_vectors(model: nn.Module, n_iters: int = 20) -> None:
    """Run ``n_iters`` warm-started PowerQR iterations on every initialised wrapper of ``model``
    (e.g. before reading ``sigma`` or cross gains after training). Weights are not changed."""
    for m in spectral_layers(model, "all"):
        if m.initialized:
            V, s = power_qr(m.op, m.V, n_iters, gram_operator(m.module))
            m.V.copy_(V)
            m.sigma.copy_(s)


def true_top_singular(layer: SpectralClip, *, max_entries: float = 3e7, tol: float = 1e-9,
                      max_iters: int = 5000) -> tuple[float, str]:
    """The true top singular value ``σ_1`` of a wrapped layer's operator (at its tracked input
    shape), not the tracked estimate.

    Method, in order: dense SVD of the weight (``nn.Linear``); the exact FFT formula (stride-1 conv
    with circular padding); the dense SVD of the explicit operator matrix (zero-padded or strided
    conv with ``d_in · d_out <= max_entries``, in float64); otherwise a block PowerQR with
    ``k + 4`` vectors (warm-started from ``V`` plus noise) iterated until ``σ_1`` changes by less
    than ``tol`` (relative).

    Returns:
        ``(sigma_1, method)`` with ``method`` in ``{"dense_svd", "fft", "explicit_svd", "power_qr"}``.

    Raises:
        RuntimeError: the layer has seen no input yet (its input shape is unknown).
    """
    m = layer.module
    if isinstance(m, nn.Linear):
        return float(torch.linalg.svdvals(m.weight.detach().double())[0]), "dense_svd"
    if not layer.initialized:
        raise RuntimeError("true_top_singular: the layer has seen no input; run a forward first")
    shape = layer.in_shape
    if isinstance(m, nn.Conv2d) and m.padding_mode == "circular" and tuple(m.stride) == (1, 1):
        return float(conv_singular_values_fft(m.weight, tuple(shape[1:]))[0]), "fft"
    d_in = int(torch.tensor(shape).prod())
    with torch.no_grad():
        d_out = int(layer.op(layer.V[:1]).numel())
    if d_in * d_out <= max_entries:
        import copy

        m64 = copy.deepcopy(m).double()
        M = explicit_matrix(linear_operator(m64), shape, dtype=torch.float64, device=m.weight.device)
        G = M @ M.T if M.shape[0] <= M.shape[1] else M.T @ M  # the smaller Gram: same top eigenvalue
        return float(torch.linalg.eigvalsh(G)[-1].clamp_min(0).sqrt()), "explicit_svd"
    gen = torch.Generator().manual_seed(12345)
    with torch.no_grad():
        extra = torch.randn(4, *shape, generator=gen).to(layer.V)
        V = torch.cat([layer.V, extra])
        gram = gram_operator(m)
        prev = None
        for _ in range(max_iters):
            V, s = power_qr_step(layer.op, V, gram)
            if prev is not None and abs(float(s[0]) - prev) <= tol * max(prev, 1e-12):
                break
            prev = float(s[0])
    return float(s[0]), "power_qr"


def spectral_report(model: nn.Module, *, layers: str = "all", **kwargs) -> list[dict]:
    """The true ``σ_1`` of every wrapped layer of ``model`` beside its tracked estimate.

    Args:
        model: a model with :class:`SpectralClip` wrappers that has seen a training forward.
        layers: ``"all"`` or ``"conv"``.
        **kwargs: passed to :func:`true_top_singular`.

    Returns:
        One dict per layer: ``{"layer", "kind", "in_shape", "clip", "tracked", "true", "method",
        "true_over_clip"}`` (floats; ``true_over_clip`` is ``None`` for unclipped layers).
    """
    out = []
    for i, layer in enumerate(spectral_layers(model, layers)):
        true, method = true_top_singular(layer, **kwargs)
        out.append({"layer": i, "kind": type(layer.module).__name__,
                    "in_shape": list(layer.in_shape) if layer.initialized else None,
                    "clip": layer.clip, "tracked": float(layer.sigma[0]) if layer.initialized else None,
                    "true": true, "method": method,
                    "true_over_clip": true / layer.clip if layer.clip else None})
    return out


@torch.no_grad()
def final_clip_(model: nn.Module, *, tol: float = 1e-3, **kwargs) -> list[dict]:
    """The final exact clip pass: every clipped layer whose **true** ``σ_1``
    (:func:`true_top_singular`) exceeds ``C·(1 + tol)`` is rescaled, ``W ← (C/σ_1)·W`` (bias
    unchanged), so its operator norm is exactly ``C``; ``V``/``sigma`` are refreshed.

    FastClip events are rank-one: they lower the tracked direction only, and after training the top
    of the spectrum is flat (hundreds of singular values within a few percent of ``σ_1``), so no
    number of rank-one events bounds ``σ_1`` at the end of a run. This pass is our addition (issue
    17); it is applied to every clipped arm alike.

    Returns:
        One dict per clipped layer: ``{"layer", "kind", "true_before", "true_after", "scale",
        "method"}``.
    """
    out = []
    for i, layer in enumerate(spectral_layers(model, "all")):
        if layer.clip is None:
            continue
        before, method = true_top_singular(layer, **kwargs)
        scale = 1.0
        if before > layer.clip * (1.0 + tol):
            scale = layer.clip / before
            if scale < 0.9:
                log.warning("final clip pass: layer %d had true sigma_1 = %.3f = %.2f x C; training did not hold "
                            "the bound (too few clip events?), rescaled by %.3f", i, before, before / layer.clip, scale)
            layer.module.weight.mul_(scale)
            if layer.initialized:
                V, s = ritz_power_qr(layer.op, layer.V, 5, gram_operator(layer.module), k=layer.k)
                layer.V.copy_(V)
                layer.sigma.copy_(s)
        after = true_top_singular(layer, **kwargs)[0] if scale != 1.0 else before
        out.append({"layer": i, "kind": type(layer.module).__name__, "true_before": before, "true_after": after,
                    "scale": scale, "method": method})
    return out
