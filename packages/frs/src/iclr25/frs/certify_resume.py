"""``certify --resume``: which settings a certificate depends on, the content digests of the model and the
data, and the check that a resumed run continues certificates of the same settings (or is refused).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["RESUMABLE", "CONTENT_KEYS", "certify_settings", "model_fingerprint", "resume_certificates"]


#: certify flags that may change between a run and its --resume (they do not change a certificate)
RESUMABLE = {"out", "device", "threads", "quiet", "resume", "chunk", "n"}
#: content digests in certify_settings.json (absent from runs written before they were added)
CONTENT_KEYS = {"model_fingerprint", "data_sha256"}


def certify_settings(cfg) -> dict:
    """The settings a certificate depends on (all flags but those in ``RESUMABLE``), JSON-ready."""
    from dataclasses import fields

    def js(v):
        return list(v) if isinstance(v, tuple) else (str(v) if isinstance(v, Path) else v)

    return {f.name: js(getattr(cfg, f.name)) for f in fields(cfg) if f.name not in RESUMABLE}


def model_fingerprint(spec: str) -> str:
    """A digest of a model folder's files (names, sizes, and their first and last MiB), so that a model
    retrained into the same folder is not taken for the one the certificates came from; a hub id or
    ``minilm`` is its own fingerprint."""
    import hashlib

    p = Path(spec)
    if not p.is_dir():
        return spec
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        size = f.stat().st_size
        h.update(f"{f.relative_to(p).as_posix()}\x1f{size}\n".encode())
        with f.open("rb") as fh:
            h.update(fh.read(1 << 20))
            if size > 2 << 20:
                fh.seek(-(1 << 20), 2)
                h.update(fh.read())
    return h.hexdigest()


def resume_certificates(path: Path, spath: Path, settings: dict, resume: bool) -> set[int]:
    """The indices already certified in ``path`` (a certificates JSONL) that a ``--resume`` run keeps.

    Args:
        path: this process's certificates file.
        spath: ``certify_settings.json`` next to it (the settings of its certificates).
        settings: this run's :func:`certify_settings` plus the content digests.
        resume: ``--resume`` was given.

    Returns:
        The indices of the kept certificates (empty when ``path`` does not exist). A line torn by a crash is
        dropped and the file rewritten without it.

    Raises:
        ValueError: ``path`` exists without ``resume``; ``resume`` with a missing settings file; settings that
            differ from those of the kept certificates (naming each difference).
    """
    from iclr25.core.jsonl import read_jsonl, write_jsonl

    if not path.is_file():
        return set()
    if not resume:
        raise ValueError(f"{path} exists; pass --resume to continue it or choose another --out")
    if not spath.is_file():  # written before the first certificate: without it the settings cannot be checked
        raise ValueError(f"--resume: {spath} is missing, so the settings of the certificates in {path} cannot be "
                         "checked; resuming could mix certificates of two settings (use another --out)")
    try:
        old = json.loads(spath.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:  # was a bare JSON message that named no file
        raise ValueError(f"--resume: {spath} is unreadable ({e}); the settings of the certificates in {path} "
                         "cannot be checked (use another --out)") from None
    if not isinstance(old, dict):
        raise ValueError(f"--resume: {spath} holds a JSON {type(old).__name__}, not the settings object; the "
                         f"settings of the certificates in {path} cannot be checked (use another --out)")
    diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k)
                  and not (k in CONTENT_KEYS and k not in old))  # runs written before the digests
    if diff:
        raise ValueError("--resume: the settings differ from those of the certificates in "
                         f"{path}: " + ", ".join(f"{k} (was {old.get(k)!r}, now {settings.get(k)!r})" for k in diff)
                         + "; resuming would mix certificates of two settings (only --n, --chunk, "
                         "--device, --threads, --quiet may change; use another --out)")
    kept = read_jsonl(path, required=("index",), torn_tail="drop")
    if len(kept) != sum(1 for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()):
        # a line torn by a crash: rewrite the file without it, or the appended records would leave it
        # in the middle of the file, where it is an error
        write_jsonl(path, kept)
    return {int(r["index"]) for r in kept}
