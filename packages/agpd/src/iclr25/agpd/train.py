"""Training the (backdoored) classifier: SGD + cosine schedule (BackdoorBench's recipe), with
per-epoch checkpoints and resumption."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["train_classifier", "save_checkpoint", "load_checkpoint", "accuracy"]

log = logging.getLogger("iclr25.agpd")


def save_checkpoint(path: str | Path, model: nn.Module, optimizer=None, scheduler=None, epoch: int = 0,
                    meta: dict | None = None) -> Path:
    """Write ``{"model", "optimizer", "scheduler", "epoch", "meta"}`` with ``torch.save`` (tensors and
    plain Python values only, so :func:`load_checkpoint` can use ``weights_only=True``). Atomic."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    state = {"model": model.state_dict(), "epoch": int(epoch), "meta": dict(meta or {})}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        state["scheduler"] = scheduler.state_dict()
    tmp = p.with_suffix(p.suffix + ".tmp")
    torch.save(state, tmp)
    tmp.replace(p)
    return p


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` (``torch.load(weights_only=True)``).

    Raises:
        FileNotFoundError: no such file. ValueError: a refused pickle (anything but tensors and
        plain values), a truncated/corrupt file, or not an agpd checkpoint — naming the file.
    """
    import pickle

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint {p} does not exist")
    try:
        st = torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"{p}: refused to load (not a plain tensor checkpoint; weights_only=True): "
                         f"{str(e).splitlines()[0][:200]}") from None
    except (RuntimeError, OSError, EOFError) as e:
        raise ValueError(f"{p}: not a readable checkpoint (truncated or corrupt: {str(e).splitlines()[0][:200]}); "
                         "delete it and train again") from None
    if not isinstance(st, dict) or "model" not in st:
        raise ValueError(f"{p}: not an iclr25-agpd checkpoint (no 'model' entry)")
    return st


def _augment(x: Tensor, g: torch.Generator, pad: int = 4) -> Tensor:
    """Random crop (zero padding ``pad``) and horizontal flip, vectorised over the batch."""
    n, _, h, w = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=g)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=g)
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None].expand(n, x.shape[1], h, w + 2 * pad)
    xp = xp.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :].expand(n, x.shape[1], h, w)
    out = xp.gather(3, cols)
    flip = torch.rand(n, generator=g) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


def train_classifier(model: nn.Module, x: Tensor, y: Tensor, epochs: int = 30, batch_size: int = 128,
                     lr: float = 0.01, momentum: float = 0.9, weight_decay: float = 5e-4, seed: int = 0,
                     augment: bool = False, device: str = "cpu", checkpoint: str | Path | None = None,
                     resume: bool = False, progress: bool = False) -> nn.Module:
    """Train ``model`` on ``(x, y)`` with cross-entropy, SGD (momentum, weight decay) and
    ``CosineAnnealingLR(T_max=epochs)`` (BackdoorBench's CIFAR-10 recipe; paper App. C).

    Args:
        x: ``(N, C, H, W)`` float; y: ``(N,)`` int64.
        seed: the batch order of epoch ``e`` is drawn from ``seed + e`` (resuming is exact).
        augment: random crop (pad 4) + horizontal flip (CIFAR).
        checkpoint: file written after every epoch; with ``resume=True`` an existing one is
            loaded and training continues from its epoch — only with the same training settings
            and data (stored in the checkpoint; a change is a ``ValueError`` naming it).

    Returns:
        The trained model (same object), in eval mode.
    """
    from .data import check_images, check_label_range

    check_images(x, y, name="training set")
    check_label_range(model, x, y, name="training labels")
    for f, v, ok, rule in (("lr", lr, lr > 0, "> 0"), ("momentum", momentum, 0 <= momentum < 1, "in [0, 1)"),
                           ("weight_decay", weight_decay, weight_decay >= 0, ">= 0")):
        if not (math.isfinite(v) and ok):
            raise ValueError(f"{f}={v!r} must be finite and {rule}")
    if epochs < 1 or batch_size < 2:
        raise ValueError(f"epochs={epochs} must be >= 1 and batch_size={batch_size} >= 2 (BatchNorm)")
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    start = 0
    import hashlib

    training = {"epochs": int(epochs), "batch_size": int(batch_size), "lr": float(lr), "momentum": float(momentum),
                "weight_decay": float(weight_decay), "seed": int(seed), "augment": bool(augment),
                "data_sha256": hashlib.sha256(x.detach().cpu().contiguous().numpy().tobytes()
                                              + y.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]}
    if resume and checkpoint is not None and Path(checkpoint).is_file():
        st = load_checkpoint(checkpoint)
        saved = (st.get("meta") or {}).get("training")
        if saved is None:
            log.warning("--resume: %s predates stored training settings; cannot check that epochs/lr/data match "
                        "the run that wrote it", checkpoint)
        else:
            from iclr25.core.config import changed_settings

            what = changed_settings(saved, training)
            if what:
                raise ValueError(f"--resume: {checkpoint} was written with other training settings ({what}; "
                                 "data_sha256 differs when the training set does); resume with the same settings "
                                 "and data, or train into another --out")
        try:
            model.load_state_dict(st["model"])
        except RuntimeError as e:
            raise ValueError(f"--resume: {checkpoint} holds another architecture than the model being trained "
                             f"({str(e).splitlines()[0][:200]}); use the same --model or another --out") from None
        if "optimizer" in st:
            opt.load_state_dict(st["optimizer"])
        if "scheduler" in st:
            sched.load_state_dict(st["scheduler"])
        start = int(st["epoch"])
        log.info("resumed from %s at epoch %d", checkpoint, start)
    from iclr25.core.progress import progress as _bar

    for epoch in _bar(range(start, epochs), desc="train", unit="epoch", quiet=None if progress else True,
                      initial=start, total=epochs):
        model.train()
        g = torch.Generator().manual_seed(seed * 100003 + epoch)
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), batch_size):
            idx = perm[i:i + batch_size]
            if len(idx) < 2:  # BatchNorm needs two samples
                continue
            xb = _augment(x[idx], g) if augment else x[idx]
            loss = F.cross_entropy(model(xb.to(device)), y[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
        if checkpoint is not None:
            save_checkpoint(checkpoint, model, opt, sched, epoch + 1, meta={"training": training})
    model.eval()
    return model


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Clean accuracy in [0, 1]."""
    from .gradients import predict

    return float((predict(model, x) == y).float().mean())
