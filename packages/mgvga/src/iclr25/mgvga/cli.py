"""``iclr25-mgvga`` command line: convert, pretrain, probe, embed, bench, reproduce."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import Command, run_cli

from ._version import __version__

__all__ = ["main"]

log = logging.getLogger("iclr25.mgvga")


@dataclass
class ConvertConfig:
    """Convert circuit files (.aig/.aag/.bench/.blif/.v) into a PyG dataset file (list of Data)."""

    inputs: tuple[Path, ...] = ()
    """circuit files to convert."""
    out: Path = Path("circuits.pt")
    """output file (torch.save of a list of torch_geometric Data)."""
    direction: Literal["fanin", "fanout", "bidirectional"] = "fanin"
    """edge orientation (official: fanin = consumer -> fanin)."""
    expand_not: bool = True
    """one NOT node per inverted edge (official)."""


def convert_cmd(c: ConvertConfig) -> int:
    import torch

    from .circuit import load_circuit
    from .graph import to_graph

    if not c.inputs:
        raise ValueError("give at least one circuit file with --inputs FILE ...")
    data = []
    for p in c.inputs:
        circ = load_circuit(p)
        g = to_graph(circ, expand_not=c.expand_not, direction=c.direction)
        g.name = circ.name
        data.append(g)
        print(json.dumps({"file": str(p), **circ.stats(), "nodes": g.num_nodes, "edges": int(g.edge_index.shape[1])}))
    c.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, c.out)
    print(f"wrote {len(data)} graphs to {c.out}")
    return 0


@dataclass
class PretrainConfig:
    """Pre-train an encoder with MGVGA, MGM, VGA or the GraphMAE-style baseline."""

    objective: Literal["mgvga", "mgm", "vga", "graphmae"] = "mgvga"
    """loss to optimise (paper: mgvga)."""
    out: Path = Path("runs/mgvga")
    """output folder: checkpoint.pt, history json."""
    circuits: tuple[Path, ...] = ()
    """extra circuit files for the MGM pool (default: the mirrored real circuits + synthetic)."""
    n_synthetic: int = 200
    """synthetic template RTL <-> AIG pairs for VGA (and MGM)."""
    synth_max_width: int = 6
    """largest operand width of the synthetic pairs."""
    max_nodes: int = 1500
    """drop graphs with more nodes (after NOT expansion)."""
    hidden_size: int = 64
    """d (paper: 64)."""
    num_encoder_layers: int = 7
    """encoder blocks (paper: 7)."""
    mgm_mask_ratio: float = 0.3
    """r_MGM (paper: 0.3)."""
    vga_mask_ratio: float = 0.7
    """r_VGA (script: 0.7)."""
    steps: int = 200
    """optimiser steps."""
    batch_size: int = 4
    """graphs (and graph-text pairs) per step (official: 512 via accumulation)."""
    lr: float = 1e-3
    """AdamW learning rate (paper: 1e-3, cosine to 0.1x)."""
    seed: int = 42
    """seed (paper: 42)."""
    resume: bool = False
    """continue from OUT/checkpoint.pt."""
    checkpoint_every: int = 50
    """steps between checkpoints."""
    text_cache: Path | None = None
    """folder for cached text embeddings (default: ~/.cache/iclr25/mgvga-text)."""
    use_mirror: bool = True
    """add the mirrored real circuits and RTL pairs ($ICLR25_DATA/mgvga) to the pools."""
    text_model: str = "minilm"
    """'minilm' (all-MiniLM-L6-v2, offline) or a Hugging Face model id / local path (e.g.
    Alibaba-NLP/gte-Qwen2-7B-instruct, 3584-d, the paper's encoder)."""
    device: str = "cpu"
    """device for the text encoder."""


def pretrain_cmd(c: PretrainConfig) -> int:
    import torch

    from .circuit import load_circuit
    from .graph import to_graph
    from .model import MGVGAConfig, MGVGAPretrainer
    from .pretrain import pretrain
    from .reproduce import ReproSettings, build_pools, text_encoder

    s = ReproSettings(n_synthetic=c.n_synthetic, synth_widths=(2, c.synth_max_width), max_nodes=c.max_nodes,
                      n_eval_pairs=1, seed=c.seed)
    try:
        if not c.use_mirror:
            raise FileNotFoundError("--no-use-mirror given")
        mgm, vga, texts, _, _ = build_pools(s)
    except FileNotFoundError as e:
        log.warning("%s — using synthetic pairs and --circuits only", e)
        from .synth import synthetic_pairs
        from .text import compact_verilog

        pairs = synthetic_pairs(c.n_synthetic, widths=(2, c.synth_max_width), seed=c.seed)
        vga = [to_graph(p.circuit) for p in pairs]
        texts = [compact_verilog(p.verilog) for p in pairs]
        mgm = list(vga)
    mgm += [to_graph(load_circuit(p)) for p in c.circuits]
    emb = None
    if c.objective in ("mgvga", "vga"):
        if c.text_model == "minilm":
            tenc = text_encoder(c.text_cache)
        else:
            from iclr25.core.data import cache_dir

            from .text import CachedTextEncoder, HFEmbeddingEncoder

            tenc = CachedTextEncoder(lambda: HFEmbeddingEncoder(c.text_model, device=c.device),
                                     c.text_cache or cache_dir() / "mgvga-text", c.text_model)
        emb = torch.as_tensor(tenc.encode(texts))
    cfg = MGVGAConfig(hidden_size=c.hidden_size, num_encoder_layers=c.num_encoder_layers,
                      num_heads=8 if c.hidden_size % 8 == 0 else 4, text_dim=384 if emb is None else emb.shape[1],
                      mgm_mask_ratio=c.mgm_mask_ratio, vga_mask_ratio=c.vga_mask_ratio, objective=c.objective)
    torch.manual_seed(c.seed)
    model = MGVGAPretrainer(cfg)
    c.out.mkdir(parents=True, exist_ok=True)
    hist = pretrain(model, mgm, vga, emb, steps=c.steps, batch_size=c.batch_size, lr=c.lr, seed=c.seed,
                    checkpoint=c.out / "checkpoint.pt", checkpoint_every=c.checkpoint_every, resume=c.resume)
    print(json.dumps(hist[-1] if hist else {}, indent=1))
    print(f"checkpoint: {c.out / 'checkpoint.pt'}")
    return 0


@dataclass
class EmbedConfig:
    """Embed circuits with a pre-trained (or random) encoder; writes node and graph embeddings."""

    inputs: tuple[Path, ...] = ()
    """circuit files."""
    checkpoint: Path | None = None
    """checkpoint from 'pretrain' (None: random-init encoder, for smoke tests)."""
    out: Path = Path("embeddings.pt")
    """torch.save of {name: {"graph": Float[d], "nodes": Float[N, d]}}."""


def embed_cmd(c: EmbedConfig) -> int:
    import torch

    from .circuit import load_circuit
    from .graph import to_graph
    from .model import MGVGAConfig, MGVGAEncoder
    from .pretrain import load_encoder

    if not c.inputs:
        raise ValueError("give at least one circuit file with --inputs FILE ...")
    enc = load_encoder(c.checkpoint) if c.checkpoint else MGVGAEncoder(MGVGAConfig()).eval()
    res = {}
    with torch.no_grad():
        for p in c.inputs:
            circ = load_circuit(p)
            g = to_graph(circ, direction=enc.cfg.direction)
            h = enc(g.x, g.edge_index)
            res[circ.name] = {"graph": h.mean(0), "nodes": h}
            print(json.dumps({"file": str(p), "nodes": int(h.shape[0]), "dim": int(h.shape[1])}))
    torch.save(res, c.out)
    print(f"wrote {c.out}")
    return 0


@dataclass
class ProbeConfig:
    """Frozen-encoder probes: QoR leave-one-design-out and equivalence ROC-AUC on the mirrored data."""

    checkpoint: Path | None = None
    """encoder checkpoint (None: random-init encoder)."""
    task: Literal["qor", "equivalence", "both"] = "both"
    """which probe."""
    max_recipes: int = 100
    """labelled recipes per design for QoR."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """head seeds."""
    epochs: int = 150
    """head training epochs (full batch; mlp head only)."""
    head: Literal["ridge", "mlp"] = "ridge"
    """QoR head: ridge with inner-CV penalty (as in reproduce) or the OpenABC-D-style MLP (QoRHead)."""
    emb_dims: int | None = 8
    """PCA dimensions of the design embeddings (None: all)."""
    out: Path = Path("probe.json")
    """results file."""


def probe_cmd(c: ProbeConfig) -> int:
    import numpy as np
    import torch

    from .data import equivalence_pairs, load_cached, openabcd_recipes, qor_labels, usable_qor_designs
    from .downstream import embed_graphs, equivalence_scores, qor_lodo, roc_auc
    from .graph import to_graph
    from .model import MGVGAConfig, MGVGAEncoder
    from .pretrain import load_encoder

    enc = load_encoder(c.checkpoint) if c.checkpoint else MGVGAEncoder(MGVGAConfig()).eval()
    res = {}
    if c.task in ("qor", "both"):
        labels = qor_labels()
        designs = usable_qor_designs(labels)
        emb = embed_graphs(enc, [to_graph(load_cached(str(labels[d][0]))) for d in designs], batch_size=2)
        res["qor"] = qor_lodo(dict(zip(designs, emb)), labels, openabcd_recipes(), designs, seeds=c.seeds,
                              epochs=c.epochs, max_recipes=c.max_recipes, head=c.head, emb_dims=c.emb_dims)
    if c.task in ("equivalence", "both"):
        pairs = equivalence_pairs()
        eb = embed_graphs(enc, [to_graph(load_cached(str(p["base"]))) for p in pairs], batch_size=4)
        ev = embed_graphs(enc, [to_graph(load_cached(str(p["variant"]))) for p in pairs], batch_size=4)
        y = np.array([p["equivalent"] for p in pairs])
        res["equivalence"] = {"auc_mutants": roc_auc(y, equivalence_scores(eb, ev))}
    del torch
    c.out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if not isinstance(vv, (dict, list))} for k, v in res.items()},
                     indent=1))
    return 0


@dataclass
class BenchConfig:
    """Encoder throughput on the EPFL circuits (PyG batches) and parsing speed."""

    hidden_size: int = 64
    """d."""
    num_encoder_layers: int = 7
    """blocks."""
    batch_size: int = 4
    """graphs per PyG batch."""
    max_nodes: int = 20000
    """skip larger graphs."""
    device: str = "cpu"
    """torch device."""
    repeats: int = 3
    """timed passes."""


def bench_cmd(c: BenchConfig) -> int:
    import torch
    from torch_geometric.data import Batch

    from .circuit import load_circuit
    from .data import data_dir
    from .graph import to_graph
    from .model import MGVGAConfig, MGVGAEncoder

    files = sorted((data_dir() / "epfl").glob("*.aig"))
    t = time.perf_counter()
    circs = [load_circuit(p) for p in files]
    t_parse = time.perf_counter() - t
    big = max(circs, key=lambda x: x.num_ands)
    t = time.perf_counter()
    load_circuit(data_dir() / "epfl" / f"{big.name}.aig")
    t_big = time.perf_counter() - t
    graphs = [g for g in (to_graph(x) for x in circs) if g.num_nodes <= c.max_nodes]
    enc = MGVGAEncoder(MGVGAConfig(hidden_size=c.hidden_size, num_encoder_layers=c.num_encoder_layers)).to(c.device)
    enc.eval()
    batches = [Batch.from_data_list(graphs[i : i + c.batch_size]).to(c.device)
               for i in range(0, len(graphs), c.batch_size)]
    with torch.no_grad():
        for b in batches[:1]:
            enc(b.x, b.edge_index)
        if c.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(c.repeats):
            for b in batches:
                enc(b.x, b.edge_index)
        if c.device.startswith("cuda"):
            torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / c.repeats
    n_nodes = sum(g.num_nodes for g in graphs)
    print(json.dumps({"parse_all_epfl_s": round(t_parse, 3), "largest": big.name, "largest_ands": big.num_ands,
                      "parse_largest_s": round(t_big, 3), "graphs": len(graphs), "nodes": n_nodes,
                      "graphs_per_s": round(len(graphs) / dt, 2), "nodes_per_s": round(n_nodes / dt, 0),
                      "device": c.device, "threads": torch.get_num_threads()}, indent=1))
    return 0


@dataclass
class ReproduceConfig:
    """Reproduce the paper's claims at CPU scale (writes results.json / results.md)."""

    quick: bool = False
    """CPU-scale quick mode (< 3 min on 2 cores)."""
    out: Path = Path("results/mgvga")
    """output folder."""


def reproduce_cmd(c: ReproduceConfig) -> int:
    from iclr25.core.registry import run_reproduction

    from .reproduce import reproduce

    run_reproduction("mgvga", reproduce, quick=c.quick, out_dir=c.out, version=__version__)
    return 0


def _friendly(name: str, fn):
    """Turn input errors (bad circuit files, missing data/checkpoints, bad values) into one line, exit 2."""

    def run(cfg) -> int:
        try:
            return fn(cfg)
        except (ValueError, FileNotFoundError) as e:  # CircuitFormatError is a ValueError
            print(f"iclr25-mgvga {name}: error: {e}", file=sys.stderr)
            return 2

    return run


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run_cli("iclr25-mgvga", "MGVGA (ICLR 2025): AIG representation learning with masked gate modeling and "
                   "Verilog-AIG alignment.", {
                       "convert": Command(ConvertConfig, _friendly("convert", convert_cmd), "circuit files -> PyG dataset (.pt)"),
                       "pretrain": Command(PretrainConfig, _friendly("pretrain", pretrain_cmd), "pre-train an encoder (mgvga/mgm/vga/graphmae)"),
                       "probe": Command(ProbeConfig, _friendly("probe", probe_cmd), "frozen-encoder QoR / equivalence probes"),
                       "embed": Command(EmbedConfig, _friendly("embed", embed_cmd), "node and graph embeddings of circuits"),
                       "bench": Command(BenchConfig, _friendly("bench", bench_cmd), "encoder throughput and parsing speed"),
                       "reproduce": Command(ReproduceConfig, reproduce_cmd, "reproduce the paper's claims"),
                   }, argv)
