"""Read-outs of the reproduction that are not downstream tasks: the VGA masked-type CE with paired /
shuffled / zero text, masked-gate reconstruction through each model's own masking (the latent-masking
mechanism), circuit-level equivalence by cosine of pooled embeddings, and a strict-JSON helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .downstream import embed_graphs, equivalence_scores, roc_auc
from .graph import mask_nodes, mask_nodes_batched
from .model import MGVGAPretrainer

__all__ = ["vga_ce", "masked_reconstruction_accuracy", "circuit_equivalence", "jsonable"]


@torch.no_grad()
def vga_ce(model: MGVGAPretrainer, graphs, text: torch.Tensor, seed: int = 0, batch_size: int = 8) -> float:
    """Masked-type CE of the VGA branch averaged over masked nodes, fixed masks (``seed``)."""
    from torch_geometric.data import Batch

    model.eval()
    gen = torch.Generator().manual_seed(seed)
    tot, cnt = 0.0, 0
    for i in range(0, len(graphs), batch_size):
        b = Batch.from_data_list(graphs[i : i + batch_size])
        m = mask_nodes_batched(b.batch, model.cfg.vga_mask_ratio, gen)
        out = model.vga_branch(b, m, text[i : i + batch_size])
        k = int(m.sum())
        tot += float(out["vga_type_ce"]) * k
        cnt += k
    if cnt == 0:
        raise ValueError("vga_ce: no masked node in the evaluation graphs")
    return tot / cnt


@torch.no_grad()
def masked_reconstruction_accuracy(model: MGVGAPretrainer, designs, *, input_masking: bool, seed: int = 0) -> float:
    """Mechanism read-out: accuracy of the model's *own* MGM decoder and type head at the masked gates of
    held-out designs, under its own masking (``input_masking=False``: MGM, the encoder sees the intact circuit and
    the mask is applied to its output; ``True``: the GraphMAE-style baseline, mask token in the input).

    Every call draws the same masks (``seed``): ⌊r_MGM·N⌋ nodes per design. The masked node's own latent is
    replaced by the mask token in both cases (the baseline's default re-masking), so its type must come from the neighbours through the decoder — a
    random-init model scores near the majority class; only training can make use of what the intact encoding
    keeps. Returns the fraction of masked nodes whose type is predicted correctly (pooled over designs).
    """
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    hit = tot = 0
    for d in designs:
        g = d.graph
        m = mask_nodes(g.num_nodes, model.cfg.mgm_mask_ratio, gen)
        h0 = model.encoder.embed_tokens(g.x)
        if input_masking:
            h0 = torch.where(m[:, None], model.vga_mask.expand_as(h0), h0)
        x = model.encoder.encode(h0, g.edge_index)
        if not input_masking or model.cfg.graphmae_remask:  # as the model's own MGM branch does
            x = torch.where(m[:, None], model.mgm_mask.expand_as(x), x)
        logits = model.mgm_type_head(model.mgm_decoder(x, g.edge_index))
        hit += int((logits[m].argmax(-1) == g.x[m]).sum())
        tot += int(m.sum())
    if tot == 0:
        raise ValueError("masked_reconstruction_accuracy: no masked node in the designs")
    return hit / tot


def circuit_equivalence(e, pairs, bases, gb, gv) -> dict:
    """Circuit-level equivalence: cosine of mean-pooled embeddings (recipe variants vs mutants and
    the other bases' variants)."""
    eb = dict(zip(bases, embed_graphs(e, [gb[b] for b in bases], batch_size=4)))
    ev = embed_graphs(e, gv, batch_size=4)
    y, sc, is_mut = [], [], []
    for p, v in zip(pairs, ev):
        y.append(p["equivalent"])
        sc.append(float(equivalence_scores(eb[str(p["base"])][None], v[None])[0]))
        is_mut.append(p["equivalent"] == 0)
    n_cross = 0
    for p, v in zip(pairs, ev):
        if p["equivalent"] != 1:
            continue
        for b in bases:
            if b != str(p["base"]):
                y.append(0)
                sc.append(float(equivalence_scores(eb[b][None], v[None])[0]))
                is_mut.append(False)
                n_cross += 1
    y, sc, is_mut = np.array(y), np.array(sc), np.array(is_mut)
    sel = (y == 1) | is_mut
    return {"auc": roc_auc(y, sc, what="circuit-level equivalence (all negatives)"),
            "auc_mutants": roc_auc(y[sel], sc[sel], what="circuit-level equivalence (mutant negatives)"),
            "n_cross_negatives": n_cross, "n_pos": int(y.sum()), "n_mutants": int(is_mut.sum())}


def jsonable(o):
    """Replace non-finite floats by ``None`` (JSON null) recursively."""
    if isinstance(o, dict):
        return {str(k): jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    if isinstance(o, (float, np.floating)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, Path):
        return str(o)
    return o
