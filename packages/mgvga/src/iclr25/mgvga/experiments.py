"""The reproduction's experiments as runner jobs (:mod:`iclr25.core.runner`): ``fn(settings, seed, deps) -> record``.

* :func:`prep_job` — the fixed baselines (hand features, recipe only, the gate-level hand-feature head) and the
  SAT-labelled gate pairs, once per run;
* :func:`pretrain_job` — one objective (MGM, GraphMAE-style, MGVGA) at one seed; the checkpoint lands in the
  run folder (``ckpt_<objective>_seed<seed>.pt``; an interrupted job continues from it under ``--resume``);
* :func:`probes_job` — every probe of one seed on the four encoders (the three pre-trained ones and a random
  init drawn with the same seed), paired on the same designs, recipes, folds and head seeds.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from .data import data_dir, equivalence_pairs, load_cached, openabcd_recipes, qor_labels, usable_qor_designs
from .downstream import embed_graphs, hand_features, qor_lodo, roc_auc
from .gates import (
    GatePairs,
    gate_design,
    gate_equivalence_auc,
    gate_equivalence_pairs,
    hand_node_features,
    logic_probability_probe,
    node_embeddings,
)
from .graph import to_graph
from .model import MGVGAConfig, MGVGAEncoder, MGVGAPretrainer
from .pools import ENCODERS, ReproSettings, build_pools, text_encoder
from .readouts import circuit_equivalence, jsonable, masked_reconstruction_accuracy, vga_ce

__all__ = ["OBJECTIVES", "prep_job", "pretrain_job", "probes_job", "settings_from", "model_config", "checkpoint_path"]

OBJECTIVES = ("mgm", "graphmae", "mgvga")


def settings_from(d: dict) -> ReproSettings:
    """:class:`ReproSettings` from a job's JSON settings (tuples restored)."""
    return ReproSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def model_config(s: ReproSettings, objective: str, text_dim: int = 384) -> MGVGAConfig:
    """The pre-training model of the reproduction's scale."""
    return MGVGAConfig(hidden_size=s.hidden_size, num_encoder_layers=s.num_encoder_layers,
                       num_heads=4 if s.hidden_size < 64 else 8, text_dim=text_dim, objective=objective,
                       direction=s.direction)


def checkpoint_path(out: str | Path, objective: str, seed: int) -> Path:
    return Path(out) / f"ckpt_{objective}_seed{seed}.pt"


def _qor(s: ReproSettings):
    labels = qor_labels()
    designs = usable_qor_designs(labels)[: s.qor_max_designs]
    circ = {k: load_cached(str(labels[k][0])) for k in designs}
    graphs = {k: to_graph(c, direction=s.direction) for k, c in circ.items()}
    kw = dict(seeds=s.qor_seeds, epochs=s.qor_epochs, max_recipes=s.qor_max_recipes, head=s.qor_head)
    return labels, designs, circ, graphs, openabcd_recipes(), kw


def _gate_designs(s: ReproSettings) -> dict:
    root = data_dir()
    return {n: gate_design(load_cached(str(root / "epfl" / f"{n}.aig")), n, words=s.gate_words, direction=s.direction)
            for n in s.gate_designs}


def prep_job(settings: dict, seed, deps: dict) -> dict:
    """Fixed baselines, SAT-labelled gate pairs and the pools' bookkeeping (once per run)."""
    s = settings_from(settings["repro"])
    labels, designs, circ, graphs, recipes, kw = _qor(s)
    hand = {k: hand_features(circ[k], graphs[k]) for k in designs}
    out: dict = {"qor_fixed": {"hand_features": qor_lodo(hand, labels, recipes, designs, **kw),
                               "recipe_only": qor_lodo(hand, labels, recipes, designs, use_graph=False, **kw)}}
    gdes = _gate_designs(s)
    root = data_dir()
    out["gate_pairs"] = []
    for n in s.gate_designs:
        for k in s.gate_variants:
            vc = load_cached(str(root / "equiv" / f"epfl_{n}__r{k}.aig"))
            gp = gate_equivalence_pairs(gdes[n].circuit, vc, words=s.gate_eq_words, seed=k, max_pairs=s.gate_max_pairs)
            out["gate_pairs"].append({"design": n, "variant": k, "u": gp.u.tolist(), "v": gp.v.tolist(),
                                      "y": gp.y.tolist(), "counts": gp.counts})
    out["gate_hand"] = logic_probability_probe({n: hand_node_features(d) for n, d in gdes.items()}, gdes,
                                               n_folds=s.gate_folds, seeds=s.gate_head_seeds, epochs=s.gate_epochs,
                                               max_gates=s.gate_max_gates)
    mgm, vga, _, ev, _, info = build_pools(s, s.direction)
    if not ev:
        raise ValueError("no held-out VGA evaluation pair is left (all too big or structurally seen)")
    out["pool"] = {**info, "n_mgm": len(mgm), "n_vga": len(vga), "n_eval": len(ev)}
    return jsonable(out)


def pretrain_job(settings: dict, seed: int, deps: dict) -> dict:
    """Pre-train one objective at one seed (checkpoint in the run folder); returns its loss history."""
    from .pretrain import pretrain

    s = settings_from(settings["repro"])
    mgm, vga, texts, _, _, _ = build_pools(s, s.direction)
    emb = torch.as_tensor(text_encoder().encode(texts))
    torch.manual_seed(seed)
    model = MGVGAPretrainer(model_config(s, settings["objective"], emb.shape[1]))
    ck = Path(settings["checkpoint"])
    hist = pretrain(model, mgm, vga, emb, steps=s.steps, batch_size=s.batch_size, lr=s.lr, seed=seed, checkpoint=ck,
                    checkpoint_every=settings["checkpoint_every"], resume=ck.is_file(), progress=False,
                    device=settings["device"])
    return jsonable({"history": hist})


def _load(path: str | Path) -> MGVGAPretrainer:
    from .pretrain import load_checkpoint

    model, _ = load_checkpoint(path)
    return model.cpu().eval()


def probes_job(settings: dict, seed: int, deps: dict) -> dict:
    """Every probe of one seed on the four encoders (paired; see the module docstring)."""
    s = settings_from(settings["repro"])
    prep = deps["prep"]
    _, _, _, ev_graphs, ev_texts, _ = build_pools(s, s.direction)
    eval_emb = torch.as_tensor(text_encoder().encode(ev_texts))
    labels, designs, _, graphs, recipes, kw = _qor(s)
    pairs = equivalence_pairs()[: s.eq_max_pairs]
    bases = sorted({str(p["base"]) for p in pairs})
    gb = {b: to_graph(load_cached(b), direction=s.direction) for b in bases}
    gv = [to_graph(load_cached(str(p["variant"])), direction=s.direction) for p in pairs]
    gdes = _gate_designs(s)
    root = data_dir()
    gpairs = [(d["design"], d["variant"],
               to_graph(load_cached(str(root / "equiv" / f"epfl_{d['design']}__r{d['variant']}.aig")),
                        direction=s.direction),
               GatePairs(np.asarray(d["u"], np.int64), np.asarray(d["v"], np.int64), np.asarray(d["y"], np.int64),
                         d["counts"])) for d in prep["gate_pairs"]]
    names = sorted(gdes)
    models = {obj: _load(settings["checkpoints"][obj]) for obj in OBJECTIVES}
    torch.manual_seed(seed)
    encoders = {**{k: v.encoder for k, v in models.items()}, "scratch": MGVGAEncoder(model_config(s, "mgm")).eval()}
    torch.manual_seed(seed)
    scratch = MGVGAPretrainer(model_config(s, "mgm", eval_emb.shape[1])).eval()  # random init, same seed
    r: dict = {"seed": seed, "qor": {}, "eq": {}, "gate_lp": {}, "gate_eq": {}}
    for name in ENCODERS:
        e = encoders[name]
        emb = embed_graphs(e, [graphs[k] for k in designs], batch_size=2)
        r["qor"][name] = qor_lodo(dict(zip(designs, emb)), labels, recipes, designs, emb_dims=s.qor_emb_dims, **kw)
        r["eq"][name] = circuit_equivalence(e, pairs, bases, gb, gv)
        nemb = dict(zip(names, node_embeddings(e, [gdes[n].graph for n in names])))
        r["gate_lp"][name] = logic_probability_probe(nemb, gdes, n_folds=s.gate_folds, seeds=s.gate_head_seeds,
                                                     epochs=s.gate_epochs, max_gates=s.gate_max_gates)
        vemb = node_embeddings(e, [g for _, _, g, _ in gpairs])
        per, ys, scs = {}, [], []
        for (n, k, _, gp), evv in zip(gpairs, vemb):
            per[f"{n}/r{k}"] = gate_equivalence_auc(nemb[n], evv, gp, what=f"gate equivalence {n} vs r{k} ({name})")
            if gp.y.size:
                ys.append(gp.y)
                scs.append(torch.nn.functional.cosine_similarity(nemb[n][torch.from_numpy(gp.u)],
                                                                 evv[torch.from_numpy(gp.v)], dim=-1).numpy())
        pooled = roc_auc(np.concatenate(ys), np.concatenate(scs), what=f"gate equivalence pooled ({name})") \
            if ys else None
        defined = [v for v in per.values() if v is not None]
        r["gate_eq"][name] = {"auc_pooled": pooled, "auc_mean_per_design": float(np.mean(defined)) if defined
                              else None, "per_design": per}
    m = models["mgvga"]
    perm = torch.roll(torch.arange(len(ev_graphs)), 1)
    r["vga_ce"] = {"paired": vga_ce(m, ev_graphs, eval_emb), "shuffled": vga_ce(m, ev_graphs, eval_emb[perm]),
                   "zero": vga_ce(m, ev_graphs, torch.zeros_like(eval_emb))}
    held = [gdes[n] for n in names]
    r["mechanism"] = {
        "mgm": masked_reconstruction_accuracy(models["mgm"], held, input_masking=False, seed=seed),
        "graphmae": masked_reconstruction_accuracy(models["graphmae"], held, input_masking=True, seed=seed),
        "scratch_latent": masked_reconstruction_accuracy(scratch, held, input_masking=False, seed=seed),
        "scratch_input": masked_reconstruction_accuracy(scratch, held, input_masking=True, seed=seed),
        "majority": _majority(held, s, seed)}
    return jsonable(r)


def _majority(designs, s: ReproSettings, seed: int) -> float:
    """Accuracy of always predicting the most common type among the masked nodes (same masks as the read-out)."""
    from .graph import mask_nodes

    gen = torch.Generator().manual_seed(seed)
    ys = []
    for d in designs:
        m = mask_nodes(d.graph.num_nodes, MGVGAConfig().mgm_mask_ratio, gen)
        ys.append(d.graph.x[m].numpy())
    y = np.concatenate(ys)
    return float(np.bincount(y).max() / y.size)


def repro_settings_json(s: ReproSettings) -> dict:
    """JSON-ready settings of a :class:`ReproSettings` (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()}
