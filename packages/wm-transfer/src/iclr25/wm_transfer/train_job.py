"""The reproduction's training job (a job of the core's runner): one target or surrogate model of the CPU-scale
architecture (:data:`~.config.TINY`) trained with the CPU recipe (:data:`~.config.CPU_TRAIN`) and saved in
the package checkpoint format."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .checkpoint import load_watermark_model, save_watermark_model
from .config import CPU_TRAIN, TINY
from .data import load_cifar_role
from .models import HiddenConfig
from .train import TrainSettings, train_watermark_model

__all__ = ["train_job"]


def train_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job of the reproduction: train one model (:data:`~.config.TINY` architecture, the
    :data:`~.config.CPU_TRAIN` recipe) on its role's images and save it to ``settings["path"]``.

    ``settings``: ``name``, ``role`` (``target`` | ``surrogate``), ``n_bits``, ``robust``, ``epochs``,
    ``n_train``, ``n_val``, ``path``, ``device``. A finished model file at ``path`` with the same seed, data
    size and epochs is reused (the reproduction clears ``models/`` on a fresh run, so only ``--resume``
    finds one); an interrupted training continues from ``<path stem>.epoch.pt``.

    Returns:
        ``name``, ``path``, ``clean_bit_acc`` (held out), ``val_psnr``, ``seconds``, ``reused``, ``steps``.
    """
    path = Path(settings["path"])
    name = settings["name"]
    t0 = time.perf_counter()
    if path.is_file():
        m = load_watermark_model(path)
        info = m.train_info
        if info.get("seed") == seed and info.get("n_train") == settings["n_train"] and \
                len(info.get("history", [])) == settings["epochs"]:
            return {"name": name, "path": str(path), "clean_bit_acc": m.clean_bit_acc,
                    "val_psnr": info.get("val_psnr"), "seconds": 0.0, "reused": True, "steps": info.get("steps")}
    n_train, n_val = settings["n_train"], settings["n_val"]
    data = load_cifar_role(settings["role"], n_train + n_val, seed=seed).images
    if data.shape[0] < n_train + n_val:
        raise ValueError(f"{name}: {data.shape[0]} {settings['role']} images < n_train {n_train} + n_val {n_val}")
    cfg = HiddenConfig(n_bits=settings["n_bits"], **TINY)
    robust = bool(settings["robust"])
    st = TrainSettings(epochs=settings["epochs"], acc_high=0.93 if robust else 0.98, acc_low=0.88 if robust else 0.95,
                       **CPU_TRAIN)
    ckpt = path.with_name(path.stem + ".epoch.pt")
    path.parent.mkdir(parents=True, exist_ok=True)
    model = train_watermark_model(cfg, data[:n_train], seed, robust, settings=st, val_images=data[n_train:],
                                  device=settings.get("device", "cpu"), checkpoint=ckpt, resume=ckpt.is_file(),
                                  quiet=True)
    save_watermark_model(model, path, role=settings["role"])
    return {"name": name, "path": str(path), "clean_bit_acc": model.clean_bit_acc,
            "val_psnr": model.train_info["val_psnr"], "seconds": time.perf_counter() - t0, "reused": False,
            "steps": model.train_info["steps"]}
