"""Training state you can trust: atomic checkpoint folders, every RNG state captured, logs cut back.

Three things a user of a long training run expects from a checkpoint, in one place for every package:

* **A torn write never loses the stage.** :func:`atomic_folder` writes a checkpoint into a temporary
  sibling folder and renames it into place only once every file is complete (and fsynced); the
  previous checkpoint is kept until then. A kill at any moment leaves either the old checkpoint or the
  new one, never a mix (e.g. step-63 weights beside step-60 optimiser state). :func:`recover_folder`
  puts the previous checkpoint back when a kill fell between the two renames.
* **Kill at any moment, ``--resume`` gives the same weights.** :func:`capture_rng_state` /
  :func:`restore_rng_state` save and restore *every* global generator a training step can draw from
  (Python ``random``, NumPy's legacy global state, torch CPU and every CUDA device) as a JSON-ready
  dict, so LoRA dropout, data shuffling and sampling draw the same numbers after a resume.
* **Logs say each step once.** :func:`trim_jsonl` cuts a per-step log back to the checkpointed step
  before a resumed run appends to it.

The resume-settings guard (``--resume`` refuses changed settings, naming them) is
:func:`iclr25.core.config.guard_resume_settings`; the kill-and-resume test helper is
:func:`iclr25.core.testing.kill_and_resume`.

Torch-free at import: torch is imported only when its generators are captured or restored.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_folder",
    "recover_folder",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_write_bytes",
    "capture_rng_state",
    "restore_rng_state",
    "trim_jsonl",
]

RNG_STATE_VERSION = 1


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it survives a power cut (a no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    os.fsync(f.fileno())
            except OSError:
                pass
        _fsync_dir(Path(root))


def _siblings(folder: Path) -> tuple[Path, Path]:
    return folder.with_name(folder.name + ".tmp"), folder.with_name(folder.name + ".old")


def recover_folder(folder: str | Path) -> Path | None:
    """Bring a checkpoint folder back after a kill inside :func:`atomic_folder`'s swap.

    The swap is ``folder -> folder.old``, then ``folder.tmp -> folder``. A kill between the two leaves
    no ``folder`` but a complete ``folder.old``: it is renamed back. A leftover ``folder.tmp`` (a write
    that never finished) is removed, and so is a leftover ``folder.old`` beside a complete ``folder``.

    Returns:
        ``folder`` if a checkpoint is there after recovery, else ``None``.
    """
    folder = Path(folder)
    tmp, old = _siblings(folder)
    if not folder.exists() and old.is_dir():
        os.replace(old, folder)
        _fsync_dir(folder.parent)
    shutil.rmtree(tmp, ignore_errors=True)
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        return folder
    return None


@contextlib.contextmanager
def atomic_folder(folder: str | Path) -> Iterator[Path]:
    """Write a checkpoint folder atomically: ``with atomic_folder(ckpt) as tmp: save everything in tmp``.

    Inside the ``with`` block the caller writes every file of the checkpoint into ``tmp`` (a fresh,
    empty sibling ``<folder>.tmp``). On a clean exit the files are fsynced and ``tmp`` replaces
    ``folder`` (the previous checkpoint, if any, is moved aside first and deleted only after the new
    one is in place). On an exception ``tmp`` is removed and ``folder`` is left as it was.

    A process killed at any point leaves ``folder`` complete (old or new) or, between the two renames,
    a complete ``<folder>.old`` that :func:`recover_folder` (called on entry here, and by loaders
    before they read) renames back.

    Args:
        folder: the checkpoint's final path; its parent is created if needed.

    Yields:
        the temporary folder to write into.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(folder)
    tmp, old = _siblings(folder)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_tree(tmp)
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    _fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary sibling, fsync and rename: the file is old or new,
    never torn."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """:func:`atomic_write_text` for bytes (e.g. a ``torch.save`` into ``io.BytesIO``): old or new, never torn."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> Path:
    """:func:`atomic_write_text` of ``json.dumps(obj)`` (NaN refused: ``allow_nan=False``)."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def capture_rng_state(*, torch_state: bool | None = None) -> dict[str, Any]:
    """Every global random generator's state, as a JSON-ready dict (see :func:`restore_rng_state`).

    Captured: Python's ``random``; NumPy's legacy global state (``np.random.seed``/``np.random.rand``);
    torch's CPU generator and, when CUDA is initialised, every CUDA device's generator. Explicit
    ``numpy.random.Generator`` / ``torch.Generator`` objects a package owns are not global: save their
    states beside this (``gen.bit_generator.state`` is JSON-ready; ``gen.get_state()`` for torch).

    Args:
        torch_state: include torch's generators; default: when torch is already imported (a run that
            never imported torch draws nothing from it, and capturing must not import it).

    Returns:
        ``{"version", "python", "numpy", "torch_cpu"?, "torch_cuda"?}``; byte states base64-encoded.
    """
    import sys

    v, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "version": RNG_STATE_VERSION,
        "python": [v, list(internal), gauss],
        "numpy": [name, _b64(np.asarray(keys, dtype=np.uint32).tobytes()), int(pos), int(has_gauss),
                  float(cached)],
    }
    if torch_state is None:
        torch_state = "torch" in sys.modules
    if torch_state:
        import torch

        state["torch_cpu"] = _b64(torch.get_rng_state().numpy().tobytes())
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["torch_cuda"] = [_b64(s.numpy().tobytes()) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put back every generator :func:`capture_rng_state` captured.

    Raises:
        ValueError: a state of another format version, or CUDA states saved on a machine with another
            number of GPUs (a resume there could not draw the same numbers: say so rather than guess).
    """
    if state.get("version") != RNG_STATE_VERSION:
        raise ValueError(f"RNG state version {state.get('version')!r} is not {RNG_STATE_VERSION}: the checkpoint "
                         "was written by another iclr25-core; resume with that version or start over")
    v, internal, gauss = state["python"]
    random.setstate((v, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.frombuffer(_unb64(keys), dtype=np.uint32).copy(), pos, has_gauss, cached))
    if "torch_cpu" in state or "torch_cuda" in state:
        import torch

        if "torch_cpu" in state:
            torch.set_rng_state(torch.frombuffer(bytearray(_unb64(state["torch_cpu"])), dtype=torch.uint8))
        if "torch_cuda" in state:
            saved = state["torch_cuda"]
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if n != len(saved):
                raise ValueError(f"the checkpoint holds the RNG states of {len(saved)} CUDA device(s), this machine "
                                 f"has {n}: an exact resume needs the same devices (or start over)")
            torch.cuda.set_rng_state_all(
                [torch.frombuffer(bytearray(_unb64(s)), dtype=torch.uint8) for s in saved])


def trim_jsonl(path: str | Path, keep: Callable[[dict[str, Any]], bool] | int, *, key: str = "step") -> int:
    """Cut a per-step JSONL log back to what a checkpoint covers, before a resumed run appends to it.

    A run killed after logging step 7 but before checkpointing step 7 resumes from step 6 and logs step 7
    again; without trimming the log holds it twice. Also drops a torn last line.

    Args:
        path: the log (nothing happens if it does not exist).
        keep: a predicate over records, or an int ``s``: keep records whose ``key`` is ``<= s``.
        key: the record field compared with an int ``keep``.

    Returns:
        the number of records kept. The file is rewritten atomically.
    """
    path = Path(path)
    if not path.exists():
        return 0
    if isinstance(keep, bool) or not (isinstance(keep, int) or callable(keep)):
        raise TypeError(f"keep must be a step number or a predicate, got {keep!r}")
    if isinstance(keep, int):
        limit = keep

        def pred(rec: dict[str, Any]) -> bool:
            return rec.get(key) is not None and rec[key] <= limit
    else:
        pred = keep
    kept: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                break  # a torn last line of a killed run; nothing after it was written whole
            if pred(rec):
                kept.append(line if line.endswith("\n") else line + "\n")
    atomic_write_text(path, "".join(kept))
    return len(kept)
