"""Training of the three arms (``orig`` / ``clip`` / ``lotos``), checkpoints and ``--resume``.

One step (official trainer): forward every member (each wrapped layer does one PowerQR step and,
on schedule, a FastClip event), sum the cross-entropies, add the LOTOS penalty (Eq. 4) unless the
step is excluded, one SGD step on the union of the members' parameters.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from iclr25.core.seed import choose_device

from ._version import __version__
from .clip import spectral_layers
from .config import TrainConfig
from .data import ImageData, load_data
from .loss import lotos_penalty
from .models import build_model

__all__ = ["augment", "build_ensemble", "clip_to_target", "train_step", "train_ensemble", "save_ensemble", "load_ensemble",
           "model_spec"]

log = logging.getLogger(__name__)


def augment(x: Tensor, generator: torch.Generator, pad: int = 4) -> Tensor:
    """Random crop with zero padding ``pad`` and random horizontal flip, vectorised.

    Args:
        x: ``(B, C, H, W)`` float.
        generator: CPU RNG (decides offsets and flips).

    Returns:
        ``(B, C, H, W)`` augmented copy.
    """
    B, C, H, W = x.shape
    xp = F.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (B,), generator=generator).to(x.device)
    ox = torch.randint(0, 2 * pad + 1, (B,), generator=generator).to(x.device)
    flip = (torch.rand(B, generator=generator) < 0.5).to(x.device)
    ar_h = torch.arange(H, device=x.device)
    ar_w = torch.arange(W, device=x.device)
    rows = (oy[:, None] + ar_h)[:, None, :, None].expand(B, C, H, W + 2 * pad)
    cols = ox[:, None] + ar_w
    cols = torch.where(flip[:, None], cols.flip(1), cols)[:, None, None, :].expand(B, C, H, W)
    out = xp.gather(2, rows)
    return out.gather(3, cols)


def model_spec(cfg: TrainConfig, data: ImageData) -> dict[str, Any]:
    """Everything needed to rebuild a member (saved in config.json)."""
    clip_kwargs = dict(k=cfg.k, clip_every=cfg.clip_every, opt_steps=cfg.clip_opt_iter,
                       step_size=cfg.clip_step, exact=cfg.clip_exact, power_every=cfg.power_every,
                       refresh=cfg.refresh)
    return dict(arch=cfg.arch, num_classes=data.num_classes, in_ch=data.in_ch, width=cfg.width,
                clip=cfg.clip if cfg.clipped else None, clip_kwargs=clip_kwargs,
                mean=list(data.mean), std=list(data.std))


def _build(spec: dict[str, Any], seed: int) -> nn.Module:
    kw = dict(spec)
    kw["clip_kwargs"] = dict(kw["clip_kwargs"], seed=seed)
    return build_model(kw.pop("arch"), **kw)


def build_ensemble(spec: dict[str, Any], num_models: int, seed: int) -> list[nn.Module]:
    """``num_models`` members; the global RNG is seeded with ``seed`` first, so every arm starts from
    the same initial weights (wrapping draws from its own generator, not the global one)."""
    torch.manual_seed(seed)
    return [_build(spec, seed * 100 + a) for a in range(num_models)]


@torch.no_grad()
def clip_to_target(models: list[nn.Module], x: Tensor, max_events: int = 50) -> list[int]:
    """Initialise the wrappers with one training forward of ``x``, then repeat FastClip events on each
    layer until it no longer needs clipping (``|σ_1 − C| < 0.05``-ish, see ``needs_clip``) or
    ``max_events`` is reached. Returns the number of events per model (summed over layers)."""
    counts = []
    for m in models:
        was = m.training
        m.train()
        m(x)
        m.train(was)
        n = 0
        for layer in spectral_layers(m, "all"):
            for _ in range(max_events):
                if not layer.clip_now():
                    break
                n += 1
        counts.append(n)
    return counts


def train_step(models: list[nn.Module], xb: Tensor, yb: Tensor, optimizer: torch.optim.Optimizer,
               cfg: TrainConfig, use_penalty: bool) -> dict[str, float]:
    """One optimisation step of the ensemble (Eq. 4); returns ``{"ce", "penalty", "acc"}``."""
    ce = xb.new_zeros(())
    correct = 0.0
    for m in models:
        logits = m(xb)
        ce = ce + F.cross_entropy(logits, yb)
        correct += float((logits.argmax(-1) == yb).float().mean())
    loss = ce
    pen = 0.0
    if cfg.method == "lotos" and use_penalty:
        p = lotos_penalty(models, mal=cfg.mal, lam=cfg.lam, layers=cfg.lotos_layers, normalize=cfg.normalize)
        loss = loss + p
        pen = float(p.detach())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    return {"ce": float(ce.detach()) / len(models), "penalty": pen, "acc": correct / len(models)}


def _lr_lambda(cfg: TrainConfig, steps_per_epoch: int):
    total = cfg.epochs * steps_per_epoch
    if cfg.schedule == "cosine":
        return lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total))
    return lambda s: cfg.gamma ** ((s // steps_per_epoch) // cfg.step_epochs)


def _cfg_json(cfg: TrainConfig) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    d["out"] = str(d["out"]) if d.get("out") is not None else None
    return d


def save_ensemble(models: list[nn.Module], path: Path) -> None:
    """Save the members' state dicts (``torch.save``; read back with ``weights_only=True``)."""
    torch.save({"models": [m.state_dict() for m in models]}, path)


def load_ensemble(folder: str | Path, device: str = "cpu") -> tuple[list[nn.Module], dict[str, Any]]:
    """Rebuild a trained ensemble from a ``train`` output folder.

    Returns:
        ``(models in eval mode, config dict)``.

    Raises:
        FileNotFoundError: ``config.json`` or ``models.pt`` missing (naming the folder).
    """
    folder = Path(folder)
    cfg_p, mod_p = folder / "config.json", folder / "models.pt"
    if not cfg_p.is_file() or not mod_p.is_file():
        raise FileNotFoundError(f"{folder} is not a trained ensemble: needs config.json and models.pt "
                                "(run `iclr25-lotos train --out DIR` first)")
    try:
        meta = json.loads(cfg_p.read_text())
        spec = meta["model"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{cfg_p}: not a config written by `iclr25-lotos train` ({type(e).__name__}: {e})") from None
    try:
        state = torch.load(mod_p, map_location=device, weights_only=True)
    except Exception as e:  # noqa: BLE001 - a truncated, corrupt or pickled-object file
        raise ValueError(f"{mod_p} cannot be read as a weights-only checkpoint ({type(e).__name__}: "
                         f"{str(e).splitlines()[0][:200]}); it is corrupt or not written by `iclr25-lotos train`. "
                         "Only tensors are loaded (weights_only=True): pickled objects are refused") from None
    if not isinstance(state, dict) or not isinstance(state.get("models"), list):
        raise ValueError(f"{mod_p}: expected {{'models': [state_dict, ...]}}, got {type(state).__name__}")
    models = []
    for a, sd in enumerate(state["models"]):
        m = _build(spec, a).to(device)
        try:
            m.load_state_dict(sd)
        except (RuntimeError, KeyError, TypeError) as e:
            raise ValueError(f"{mod_p}: member {a} does not fit the architecture in {cfg_p.name} "
                             f"({str(e).splitlines()[0][:200]})") from None
        models.append(m.eval())
    return models, meta


def _device(cfg: TrainConfig):
    if cfg.accelerate:
        from accelerate import Accelerator  # optional [full] extra

        acc = Accelerator()
        return acc.device, acc
    return torch.device(choose_device(cfg.device)), None


def train_ensemble(cfg: TrainConfig, data: ImageData | None = None) -> list[nn.Module]:
    """Train ``cfg.num_models`` members with arm ``cfg.method``; write ``cfg.out``.

    Writes ``config.json`` (resolved config + model spec), ``metrics.jsonl`` (one line per epoch),
    ``checkpoint.pt`` (after every epoch, for ``resume``) and ``models.pt`` (final).
    With ``device="accelerate"`` each process trains the full ensemble on its shard of every batch
    and gradients are averaged across processes (the penalty needs all members on one device).

    Args:
        cfg: the config.
        data: preloaded data (default: ``load_data(cfg.data, cfg.n_train)``).

    Returns:
        The trained members (train mode off).

    Raises:
        FileNotFoundError: ``resume`` without a checkpoint in ``cfg.out``.
    """
    from iclr25.core.progress import progress

    device, acc = _device(cfg)
    rank, world = (acc.process_index, acc.num_processes) if acc is not None else (0, 1)
    data = data or load_data(cfg.data, cfg.n_train, image_size=cfg.image_size)
    out = Path(cfg.out) if cfg.out is not None else Path("runs") / "lotos" / "train"
    out.mkdir(parents=True, exist_ok=True)
    spec = model_spec(cfg, data)
    models = [m.to(device) for m in build_ensemble(spec, cfg.num_models, cfg.seed)]
    params = [p for m in models for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    n = data.x_train.shape[0]
    spe = max(1, n // cfg.batch_size + (1 if n % cfg.batch_size else 0))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(cfg, spe))
    start_epoch, step = 0, 0
    ckpt = out / "checkpoint.pt"
    if cfg.resume:
        if not ckpt.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint at {ckpt}; train without --resume first")
        try:
            st = torch.load(ckpt, map_location=device, weights_only=True)
            if len(st["models"]) != len(models):
                raise ValueError(f"{len(st['models'])} members saved, --num-models {len(models)}")
            for m, sd in zip(models, st["models"]):
                m.load_state_dict(sd)
            opt.load_state_dict(st["optimizer"])
            sched.load_state_dict(st["scheduler"])
            start_epoch, step = int(st["epoch"]), int(st["step"])
        except Exception as e:  # unpickling / missing keys / shape mismatches come in many types
            raise ValueError(f"--resume: {ckpt} is corrupt, truncated or from other settings "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); delete it "
                             "and train without --resume, or resume with the run's own settings") from None
        log.info("resumed from %s at epoch %d", ckpt, start_epoch)
    if cfg.clipped and cfg.clip_at_init and not cfg.resume:
        clip_to_target(models, data.x_train[:2].to(device))
    if rank == 0:
        (out / "config.json").write_text(json.dumps(
            {"config": _cfg_json(cfg), "model": spec, "data": data.name, "version": __version__}, indent=2))
    xtr, ytr = data.x_train.to(device), data.y_train.to(device)
    mode = "a" if cfg.resume else "w"
    metrics_f = open(out / "metrics.jsonl", mode) if rank == 0 else None
    try:
        for epoch in range(start_epoch, cfg.epochs):
            for m in models:
                m.train()
            g = torch.Generator().manual_seed(cfg.seed * 100003 + epoch)
            perm = torch.randperm(n, generator=g).to(device)
            agg = {"ce": 0.0, "penalty": 0.0, "acc": 0.0}
            t0 = time.perf_counter()
            bar = progress(range(spe), desc=f"{cfg.method} epoch {epoch + 1}/{cfg.epochs}",
                           quiet=True if (cfg.quiet or rank != 0) else None)
            for i in bar:
                idx = perm[i * cfg.batch_size:(i + 1) * cfg.batch_size]
                if world > 1:
                    idx = idx[rank::world]
                xb, yb = xtr[idx], ytr[idx]
                if cfg.augment:
                    xb = augment(xb, g)
                use_pen = not cfg.skip_penalty_steps or not (step == 0 or i == spe - 1 or step % 200 == 199)
                r = train_step(models, xb, yb, opt, cfg, use_pen)
                if acc is not None and world > 1:
                    for p in params:
                        if p.grad is not None:
                            p.grad = acc.reduce(p.grad, reduction="mean")
                opt.step()
                sched.step()
                step += 1
                for kk in agg:
                    agg[kk] += r[kk]
                bar.set_postfix(ce=f"{r['ce']:.3f}", pen=f"{r['penalty']:.3f}")
            rec = {k2: v / spe for k2, v in agg.items()}
            rec.update(epoch=epoch + 1, step=step, seconds=time.perf_counter() - t0,
                       lr=opt.param_groups[0]["lr"])
            if cfg.clipped:
                rec["sigma_model0"] = [round(float(s.sigma[0]), 4) for s in spectral_layers(models[0], "all")]
            if rank == 0:
                metrics_f.write(json.dumps(rec) + "\n")
                metrics_f.flush()
                torch.save({"models": [m.state_dict() for m in models], "optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict(), "epoch": epoch + 1, "step": step}, ckpt)
            log.info("epoch %d: %s", epoch + 1, rec)
    finally:
        if metrics_f is not None:
            metrics_f.close()
    for m in models:
        m.eval()
    if cfg.clipped:
        report = _final_spectra(models, xtr[:2], cfg)
        if rank == 0:
            (out / "spectral.json").write_text(json.dumps(report, indent=2))
            worst = max(r["true_after"] / cfg.clip for mm in report["members"] for r in mm)
            log.info("true sigma_1 / C after training: max %.4f (final clip: %s)", worst, cfg.final_clip)
    if rank == 0:
        save_ensemble(models, out / "models.pt")
    return models


def _final_spectra(models: list[nn.Module], x: Tensor, cfg: TrainConfig) -> dict[str, Any]:
    """True σ_1 of every clipped layer at the end of training (and after the final clip pass)."""
    from .clip import final_clip_, spectral_report

    members = []
    for m in models:
        m.train()
        m(x)  # a forward with tracking: every wrapper knows its input shape
        m.eval()
        if cfg.final_clip == "rescale":
            rows = final_clip_(m)
        else:
            rows = [{"layer": r["layer"], "kind": r["kind"], "true_before": r["true"], "true_after": r["true"],
                     "scale": 1.0, "method": r["method"]} for r in spectral_report(m) if r["clip"]]
        members.append(rows)
    return {"clip": cfg.clip, "final_clip": cfg.final_clip, "members": members,
            "max_true_over_clip_before": max(r["true_before"] for mm in members for r in mm) / cfg.clip,
            "max_true_over_clip_after": max(r["true_after"] for mm in members for r in mm) / cfg.clip}
