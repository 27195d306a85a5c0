"""Safe files: tensors in safetensors (with JSON metadata) or ``torch.load(weights_only=True)``.

Nothing in this package writes or reads a pickle of arbitrary objects: graph datasets
(:func:`save_graphs`), embeddings (:func:`save_embeddings`) and encoders (:func:`save_encoder`)
are safetensors files whose metadata is JSON; training checkpoints (resume state: optimiser,
schedule, RNG) are ``torch.save`` files of tensors and plain containers only, read back with
``weights_only=True`` (:func:`safe_torch_load`), so a crafted pickle is refused, not run.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "safe_torch_load",
    "save_graphs",
    "load_graphs",
    "save_embeddings",
    "load_embeddings",
    "read_safetensors",
    "GRAPH_FORMAT",
    "EMBEDDING_FORMAT",
]

GRAPH_FORMAT = "iclr25-mgvga-graphs/1"
EMBEDDING_FORMAT = "iclr25-mgvga-embeddings/1"
_GRAPH_TENSORS = ("x", "edge_index", "edge_attr", "d_in", "d_out", "level", "const_node", "num_pis", "num_pos",
                  "num_ands")


def safe_torch_load(path: str | Path) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True)`` with clean errors.

    Raises:
        FileNotFoundError: missing file.
        ValueError: the file holds objects other than tensors and plain containers (a pickle that
            ``weights_only=True`` refuses — it is not executed), or it is corrupt / truncated / not
            a torch file; the message names the file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        with open(p, "rb") as f:
            head = f.read(1)
        if not zipfile.is_zipfile(p) and head != b"\x80":  # neither torch's zip format nor a pickle: random bytes
            raise ValueError(f"{p} is not a readable checkpoint (corrupt, truncated or not a torch file): "
                             "neither a torch zip file nor a pickle") from None
        msg = str(e)
        detail = msg.split("WeightsUnpickler error:", 1)[1] if "WeightsUnpickler error:" in msg else msg
        first = detail.strip().splitlines()[0] if detail.strip() else type(e).__name__
        raise ValueError(f"{p}: refused to load — it holds objects other than tensors and plain containers "
                         f"(torch.load weights_only=True: {first[:200]}). iclr25-mgvga never writes such files; "
                         "do not load untrusted pickles") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, UnicodeDecodeError, AttributeError) as e:
        raise ValueError(f"{p} is not a readable checkpoint (corrupt, truncated or not a torch file): "
                         f"{type(e).__name__}: {str(e)[:200]}") from None


def read_safetensors(path: str | Path, expected_format: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors and JSON-decoded metadata of a safetensors file written by this package.

    Raises:
        FileNotFoundError: missing file. ValueError: unreadable file or a different ``format``.
    """
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist")
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{p} is not a readable safetensors file (corrupt or truncated?): {str(e)[:200]}") from None
    if meta.get("format") != expected_format:
        raise ValueError(f"{p}: format {meta.get('format')!r}, expected {expected_format!r}")
    try:
        decoded = {k: (json.loads(v) if k != "format" else v) for k, v in meta.items()}
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: metadata is not JSON ({e})") from None
    return tensors, decoded


def _write_safetensors(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any], fmt: str) -> Path:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    md = {"format": fmt, **{k: json.dumps(v) for k, v in meta.items()}}
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=md)
    tmp.replace(path)
    return path


def save_graphs(path: str | Path, graphs: Sequence, names: Sequence[str] | None = None,
                stats: Sequence[dict] | None = None) -> Path:
    """Write PyG ``Data`` from :func:`~iclr25.mgvga.graph.to_graph` as one safetensors file
    (keys ``"<i>/<field>"``; metadata: names, node counts, optional per-graph stats).

    Returns:
        the path written.
    """
    tensors: dict[str, torch.Tensor] = {}
    for i, g in enumerate(graphs):
        for k in _GRAPH_TENSORS:
            v = getattr(g, k, None)
            if v is not None:
                tensors[f"{i}/{k}"] = v
    meta = {"names": list(names) if names is not None else [f"graph{i}" for i in range(len(graphs))],
            "num_nodes": [int(g.num_nodes) for g in graphs], "stats": list(stats) if stats is not None else None}
    return _write_safetensors(Path(path), tensors, meta, GRAPH_FORMAT)


def load_graphs(path: str | Path) -> list:
    """Read :func:`save_graphs` output back into a list of PyG ``Data`` (``.name`` set)."""
    from torch_geometric.data import Data

    tensors, meta = read_safetensors(path, GRAPH_FORMAT)
    out = []
    for i, (name, n) in enumerate(zip(meta["names"], meta["num_nodes"])):
        fields = {k: tensors[f"{i}/{k}"] for k in _GRAPH_TENSORS if f"{i}/{k}" in tensors}
        g = Data(**fields, num_nodes=int(n))
        g.name = name
        out.append(g)
    return out


def save_embeddings(path: str | Path, emb: dict[str, dict[str, torch.Tensor]], meta: dict | None = None) -> Path:
    """Write ``{name: {"graph": Float[d], "nodes": Float[N, d]}}`` as safetensors (keys
    ``"<i>/graph"``, ``"<i>/nodes"``; the names in the metadata)."""
    names = list(emb)
    tensors = {f"{i}/{k}": v for i, n in enumerate(names) for k, v in emb[n].items()}
    return _write_safetensors(Path(path), tensors, {"names": names, **(meta or {})}, EMBEDDING_FORMAT)


def load_embeddings(path: str | Path) -> dict[str, dict[str, torch.Tensor]]:
    """Inverse of :func:`save_embeddings`."""
    tensors, meta = read_safetensors(path, EMBEDDING_FORMAT)
    return {n: {k.split("/", 1)[1]: v for k, v in tensors.items() if k.split("/", 1)[0] == str(i)}
            for i, n in enumerate(meta["names"])}
