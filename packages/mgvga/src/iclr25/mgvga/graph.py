"""AIG → PyG ``Data`` in the OpenABC-D / MGVGA convention (spec Sec. 1.2) and node masking.

Node classes: 0 PI, 1 PO, 2 AND, 3 NOT (one NOT node per inverted edge, no sharing). Edges point
from a consumer to each of its fanins (``direction="fanin"``, the official orientation); PyG's
default ``source_to_target`` flow then moves information from POs towards PIs. Node order:
PIs, ANDs, POs, NOTs, then (if referenced) one constant node typed as PI (``data.const_node``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch_geometric.data import Data

from .circuit import Circuit

__all__ = ["NODE_TYPES", "to_graph", "mask_nodes", "mask_nodes_batched", "Direction"]

NODE_TYPES = ("PI", "PO", "AND", "NOT")
Direction = Literal["fanin", "fanout", "bidirectional"]


def to_graph(c: Circuit, *, expand_not: bool = True, direction: Direction = "fanin") -> Data:
    """Convert a :class:`Circuit` to a torch-geometric ``Data``.

    Args:
        c: the circuit.
        expand_not: replace each inverted edge by a NOT node (paper/official); if False, keep
            3 node classes and put the inversion flag in ``edge_attr``.
        direction: ``"fanin"`` (consumer → fanin, official), ``"fanout"`` (signal flow) or
            ``"bidirectional"`` (both; ``edge_attr[:, 1]`` = 1 for the reversed copies).

    Returns:
        ``Data`` with ``x``: Long[N] node class; ``edge_index``: Long[2, E]; ``d_in`` / ``d_out``:
        Long[N] number of fanins / consumers (always counted in the fanin convention, the
        paper's D⁻ / D⁺); ``level``: Long[N] AIG level (NOT and PO nodes take their driver's);
        ``edge_attr``: Long[E, 2] (inverted, reversed); ``const_node``: index of the constant
        node or -1; ``num_pis/num_pos/num_ands``.
    """
    if direction not in ("fanin", "fanout", "bidirectional"):
        raise ValueError(f"direction must be 'fanin', 'fanout' or 'bidirectional', got {direction!r}")
    I, A, O = c.num_pis, c.num_ands, c.num_pos
    uses_const = c.constant_refs() > 0
    # node id of every variable: const -> last, PIs 0..I-1, ANDs I..I+A-1
    n_base = I + A + O
    var_node = np.empty(c.num_vars, dtype=np.int64)
    var_node[1:] = np.arange(I + A)
    # consumer list: ANDs (2 fanins each) then POs
    consumers = np.concatenate([np.repeat(I + np.arange(A), 2), I + A + np.arange(O)])
    lits = np.concatenate([c.ands.reshape(-1), c.pos])
    inv = (lits & 1).astype(bool)
    n_not = int(inv.sum()) if expand_not else 0
    const_node = n_base + n_not if uses_const else -1
    var_node[0] = const_node
    producers = var_node[lits >> 1]
    if expand_not:
        not_ids = n_base + np.arange(n_not)
        # consumer -> NOT, NOT -> producer for inverted; consumer -> producer otherwise
        src = np.concatenate([consumers[~inv], consumers[inv], not_ids])
        dst = np.concatenate([producers[~inv], not_ids, producers[inv]])
        inv_flag = np.zeros(src.shape[0], dtype=np.int64)
    else:
        src, dst = consumers, producers
        inv_flag = inv.astype(np.int64)
    n = n_base + n_not + int(uses_const)
    x = np.empty(n, dtype=np.int64)
    x[:I] = 0
    x[I : I + A] = 2
    x[I + A : n_base] = 1
    x[n_base : n_base + n_not] = 3
    if uses_const:
        x[const_node] = 0
    d_in = np.bincount(src, minlength=n)
    d_out = np.bincount(dst, minlength=n)
    vlev = c.var_levels()
    level = np.zeros(n, dtype=np.int64)
    level[: I + A] = vlev[1:]
    level[I + A : n_base] = vlev[c.pos >> 1]
    if expand_not:
        level[n_base : n_base + n_not] = vlev[lits[inv] >> 1]
    ei = np.stack([src, dst])
    rev = np.zeros(ei.shape[1], dtype=np.int64)
    if direction == "fanout":
        ei = ei[::-1].copy()
    elif direction == "bidirectional":
        ei = np.concatenate([ei, ei[::-1]], axis=1)
        rev = np.concatenate([rev, np.ones_like(rev)])
        inv_flag = np.concatenate([inv_flag, inv_flag])
    return Data(
        x=torch.from_numpy(x),
        edge_index=torch.from_numpy(np.ascontiguousarray(ei)),
        edge_attr=torch.from_numpy(np.stack([inv_flag, rev], 1)),
        d_in=torch.from_numpy(d_in),
        d_out=torch.from_numpy(d_out),
        level=torch.from_numpy(level),
        const_node=torch.tensor([const_node]),
        num_pis=torch.tensor([I]),
        num_pos=torch.tensor([O]),
        num_ands=torch.tensor([A]),
        num_nodes=n,
    )


def mask_nodes(num_nodes: int, ratio: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniformly random node mask with exactly ``floor(ratio * num_nodes)`` True entries (Bool[N]).

    Raises:
        ValueError: ``ratio`` outside [0, 1].
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"mask ratio must be in [0, 1], got {ratio}")
    k = int(np.floor(ratio * num_nodes + 1e-9))
    perm = torch.randperm(num_nodes, generator=generator)
    m = torch.zeros(num_nodes, dtype=torch.bool)
    m[perm[:k]] = True
    return m


def mask_nodes_batched(batch: torch.Tensor, ratio: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-graph masks for a PyG batch vector: graph g gets exactly ``floor(ratio * n_g)`` masked
    nodes, chosen uniformly (vectorised: random keys ranked within each graph).

    Args:
        batch: Long[N] graph index of every node (sorted, as PyG produces it).

    Returns:
        Bool[N].
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"mask ratio must be in [0, 1], got {ratio}")
    n = batch.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.bool)
    counts = torch.bincount(batch)
    k = torch.floor(ratio * counts.double() + 1e-9).long()
    keys = torch.rand(n, generator=generator, dtype=torch.float64) + batch.double() * 2.0
    order = torch.argsort(keys)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.long)
    rank[order] = torch.arange(n) - starts[batch[order]]
    return rank < k[batch]
