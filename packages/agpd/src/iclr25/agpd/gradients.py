"""Channel-wise activation gradients (paper Eq. 1) and penultimate features for the baselines.

Every function takes either tensors ``(x, y)`` or a stream of batches (a
``torch.utils.data.DataLoader`` or any iterable of ``(x, y)`` / ``(x, y, ...)`` batches): batches
are moved to the device one at a time and only the ``(N, C_l)`` gradient vectors (and labels,
predictions, features) are kept, so the untrustworthy set never has to be one tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["activation_gradients", "penultimate_features", "predict", "stream_gradients", "GradientPass",
           "iter_batches", "autocast_context"]

#: Static loss scale for fp16 autocast (gradients w.r.t. activations are ~1e-3..1e-6 and would
#: underflow in fp16 without it); the gradients are divided by it again in float32.
FP16_SCALE = 2.0 ** 12


def _batches(n: int, batch_size: int):
    for i in range(0, n, batch_size):
        yield slice(i, min(i + batch_size, n))


def _check_order(data) -> None:
    sampler = getattr(data, "sampler", None)
    if sampler is not None and isinstance(sampler, torch.utils.data.RandomSampler):
        raise ValueError("the DataLoader shuffles (shuffle=True): detection results are returned in data-set "
                         "order, so build it with shuffle=False")


def iter_batches(data, y: Tensor | None = None, batch_size: int = 256, *, need_labels: bool = True
                 ) -> Iterator[tuple[Tensor, Tensor | None]]:
    """Yield ``(x_batch, y_batch)`` from tensors ``(data, y)`` (sliced by ``batch_size``) or from an
    iterable of batches (``(x, y, ...)`` tuples/lists, or bare ``x`` tensors when labels are not needed).

    Raises:
        ValueError: mismatched tensors, a shuffling DataLoader, or a batch without labels when
            ``need_labels``.
    """
    if isinstance(data, Tensor):
        if y is not None and len(data) != len(y):
            raise ValueError(f"x has {len(data)} samples but y has {len(y)}")
        if need_labels and y is None:
            raise ValueError("labels y are required with a tensor x")
        for sl in _batches(len(data), batch_size):
            yield data[sl], (y[sl] if y is not None else None)
        return
    if y is not None:
        raise ValueError("pass y=None with a DataLoader / iterable of (x, y) batches (labels come from the batches)")
    if not isinstance(data, Iterable):
        raise ValueError(f"expected a tensor or an iterable of (x, y) batches, got {type(data).__name__}")
    _check_order(data)
    for b in data:
        if isinstance(b, Tensor):
            xb, yb = b, None
        elif isinstance(b, (tuple, list)) and b and isinstance(b[0], Tensor):
            xb = b[0]
            yb = b[1] if len(b) > 1 else None
            if yb is not None and not isinstance(yb, Tensor):
                yb = torch.as_tensor(yb)
        else:
            raise ValueError(f"each batch must be an (x, y) pair of tensors, got {type(b).__name__}")
        if need_labels and yb is None:
            raise ValueError("a batch has no labels: batches must be (x, y)")
        if yb is not None and len(yb) != len(xb):
            raise ValueError(f"a batch has {len(xb)} images but {len(yb)} labels")
        yield xb, yb


def autocast_context(device: torch.device, amp: str | bool | None):
    """``torch.autocast`` for ``amp`` in ``"bf16"``/``"fp16"``/``True`` (= bf16) on CUDA; a no-op
    context for ``None``/``False``/``"off"`` and on every non-CUDA device (AMP is off on CPU).

    Returns:
        ``(context manager, loss scale)`` (``FP16_SCALE`` for fp16, else 1).
    """
    import contextlib

    if amp in (None, False, "off", "none"):
        return contextlib.nullcontext(), 1.0
    kinds = {True: torch.bfloat16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16}
    if amp not in kinds:
        raise ValueError(f"amp must be None/'off', 'bf16' or 'fp16', got {amp!r}")
    if device.type != "cuda":
        return contextlib.nullcontext(), 1.0
    dt = kinds[amp]
    return torch.autocast("cuda", dtype=dt), (FP16_SCALE if dt == torch.float16 else 1.0)


def _resolve(model: nn.Module, layers: Sequence[str]) -> dict[str, nn.Module]:
    modules = dict(model.named_modules())
    missing = [n for n in layers if n not in modules]
    if missing:
        raise KeyError(f"model has no layer(s) {missing}; conv layers are e.g. "
                       f"{[n for n, m in modules.items() if isinstance(m, nn.Conv2d)][:6]}")
    return modules


def _device(model: nn.Module, device) -> torch.device:
    if device is not None:
        return torch.device(device)
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


@dataclass
class GradientPass:
    """What one streamed pass over a data set keeps (all on the CPU, in data-set order).

    Attributes:
        grads: ``{layer: (N, C_l) float32}`` activation gradients (Eq. 1).
        labels: ``(N,)`` int64, the given labels.
        preds: ``(N,)`` int64, the model's predictions (from the same forward pass).
        features: ``(N, D) float32`` input of the head module, when ``head`` was given; else ``None``.
    """

    grads: dict[str, Tensor]
    labels: Tensor
    preds: Tensor
    features: Tensor | None = field(default=None)

    def __len__(self) -> int:
        return len(self.labels)


def stream_gradients(model: nn.Module, data, layers: Sequence[str], *, y: Tensor | None = None,
                     batch_size: int = 256, target: str = "logit", device: str | torch.device | None = None,
                     amp: str | bool | None = None, head: str | None = None, progress: bool = False) -> GradientPass:
    """One pass over ``data`` (tensors ``x`` with ``y=...``, or a DataLoader / iterable of ``(x, y)``
    batches): activation gradients of every layer, labels, predictions and (``head``) penultimate
    features, keeping only those per-sample vectors. Each batch is moved to ``device`` (default:
    the model's), run under ``amp`` autocast on CUDA (see :func:`autocast_context`), and its results
    are moved back to the CPU as float32 before the next batch is read.

    See :func:`activation_gradients` for Eq. (1), ``target`` and the eval-mode handling.
    """
    if target not in ("logit", "ce"):
        raise ValueError(f"target must be 'logit' or 'ce', got {target!r}")
    layers = list(layers)
    modules = _resolve(model, layers)
    if head is not None and head not in modules:
        raise KeyError(f"model has no module {head!r}")
    dev = _device(model, device)
    store: dict[str, Tensor] = {}
    feats: list[Tensor] = []
    hooks = [modules[n].register_forward_hook(lambda _m, _i, out, n=n: store.__setitem__(n, out)) for n in layers]
    if head is not None:
        hooks.append(modules[head].register_forward_pre_hook(
            lambda _m, inp: feats.append(inp[0].detach().flatten(1).float().cpu())))
    was_training = model.training
    model.eval()
    out: dict[str, list[Tensor]] = {n: [] for n in layers}
    labels: list[Tensor] = []
    preds: list[Tensor] = []
    autocast_context(dev, amp)  # validates amp before any batch is read
    try:
        from iclr25.core.progress import progress as _bar

        total = None
        if isinstance(data, Tensor):
            total = -(-len(data) // batch_size)
        elif hasattr(data, "__len__"):
            total = len(data)
        non_blocking = dev.type == "cuda"
        for xb, yb in _bar(iter_batches(data, y, batch_size), total=total, desc="activation gradients",
                           unit="batch", quiet=None if progress else True):
            xb = xb.to(dev, non_blocking=non_blocking)
            if not xb.is_floating_point():
                raise ValueError(f"images must be float (got {xb.dtype}); divide uint8 images by 255")
            xb = xb.requires_grad_(True) if layers else xb
            ybd = yb.to(dev, non_blocking=non_blocking).long()
            ctx, scale = autocast_context(dev, amp)
            with torch.enable_grad(), ctx:
                logits = model(xb)
                if layers:
                    if target == "logit":
                        obj = logits.float().gather(1, ybd[:, None]).sum()
                    else:
                        obj = F.cross_entropy(logits.float(), ybd, reduction="sum")
            if layers:
                grads = torch.autograd.grad(obj * scale if scale != 1.0 else obj, [store[n] for n in layers])
                for n, g in zip(layers, grads):
                    g = g.float()
                    if scale != 1.0:
                        g = g / scale
                    out[n].append((g.mean(dim=(2, 3)) if g.ndim == 4 else g).detach().cpu())
            preds.append(logits.detach().argmax(1).cpu())
            labels.append(yb.long().cpu())
            store.clear()
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    def cat(v: list[Tensor], dt: torch.dtype = torch.float32) -> Tensor:
        return torch.cat(v) if v else torch.empty(0, dtype=dt)

    return GradientPass({n: cat(v) for n, v in out.items()}, cat(labels, torch.long), cat(preds, torch.long),
                        cat(feats) if head is not None else None)


def activation_gradients(model: nn.Module, x, y: Tensor | None, layers: Sequence[str], batch_size: int = 256,
                         target: str = "logit", device: str | torch.device | None = None,
                         progress: bool = False, amp: str | bool | None = None) -> dict[str, Tensor]:
    """Eq. (1): ``g^(l)(x, y) = (1/HW) sum_{h,w} d[f(x)]_y / d h^(l)(x)[:, h, w]`` for every layer.

    One forward/backward per batch: forward hooks keep every named layer's output and a single
    ``torch.autograd.grad`` returns the gradients w.r.t. all of them. The model is put in eval
    mode (BatchNorm uses running statistics, so samples are independent) and restored after.

    Args:
        model: a classifier returning logits ``(N, K)``.
        x: inputs ``(N, ...)`` float with labels ``y`` ``(N,)`` int64 (the *given*, possibly poisoned,
            labels); or a ``DataLoader`` / iterable of ``(x, y)`` batches (not shuffled) with ``y=None``,
            streamed batch by batch (use :func:`stream_gradients` to get the labels back too).
        layers: names from ``model.named_modules()`` (e.g. ``"layer2.0.conv1"``).
        batch_size: samples per backward pass (tensor input).
        target: ``"logit"`` (paper / BackdoorBench default: sum of the label logits) or ``"ce"``
            (cross-entropy loss, BackdoorBench's ``cross_entropy=True``).
        device: where to compute (default: the model's device).
        amp: ``None`` (off, exact float32), ``"bf16"`` or ``"fp16"``: autocast on CUDA (off on CPU).

    Returns:
        ``{layer: (N, C_l) float32}`` on the CPU; outputs ``(N, C, H, W)`` are averaged over the
        spatial positions, outputs ``(N, C)`` are kept as they are.

    Raises:
        KeyError: for a layer name the model does not have.
        ValueError: for mismatched ``x``/``y``, a shuffling DataLoader or an unknown ``target``.
    """
    return stream_gradients(model, x, layers, y=y, batch_size=batch_size, target=target, device=device, amp=amp,
                            progress=progress).grads


@torch.no_grad()
def penultimate_features(model: nn.Module, x, head: str = "linear", batch_size: int = 512,
                         amp: str | bool | None = None) -> Tensor:
    """Input of the classifier head ``head`` (the penultimate representation) -> ``(N, D)`` float32,
    as used by Spectral Signatures and Activation Clustering. ``x``: a tensor or a DataLoader /
    iterable of ``x`` or ``(x, y)`` batches (streamed). Eval mode."""
    modules = dict(model.named_modules())
    if head not in modules:
        raise KeyError(f"model has no module {head!r}")
    dev = _device(model, None)
    feats: list[Tensor] = []
    h = modules[head].register_forward_pre_hook(lambda _m, inp: feats.append(inp[0].flatten(1).float().cpu()))
    was_training = model.training
    model.eval()
    try:
        for xb, _ in iter_batches(x, None, batch_size, need_labels=False):
            ctx, _s = autocast_context(dev, amp)
            with ctx:
                model(xb.to(dev))
    finally:
        h.remove()
        model.train(was_training)
    return torch.cat(feats) if feats else torch.empty(0)


@torch.no_grad()
def predict(model: nn.Module, x, batch_size: int = 512, amp: str | bool | None = None) -> Tensor:
    """Predicted labels ``(N,)`` int64 (eval mode); ``x`` a tensor or a DataLoader / iterable of
    ``x`` or ``(x, y)`` batches (streamed)."""
    dev = _device(model, None)
    was_training = model.training
    model.eval()
    preds = []
    try:
        for xb, _ in iter_batches(x, None, batch_size, need_labels=False):
            ctx, _s = autocast_context(dev, amp)
            with ctx:
                preds.append(model(xb.to(dev)).argmax(1).cpu())
    finally:
        model.train(was_training)
    return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)
