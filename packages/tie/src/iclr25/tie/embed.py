"""``embed``: images + prompts → an :class:`~iclr25.tie.embeddings.EmbeddingSet` npz, in resumable shards.

Rows are cut into shards of ``shard_size`` images; each shard is written atomically to
``<out>/shards/shard_<j>.npy`` and skipped on a rerun. ``--shard k/n`` lets ``n`` processes (e.g. one
per GPU) share the work (process ``k`` takes shards ``k, k+n, …``); the process that finds every shard
present writes ``<out>/embeddings.npz``. A ``manifest.json`` (encoder, image list hash) guards against
mixing shards of different runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .embeddings import EmbeddingSet, PromptSet, check_prompt_mapping

__all__ = ["embed_rows", "build_embedding_set"]

log = logging.getLogger("iclr25.tie")


def embed_rows(n_rows: int, encode: Callable[[np.ndarray], np.ndarray], out_dir: Path, *, fingerprint: str,
               shard_size: int = 4096, shard: tuple[int, int] = (0, 1), quiet: bool = False) -> np.ndarray | None:
    """Embed rows ``0 .. n_rows-1`` shard by shard (``encode(indices) -> [len, D]``).

    Returns:
        The ``[n_rows, D]`` float32 matrix when every shard is present, else ``None`` (other
        processes still have shards to do).

    Raises:
        ValueError: ``out_dir`` holds shards of another run (different fingerprint).
    """
    from iclr25.core.progress import progress

    sd = Path(out_dir) / "shards"
    sd.mkdir(parents=True, exist_ok=True)
    man = Path(out_dir) / "manifest.json"
    info = {"fingerprint": fingerprint, "n_rows": n_rows, "shard_size": shard_size}
    if man.is_file():
        old = json.loads(man.read_text())
        if old != info:
            raise ValueError(f"embed: {out_dir} holds shards of another run ({old} vs {info}); use a new --out")
    else:
        man.write_text(json.dumps(info, indent=1))
    n_shards = (n_rows + shard_size - 1) // shard_size
    k, n = shard
    mine = [j for j in range(n_shards) if j % n == k]
    todo = [j for j in mine if not (sd / f"shard_{j:05d}.npy").is_file()]
    if len(todo) < len(mine):
        log.info("embed: %d of my %d shard(s) already done, resuming", len(mine) - len(todo), len(mine))
    for j in progress(todo, desc="embed shards", unit="shard", quiet=True if quiet else None):
        idx = np.arange(j * shard_size, min((j + 1) * shard_size, n_rows))
        emb = np.asarray(encode(idx), dtype=np.float32)
        if emb.shape[0] != idx.size:
            raise RuntimeError(f"encoder returned {emb.shape[0]} rows for {idx.size} images")
        tmp = sd / f"shard_{j:05d}.tmp.npy"
        np.save(tmp, emb)
        tmp.replace(sd / f"shard_{j:05d}.npy")
    files = [sd / f"shard_{j:05d}.npy" for j in range(n_shards)]
    if not all(f.is_file() for f in files):
        return None
    return np.concatenate([np.load(f) for f in files])


def fingerprint(encoder_name: str, items: Sequence[Any]) -> str:
    h = hashlib.sha256(encoder_name.encode())
    for it in items:
        h.update(str(it).encode())
        h.update(b"\0")
    return h.hexdigest()


def check_labels_and_prompts(y: np.ndarray, a: np.ndarray, split: np.ndarray, prompts: PromptSet, *,
                             untranslated: str = "error") -> list[Any]:
    """Check the images' labels against the prompts before anything is embedded: ``y [N]`` in
    ``0 .. C-1`` (one class prompt per label), ``split [N]`` in {0, 1, 2}, and the
    ``{attribute_value: prompt}`` mapping against the values of ``a [N]``.

    Returns:
        The normalised attribute values that have a prompt (mapping order).

    Raises:
        ValueError: a class label without a prompt or negative, an unknown split code, and the
            checks of :func:`~iclr25.tie.embeddings.check_prompt_mapping`.
    """
    from .embeddings import _key

    y = np.asarray(y)
    if y.size and (int(np.max(y)) >= len(prompts.class_prompts) or int(np.min(y)) < 0):
        raise ValueError(f"prompts: {len(prompts.class_prompts)} class prompts, so labels y must lie in "
                         f"0..{len(prompts.class_prompts) - 1}; they range over [{int(np.min(y))}, {int(np.max(y))}]")
    sp = np.asarray(split)
    if not np.isin(sp, (0, 1, 2)).all():
        raise ValueError(f"split must hold 0 (train/pool), 1 (val) or 2 (test), got values {np.unique(sp)[:10].tolist()}")
    present = sorted({_key(v) for v in np.unique(a).tolist()}, key=str)
    keys = [_key(k) for k in prompts.spurious_prompts]
    check_prompt_mapping(present, keys, untranslated=untranslated, where="the images' attribute labels")
    return keys


def build_embedding_set(image_emb: np.ndarray, y: np.ndarray, a: np.ndarray, split: np.ndarray, prompts: PromptSet,
                        encode_text: Callable[[list[str]], np.ndarray], *, untranslated: str = "error",
                        class_names: Sequence[str] | None = None, extra: dict | None = None) -> EmbeddingSet:
    """Encode the class prompts and the ``{attribute_value: prompt}`` mapping, check the mapping
    against ``a``, and assemble the :class:`EmbeddingSet`.

    Raises:
        ValueError: a class label without a prompt, and the prompt-mapping checks.
    """
    from .embeddings import _key

    keys = check_labels_and_prompts(y, a, split, prompts, untranslated=untranslated)
    order = sorted(keys, key=str)
    by_key = {_key(k): v for k, v in prompts.spurious_prompts.items()}
    T = encode_text(list(prompts.class_prompts))
    S = encode_text([by_key[k] for k in order])
    values = np.array(order) if all(isinstance(k, int) for k in order) else np.array([str(k) for k in order])
    es = EmbeddingSet(image_emb=image_emb, y=np.asarray(y, np.int64), split=np.asarray(split, np.int64),
                      text_emb_class=T, text_emb_spurious=S, attribute_values=values, a=np.asarray(a),
                      class_names=None if class_names is None else np.asarray(class_names, dtype=str),
                      extra=extra or {})
    es.validate(untranslated=untranslated)
    return es
