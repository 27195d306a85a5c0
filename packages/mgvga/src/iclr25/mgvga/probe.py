"""The ``probe`` command's protocol for one frozen encoder (the same probes ``reproduce`` runs)."""

from __future__ import annotations

import numpy as np
import torch

from .data import data_dir, equivalence_pairs, load_cached, openabcd_recipes, qor_labels, usable_qor_designs
from .downstream import embed_graphs, qor_lodo, roc_auc
from .gates import (
    gate_design,
    gate_equivalence_auc,
    gate_equivalence_pairs,
    hand_node_features,
    logic_probability_probe,
    node_embeddings,
)
from .graph import to_graph

__all__ = ["run_probes"]


def run_probes(enc, c) -> dict:
    """Run the probes named by ``c.task`` (a :class:`~iclr25.mgvga.config.ProbeConfig`) on ``enc``.

    Returns:
        a JSON-ready dict; undefined metrics are ``None`` (with a warning naming the design).
    """
    from .readouts import circuit_equivalence as _equivalence
    from .readouts import jsonable as _jsonable

    dr = enc.cfg.direction
    res: dict = {}
    if c.task in ("qor", "all"):
        labels = qor_labels()
        designs = usable_qor_designs(labels)
        emb = embed_graphs(enc, [to_graph(load_cached(str(labels[d][0])), direction=dr) for d in designs],
                           batch_size=2)
        res["qor"] = qor_lodo(dict(zip(designs, emb)), labels, openabcd_recipes(), designs, seeds=c.seeds,
                              epochs=c.epochs, max_recipes=c.max_recipes, head=c.head, emb_dims=c.emb_dims)
    if c.task in ("equivalence", "all"):
        pairs = equivalence_pairs()
        bases = sorted({str(p["base"]) for p in pairs})
        gb = {b: to_graph(load_cached(b), direction=dr) for b in bases}
        gv = [to_graph(load_cached(str(p["variant"])), direction=dr) for p in pairs]
        res["equivalence"] = _equivalence(enc, pairs, bases, gb, gv)
    if c.task in ("gates", "all"):
        root = data_dir()
        gdes = {n: gate_design(load_cached(str(root / "epfl" / f"{n}.aig")), n, direction=dr) for n in c.gate_designs}
        names = sorted(gdes)
        nemb = dict(zip(names, node_embeddings(enc, [gdes[n].graph for n in names])))
        folds = min(4, len(names))
        lp = logic_probability_probe(nemb, gdes, n_folds=folds, seeds=c.seeds)
        hand = logic_probability_probe({n: hand_node_features(d) for n, d in gdes.items()}, gdes, n_folds=folds,
                                       seeds=c.seeds)
        per, ys, scs = {}, [], []
        for n in names:
            vc = load_cached(str(root / "equiv" / f"epfl_{n}__r0.aig"))
            gp = gate_equivalence_pairs(gdes[n].circuit, vc)
            ev = node_embeddings(enc, [to_graph(vc, direction=dr)])[0]
            per[n] = {"auc": gate_equivalence_auc(nemb[n], ev, gp, what=f"gate equivalence {n} vs r0"), **gp.counts}
            if gp.y.size:
                ys.append(gp.y)
                scs.append(torch.nn.functional.cosine_similarity(nemb[n][torch.from_numpy(gp.u)],
                                                                 ev[torch.from_numpy(gp.v)], dim=-1).numpy())
        pooled = roc_auc(np.concatenate(ys), np.concatenate(scs), what="gate equivalence pooled") if ys else None
        res["gates"] = {"logic_probability_mae": lp["mae"], "logic_probability_mae_hand_features": hand["mae"],
                        "logic_probability_per_design": lp["per_design"], "equivalence_auc_pooled": pooled,
                        "equivalence_per_design": per}
    return _jsonable(res)
