"""Full-scale data: ImageFolder folders and torchvision data sets as streamed ``DataLoader``s.

Needs the ``[vision]`` extra (``pip install 'iclr25-agpd[vision]'``, i.e. torchvision); torchvision
is imported inside the functions, so the rest of the package works without it. Nothing is ever
downloaded: torchvision data sets are opened with ``download=False`` from a local ``root``.

Images become float32 ``(C, H, W)`` in [0, 1] (``ToTensor``), optionally resized / centre-cropped and
normalised, so they match what the model was trained on. Loaders never shuffle: AGPD's poison mask
follows the data-set order (``dataset.samples[i]`` is the file of mask entry ``i`` for a folder).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

__all__ = ["require_torchvision", "image_transform", "image_folder", "torchvision_dataset", "make_loader",
           "sample_paths", "TORCHVISION_DATASETS"]

#: torchvision data sets with a ``train=`` split argument that :func:`torchvision_dataset` opens.
TORCHVISION_DATASETS = ("CIFAR10", "CIFAR100", "MNIST", "FashionMNIST", "KMNIST", "SVHN", "STL10", "GTSRB")


def require_torchvision():
    """Import torchvision or raise an ImportError naming the ``[vision]`` extra."""
    try:
        import torchvision
    except ImportError as e:
        raise ImportError("ImageFolder / torchvision data sets need torchvision: "
                          "pip install 'iclr25-agpd[vision]'") from e
    return torchvision


def image_transform(image_size: int | Sequence[int] | None = None, channels: int = 3,
                    mean: Sequence[float] | None = None, std: Sequence[float] | None = None):
    """``[Grayscale] -> [Resize + CenterCrop] -> ToTensor -> [Normalize]``.

    Args:
        image_size: side (or ``(H, W)``) to resize + centre-crop to; ``None`` keeps the files' size
            (they must then all have the same size to be batched).
        channels: 3 (RGB) or 1 (grey).
        mean, std: per-channel normalisation; ``None``: none (pixels in [0, 1], as the package's
            models are trained).
    """
    tv = require_torchvision()
    T = tv.transforms
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    steps = [T.Grayscale(1)] if channels == 1 else [T.Lambda(_rgb)]
    if image_size is not None:
        steps += [T.Resize(image_size), T.CenterCrop(image_size)]
    steps.append(T.ToTensor())
    if (mean is None) != (std is None):
        raise ValueError("give both mean and std, or neither")
    if mean is not None:
        steps.append(T.Normalize(list(mean), list(std)))
    return T.Compose(steps)


def _rgb(img):
    return img.convert("RGB")


def _load_image(path):
    """torchvision's PIL loader, but an unreadable file is a ``ValueError`` naming it (not a traceback)."""
    from PIL import Image
    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            return img.convert("RGB")
    except OSError as e:  # PIL.UnidentifiedImageError, truncated files
        raise ValueError(f"{path}: not a readable image ({e.__class__.__name__}); remove or replace it") from None


def image_folder(root: str | Path, *, image_size: int | Sequence[int] | None = None, channels: int = 3,
                 mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 class_to_idx: dict[str, int] | None = None):
    """An ImageFolder data set (``root/<class>/<image>``; classes sorted by name -> 0..K-1, or
    ``class_to_idx`` to reuse another folder's mapping, e.g. the untrustworthy set's for the clean set).

    Raises:
        FileNotFoundError: ``root`` is not a folder, or has no class folders with images.
        ValueError: ``class_to_idx`` misses a class folder of ``root``.
    """
    tv = require_torchvision()
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder (expected root/<class>/<image files>)")
    tf = image_transform(image_size, channels, mean, std)
    if class_to_idx is None:
        try:
            return tv.datasets.ImageFolder(str(root), transform=tf, loader=_load_image)
        except (FileNotFoundError, RuntimeError) as e:
            raise FileNotFoundError(f"{root}: {e}") from None

    class _Fixed(tv.datasets.ImageFolder):
        def find_classes(self, directory):
            found = sorted(d.name for d in Path(directory).iterdir() if d.is_dir())
            extra = [c for c in found if c not in class_to_idx]
            if extra:
                raise ValueError(f"{directory}: class folder(s) {extra} are not among {sorted(class_to_idx)}")
            return found, {c: class_to_idx[c] for c in found}

    try:
        return _Fixed(str(root), transform=tf, loader=_load_image)
    except (FileNotFoundError, RuntimeError) as e:
        raise FileNotFoundError(f"{root}: {e}") from None


def torchvision_dataset(name: str, root: str | Path, *, train: bool = True,
                        image_size: int | Sequence[int] | None = None, channels: int | None = None,
                        mean: Sequence[float] | None = None, std: Sequence[float] | None = None):
    """A torchvision data set already on disk under ``root`` (``download=False``, never downloads).

    Args:
        name: one of :data:`TORCHVISION_DATASETS` (case-insensitive).
        train: the training split (SVHN/STL10: ``split="train"``/``"test"``; GTSRB: ``split=``).
        channels: default 1 for the MNIST family, else 3.

    Raises:
        ValueError: an unknown name. FileNotFoundError: the files are not under ``root``.
    """
    tv = require_torchvision()
    byname = {n.lower(): n for n in TORCHVISION_DATASETS}
    if name.lower() not in byname:
        raise ValueError(f"unknown torchvision data set {name!r}; choose from {list(TORCHVISION_DATASETS)}")
    cls_name = byname[name.lower()]
    if channels is None:
        channels = 1 if "MNIST" in cls_name else 3
    tf = image_transform(image_size, channels, mean, std)
    cls = getattr(tv.datasets, cls_name)
    split = dict(split="train" if train else "test") if cls_name in ("SVHN", "STL10", "GTSRB") else dict(train=train)
    try:
        return cls(str(root), transform=tf, download=False, **split)
    except RuntimeError as e:  # torchvision's "Dataset not found or corrupted"
        raise FileNotFoundError(f"{cls_name} files not found under {root} ({e}); iclr25-agpd never downloads: "
                                f"put torchvision's {cls_name} files there (e.g. torchvision.datasets.{cls_name}"
                                f"({str(root)!r}, download=True) on a machine with internet)") from None


def make_loader(dataset, batch_size: int = 256, num_workers: int = 0, pin_memory: bool | None = None):
    """A non-shuffling ``DataLoader`` over ``dataset`` (``pin_memory`` defaults to CUDA being available)."""
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                                       pin_memory=pin_memory, persistent_workers=num_workers > 0)


def sample_paths(dataset) -> list[str] | None:
    """File paths in data-set order (ImageFolder's ``samples``), or ``None`` when the data set has none."""
    s = getattr(dataset, "samples", None)
    return [str(p) for p, _ in s] if s is not None else None
