"""Channel-wise activation gradients (paper Eq. 1) and penultimate features for the baselines."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["activation_gradients", "penultimate_features", "predict"]


def _batches(n: int, batch_size: int):
    for i in range(0, n, batch_size):
        yield slice(i, min(i + batch_size, n))


def activation_gradients(model: nn.Module, x: Tensor, y: Tensor, layers: Sequence[str], batch_size: int = 256,
                         target: str = "logit", device: str | torch.device | None = None,
                         progress: bool = False) -> dict[str, Tensor]:
    """Eq. (1): ``g^(l)(x, y) = (1/HW) sum_{h,w} d[f(x)]_y / d h^(l)(x)[:, h, w]`` for every layer.

    One forward/backward per batch: forward hooks keep every named layer's output and a single
    ``torch.autograd.grad`` returns the gradients w.r.t. all of them. The model is put in eval
    mode (BatchNorm uses running statistics, so samples are independent) and restored after.

    Args:
        model: a classifier returning logits ``(N, K)``.
        x: inputs ``(N, ...)`` float; y: labels ``(N,)`` int64 (the *given*, possibly poisoned,
            labels).
        layers: names from ``model.named_modules()`` (e.g. ``"layer2.0.conv1"``).
        batch_size: samples per backward pass.
        target: ``"logit"`` (paper / BackdoorBench default: sum of the label logits) or ``"ce"``
            (cross-entropy loss, BackdoorBench's ``cross_entropy=True``).
        device: where to compute (default: the model's device).

    Returns:
        ``{layer: (N, C_l) float32}`` on the CPU; outputs ``(N, C, H, W)`` are averaged over the
        spatial positions, outputs ``(N, C)`` are kept as they are.

    Raises:
        KeyError: for a layer name the model does not have.
        ValueError: for mismatched ``x``/``y`` or an unknown ``target``.
    """
    if target not in ("logit", "ce"):
        raise ValueError(f"target must be 'logit' or 'ce', got {target!r}")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} samples but y has {len(y)}")
    modules = dict(model.named_modules())
    missing = [n for n in layers if n not in modules]
    if missing:
        raise KeyError(f"model has no layer(s) {missing}; conv layers are e.g. "
                       f"{[n for n, m in modules.items() if isinstance(m, nn.Conv2d)][:6]}")
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    store: dict[str, Tensor] = {}
    hooks = [modules[n].register_forward_hook(lambda _m, _i, out, n=n: store.__setitem__(n, out))
             for n in layers]
    was_training = model.training
    model.eval()
    out = {n: [] for n in layers}
    try:
        from tqdm.auto import tqdm

        for sl in tqdm(list(_batches(len(x), batch_size)), desc="activation gradients", disable=not progress):
            xb = x[sl].to(dev).requires_grad_(True)
            yb = y[sl].to(dev).long()
            with torch.enable_grad():
                logits = model(xb)
                if target == "logit":
                    obj = logits.gather(1, yb[:, None]).sum()
                else:
                    obj = F.cross_entropy(logits, yb, reduction="sum")
                grads = torch.autograd.grad(obj, [store[n] for n in layers])
            for n, g in zip(layers, grads):
                out[n].append((g.mean(dim=(2, 3)) if g.ndim == 4 else g).detach().float().cpu())
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return {n: torch.cat(v) for n, v in out.items()}


@torch.no_grad()
def penultimate_features(model: nn.Module, x: Tensor, head: str = "linear", batch_size: int = 512) -> Tensor:
    """Input of the classifier head ``head`` (the penultimate representation) -> ``(N, D)`` float32,
    as used by Spectral Signatures and Activation Clustering. Eval mode."""
    modules = dict(model.named_modules())
    if head not in modules:
        raise KeyError(f"model has no module {head!r}")
    dev = next(model.parameters()).device
    feats: list[Tensor] = []
    h = modules[head].register_forward_pre_hook(lambda _m, inp: feats.append(inp[0].flatten(1).float().cpu()))
    was_training = model.training
    model.eval()
    try:
        for sl in _batches(len(x), batch_size):
            model(x[sl].to(dev))
    finally:
        h.remove()
        model.train(was_training)
    return torch.cat(feats)


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int = 512) -> Tensor:
    """Predicted labels ``(N,)`` int64 (eval mode)."""
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        preds = [model(x[sl].to(dev)).argmax(1).cpu() for sl in _batches(len(x), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)
