"""The transfer attack (spec "Attack", Eq. 3) and the white-box bound.

For watermarked images ``x_w`` and surrogate decoders ``D_1..D_m`` with target bits ``t_j``
(inverse-decode: ``t_j = 1 − round(clip(D_j(x_w), 0, 1))``), solve

    min_δ (1/m) Σ_j MSE(D_j(x_w + δ), t_j)    s.t. ‖δ‖∞ ≤ r                          (Eq. 3)

with the official iteration, images in ``[-1, 1]``:

1. ``grad = (1/m) Σ_j ∇_x [MSE(D_j(x), t_j) · B]`` (B = images still optimised; the factor makes the
   per-image gradient independent of the batch), computed per image as ``Σ_b mean_i (D_j(x)_bi − t_bi)²``;
2. ``x ← x − α·grad`` (``update="grad"``; ``"sign"`` is the PGD variant ``x ← x − α·sign(grad)``);
3. clamp ``x`` into ``[min(x_prev), max(x_prev)]`` of the image before the step;
4. ℓ∞ projection by rescaling ``δ ← δ · r/‖δ‖∞`` when ``‖δ‖∞ > r`` (``projection="clip"``: clamp to ``[−r, r]``);
5. per-image stop when ``mean_j BA_j(x; t_j) ≥ 1 − ε`` or ``SSIM(x, x_w) ≤ ssim_stop`` (on ``[0, 1]``),
   at most ``T = max_iters`` steps.

Only the images still being optimised are forwarded (active-set shrinking, as the official loop);
``active_set=False`` forwards the full batch with finished images masked (same result, slower; used
by the benchmark).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from .config import check_attack_params
from .detect import bit_accuracy, inverse_decode_targets
from .models import check_images
from .quality import ssim, to_unit

__all__ = [
    "AttackResult",
    "project_linf",
    "surrogate_gradient",
    "eq3_descent",
    "transfer_attack",
    "whitebox_attack",
    "random_sign_noise",
    "check_attack_params",
    "STOP_REASONS",
]

STOP_REASONS = ("bit_acc", "ssim", "max_iters")

Decoder = Callable[[Tensor], Tensor]


@dataclass
class AttackResult:
    """Outcome of :func:`transfer_attack` / :func:`whitebox_attack`.

    Attributes:
        x_adv: ``[B,3,H,W]`` released images in ``[-1, 1]``.
        delta: ``x_adv − x_w``.
        iterations: ``[B]`` long, gradient steps taken per image.
        stop_reason: one of :data:`STOP_REASONS` per image (``bit_acc``: the surrogates read the
            target bits on ≥ 1 − ε of positions; ``ssim``: SSIM fell to ``ssim_stop``; ``max_iters``).
        targets: per surrogate the target bits ``[B, n_j]``.
        surrogate_bit_acc: ``[B]`` mean over surrogates of the bitwise accuracy against their targets at release.
        ssim: ``[B]`` SSIM(x_adv, x_w) on ``[0, 1]``.
        params: the attack parameters used.
    """

    x_adv: Tensor
    delta: Tensor
    iterations: Tensor
    stop_reason: list[str]
    targets: list[Tensor]
    surrogate_bit_acc: Tensor
    ssim: Tensor
    params: dict = field(default_factory=dict)

    def stop_counts(self) -> dict[str, int]:
        return {k: sum(1 for s in self.stop_reason if s == k) for k in STOP_REASONS}


def project_linf(delta: Tensor, r: float, projection: Literal["rescale", "clip"] = "rescale") -> Tensor:
    """ℓ∞ projection of per-sample perturbations ``delta [B, ...]`` onto ``‖δ‖∞ ≤ r``.

    ``rescale`` (official): ``δ · r / ‖δ‖∞`` for samples with ``‖δ‖∞ > r`` (direction kept);
    ``clip``: elementwise clamp to ``[−r, r]``. Samples inside the ball are unchanged.
    Example: ``δ = (0.6, −0.2)``, ``r = 0.5`` → rescale ``(0.5, −0.16667)``, clip ``(0.5, −0.2)``.
    """
    if projection == "clip":
        return delta.clamp(-r, r)
    norm = delta.flatten(1).abs().max(1).values.view(-1, *([1] * (delta.dim() - 1)))
    scale = torch.where(norm > r, r / norm.clamp_min(1e-30), torch.ones_like(norm))
    return delta * scale


def surrogate_gradient(x: Tensor, decoders: Sequence[Decoder], targets: Sequence[Tensor],
                       weights: Tensor | None = None) -> Tensor:
    """``(1/m) Σ_j ∇_x Σ_b w_b · mean_i (D_j(x)_bi − t_jbi)²`` (= ``∇ MSE·B`` with unit weights).

    Args:
        x: ``[B, ...]`` inputs; decoders: ``m`` callables ``[B, ...] → [B, n_j]``; targets: ``m`` tensors ``[B, n_j]``.
        weights: ``[B]`` per-sample weights (0 masks a sample; the full-batch masked loop).

    Returns:
        ``[B, ...]`` gradient (no graph kept).
    """
    xg = x.detach().requires_grad_(True)
    total = xg.new_zeros(())
    for dec, t in zip(decoders, targets):
        per = (dec(xg) - t).pow(2).mean(1)
        total = total + (per if weights is None else per * weights).sum()
    (g,) = torch.autograd.grad(total / len(decoders), xg)
    return g


def eq3_descent(x_w: Tensor, decoders: Sequence[Decoder], targets: Sequence[Tensor], *, alpha: float,
                r: float | None, eps: float | None, max_iters: int, ssim_stop: float | None,
                update: str = "grad", projection: str = "rescale", box: bool = True, active_set: bool = True,
                on_iter: Callable[[int, int], None] | None = None) -> tuple[Tensor, Tensor, list[str], Tensor]:
    """The iteration of Eq. (3) on a batch (steps 1–5 of the module docstring).

    The bit-accuracy stop after step k is read from the forward pass that step k + 1 needs anyway
    (one decoder forward per surrogate and step instead of two); the SSIM stop is measured right
    after each step. Both decide before the next step, exactly as checking at the end of step k.

    Args:
        x_w: ``[B, ...]`` starting points (images in ``[-1,1]`` when ``ssim_stop`` is set).
        decoders, targets: as :func:`surrogate_gradient`.
        r: ℓ∞ bound (None: unbounded); eps: bit-accuracy stop (None: never); ssim_stop: SSIM stop (None: never).
        box: clamp into the per-sample ``[min, max]`` of the previous iterate (official).
        active_set: forward only unfinished samples (True) or the full batch with a mask (False).
        on_iter: called as ``on_iter(iteration, n_active)`` after each step.

    Returns:
        ``(x, iterations [B], stop_reason list[B], surrogate_bit_acc [B])`` — the last is the mean over
        surrogates of the bit accuracy against the targets at the released ``x``.
    """
    B = x_w.shape[0]
    m = len(decoders)
    x = x_w.detach().clone()
    iters = torch.zeros(B, dtype=torch.long, device=x.device)
    reason = ["max_iters"] * B
    active = torch.ones(B, dtype=torch.bool, device=x.device)
    ssim_hit = torch.zeros(B, dtype=torch.bool, device=x.device)
    final_acc = torch.zeros(B, device=x.device)
    view = (-1, *([1] * (x.dim() - 1)))
    for it in range(max_iters + 1):
        idx = active.nonzero().squeeze(1)
        if idx.numel() == 0:
            break
        rows = idx if not active_set else None  # rows of the forwarded batch that are still active
        xa = x[idx] if active_set else x
        xg = xa.detach().requires_grad_(it < max_iters)
        with torch.set_grad_enabled(it < max_iters):
            outs = [dec(xg) for dec in decoders]
        with torch.no_grad():
            sel = [o if rows is None else o[rows] for o in outs]
            acc = torch.stack([bit_accuracy(o.detach(), t[idx]) for o, t in zip(sel, targets)]).mean(0)
            final_acc[idx] = acc
            hit_acc = acc >= 1 - eps if (eps is not None and it > 0) else torch.zeros_like(acc, dtype=torch.bool)
            done = hit_acc | ssim_hit[idx]
            for k in done.nonzero().squeeze(1).tolist():
                reason[int(idx[k])] = "bit_acc" if bool(hit_acc[k]) else "ssim"
            active[idx[done]] = False
            keep = ~done
        if it == max_iters or not bool(keep.any()):
            break
        # loss over the rows still optimised: Σ_b mean_i (D_j(x)_bi − t_bi)², averaged over surrogates
        wts = torch.zeros(xa.shape[0], device=x.device, dtype=x.dtype)
        wts[(torch.arange(idx.numel(), device=x.device) if rows is None else rows)[keep]] = 1.0
        full_t = [t[idx] if rows is None else t for t in targets]
        total = sum(((o - t).pow(2).mean(1) * wts).sum() for o, t in zip(outs, full_t))
        (g,) = torch.autograd.grad(total / m, xg)
        with torch.no_grad():
            idx = idx[keep]
            ga = g[keep] if rows is None else g[idx]
            xa = x[idx]
            step = ga.sign() if update == "sign" else ga
            xn = xa - alpha * step
            if box:
                lo = xa.flatten(1).min(1).values.view(view)
                hi = xa.flatten(1).max(1).values.view(view)
                xn = torch.maximum(torch.minimum(xn, hi), lo)
            x0 = x_w[idx]
            if r is not None:
                xn = x0 + project_linf(xn - x0, r, projection)  # type: ignore[arg-type]
            x[idx] = xn
            iters[idx] += 1
            if ssim_stop is not None:
                ssim_hit[idx] = ssim(to_unit(xn).clamp(0, 1), to_unit(x0).clamp(0, 1)) <= ssim_stop
        if on_iter is not None:
            on_iter(it + 1, int(active.sum()))
    return x, iters, reason, final_acc


class _FrozenDecoders:
    """Context: eval mode and ``requires_grad=False`` on every decoder parameter (only ∂/∂x is needed)."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        self.models = [m for m in models if isinstance(m, nn.Module)]
        self.saved: list[tuple[nn.Module, bool, list[tuple[Tensor, bool]]]] = []

    def __enter__(self) -> _FrozenDecoders:
        for m in self.models:
            self.saved.append((m, m.training, [(p, p.requires_grad) for p in m.parameters()]))
            m.eval()
            for p in m.parameters():
                p.requires_grad_(False)
        return self

    def __exit__(self, *exc) -> None:
        for m, training, ps in self.saved:
            m.train(training)
            for p, rg in ps:
                p.requires_grad_(rg)


def _decode_fn(model) -> Decoder:
    if hasattr(model, "decode"):
        return model.decode
    if callable(model):
        return model
    raise ValueError(f"surrogate {model!r} has neither .decode nor __call__")


def transfer_attack(x_w: Tensor, surrogates: Sequence, strategy: Literal["inverse-decode", "random"] = "inverse-decode",
                    alpha: float = 2.0, r: float = 0.5, eps: float = 0.2, max_iters: int = 5000,
                    ssim_stop: float = 0.9, update: Literal["grad", "sign"] = "grad",
                    projection: Literal["rescale", "clip"] = "rescale", *, active_set: bool = True,
                    generator: torch.Generator | None = None,
                    on_iter: Callable[[int, int], None] | None = None) -> AttackResult:
    """No-box transfer attack with ``m = len(surrogates)`` surrogate decoders (spec "Attack").

    Args:
        x_w: ``[B,3,H,W]`` watermarked images in ``[-1, 1]`` (float).
        surrogates: models with ``.decode(x) → [B, n_j]`` (any bit lengths) or plain callables.
        strategy: ``inverse-decode`` (paper/code) or ``random`` target bits (ablation).
        alpha: step size (code: 2 for 128×128 images; rescale for other sizes).
        r: ℓ∞ bound on the ``[-1, 1]`` scale (code: 0.5 = 0.25 on ``[0, 1]``).
        eps: stop when the mean surrogate bit accuracy against the targets is ≥ ``1 − eps`` (code: 0.2).
        max_iters: T (code: 5000).
        ssim_stop: stop when SSIM(x, x_w) ≤ this (code: 0.9).
        update: ``grad`` (official plain gradient step) or ``sign`` (PGD).
        projection: ``rescale`` (official) or ``clip``.
        active_set: forward only unfinished images (official; ``False`` = masked full batch).
        generator: randomness of the ``random`` strategy.

    Returns:
        :class:`AttackResult`.

    Raises:
        ValueError: bad images (see :func:`~.models.check_images`), no surrogates, a surrogate with a
            ``cfg`` of another image size than ``x_w``, or bad parameters (see :func:`check_attack_params`).
    """
    check_images(x_w, name="x_w")
    if not surrogates:
        raise ValueError("transfer_attack needs at least one surrogate decoder")
    check_attack_params(alpha, r, eps, max_iters, ssim_stop, update, projection)
    if strategy not in ("inverse-decode", "random"):
        raise ValueError(f"strategy must be 'inverse-decode' or 'random', got {strategy!r}")
    for j, s in enumerate(surrogates):
        c = getattr(s, "cfg", None)
        hw = (getattr(c, "H", None), getattr(c, "W", None))
        if None not in hw and hw != (x_w.shape[2], x_w.shape[3]):
            raise ValueError(f"x_w are {x_w.shape[2]}x{x_w.shape[3]} but surrogate {j} "
                             f"({getattr(s, 'source', None) or type(s).__name__}) takes {hw[0]}x{hw[1]} images; "
                             "resize the images to the surrogates' size or train surrogates at the images' size")
    decs = [_decode_fn(s) for s in surrogates]
    with _FrozenDecoders(surrogates), torch.no_grad():
        outs = [d(x_w) for d in decs]
    for j, o in enumerate(outs):
        if o.dim() != 2 or o.shape[0] != x_w.shape[0]:
            raise ValueError(f"surrogate {j} returned shape {tuple(o.shape)}; expected [B={x_w.shape[0]}, n]")
    if strategy == "inverse-decode":
        targets = [inverse_decode_targets(o) for o in outs]
    else:
        targets = [torch.randint(0, 2, o.shape, generator=generator).to(o) for o in outs]
    with _FrozenDecoders(surrogates):
        x, iters, reason, acc = eq3_descent(x_w, decs, targets, alpha=alpha, r=r, eps=eps, max_iters=max_iters,
                                            ssim_stop=ssim_stop, update=update, projection=projection,
                                            active_set=active_set, on_iter=on_iter)
    x_adv = x.clamp(-1.0, 1.0)
    with torch.no_grad():
        s = ssim(to_unit(x_adv), to_unit(x_w).clamp(0, 1))
    params = dict(strategy=strategy, alpha=alpha, r=r, eps=eps, max_iters=max_iters, ssim_stop=ssim_stop,
                  update=update, projection=projection, m=len(surrogates))
    return AttackResult(x_adv, x_adv - x_w, iters, reason, targets, acc, s, params)


def whitebox_attack(x_w: Tensor, target, alpha: float = 2.0, r: float = 0.5, eps: float = 0.2,
                    max_iters: int = 5000, ssim_stop: float = 0.9, update: Literal["grad", "sign"] = "grad",
                    projection: Literal["rescale", "clip"] = "rescale", **kw) -> AttackResult:
    """The same iteration with the target's own decoder as the only "surrogate" (an upper bound on what
    transfer can achieve with these parameters; guidance, not a certificate). With ``eps = 0`` it runs
    to full inversion, which the double-tail detector still catches (lower tail)."""
    return transfer_attack(x_w, [target], "inverse-decode", alpha, r, eps, max_iters, ssim_stop, update, projection,
                           **kw)


def random_sign_noise(x_w: Tensor, linf_per_image: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Uniform random ``±a_b`` noise with per-image amplitude ``a_b`` (``[B]``, ``[-1,1]`` scale), i.e. the
    same ℓ∞ as a given perturbation; clamped to ``[-1, 1]``. The "random ±r noise" baseline."""
    sign = torch.randint(0, 2, x_w.shape, generator=generator).to(x_w) * 2 - 1
    return (x_w + sign * linf_per_image.view(-1, 1, 1, 1).to(x_w)).clamp(-1.0, 1.0)
