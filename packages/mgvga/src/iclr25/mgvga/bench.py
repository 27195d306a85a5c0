"""Throughput: the MGVGA encoder beside a plain GCN of the same width and depth, with PyG batching
and graph by graph (the official code's loop), on the EPFL circuits; parsing speed."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch_geometric.data import Batch
from torch_geometric.nn import GCNConv

from .data import data_dir
from .graph import to_graph
from .model import MGVGAConfig, MGVGAEncoder
from .parsers import load_circuit

__all__ = ["PlainGCN", "run_bench", "format_bench"]


class PlainGCN(nn.Module):
    """Type embedding + ``n`` ``GCNConv(d, d)`` layers with ReLU between them (no residuals or norms):
    the plain baseline for throughput. ``forward(x: Long[N], edge_index: Long[2, E]) -> Float[N, d]``."""

    def __init__(self, d: int, n: int):
        super().__init__()
        self.emb = nn.Embedding(5, d)
        self.convs = nn.ModuleList(GCNConv(d, d) for _ in range(n))

    def forward(self, x, edge_index):
        h = self.emb(x + 1)
        for i, conv in enumerate(self.convs):
            h = conv(h, edge_index)
            if i < len(self.convs) - 1:
                h = torch.relu(h)
        return h


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def _time(model, batches, repeats: int, device: torch.device) -> float:
    """Mean seconds of one pass over ``batches`` (one warm-up pass first)."""
    for b in batches[:1]:
        model(b.x, b.edge_index)
    _sync(device)
    t = time.perf_counter()
    for _ in range(repeats):
        for b in batches:
            model(b.x, b.edge_index)
    _sync(device)
    return (time.perf_counter() - t) / repeats


def run_bench(*, hidden_size: int = 64, num_layers: int = 7, batch_size: int = 4, max_nodes: int = 20000,
              repeats: int = 3, device: str = "auto", graphs: str = "epfl", n_synthetic: int = 64) -> dict:
    """Inference throughput (graphs/s, nodes/s) of the MGVGA encoder and a plain GCN, PyG-batched
    (``batch_size`` graphs per ``Batch``) and per graph; the ratios come from the same run.

    Args:
        graphs: ``"epfl"`` — the EPFL circuits with ≤ ``max_nodes`` nodes (also times parsing all
            EPFL AIGs); ``"synthetic"`` — ``n_synthetic`` template circuits (widths 2–6, tens to a few
            hundred nodes, the size of the VGA pre-training pool), where per-graph overhead dominates.

    Raises:
        FileNotFoundError: the mirror is missing (``epfl``). ValueError: no graph fits ``max_nodes``;
            bad sizes; unknown ``graphs``.
    """
    from iclr25.core.seed import choose_device

    if min(hidden_size, num_layers, batch_size, repeats, n_synthetic) < 1:
        raise ValueError("hidden_size, num_layers, batch_size, repeats and n_synthetic must be >= 1")
    if graphs not in ("epfl", "synthetic"):
        raise ValueError(f"graphs={graphs!r}; use 'epfl' or 'synthetic'")
    dev = torch.device(str(choose_device(device)))
    t_parse, big_name, big_ands = None, None, None
    if graphs == "epfl":
        files = sorted((data_dir() / "epfl").glob("*.aig"))
        t = time.perf_counter()
        circs = [load_circuit(p) for p in files]
        t_parse = round(time.perf_counter() - t, 3)
        big = max(circs, key=lambda x: x.num_ands)
        big_name, big_ands = big.name, big.num_ands
    else:
        from .synth import synthetic_pairs

        circs = [p.circuit for p in synthetic_pairs(n_synthetic, widths=(2, 6), seed=0)]
    graph_list = [g for g in (to_graph(x) for x in circs) if g.num_nodes <= max_nodes]
    if not graph_list:
        raise ValueError(f"no {graphs} graph has <= {max_nodes} nodes")
    graphs_set, graphs = graphs, graph_list
    n_nodes = sum(g.num_nodes for g in graphs)
    batched = [Batch.from_data_list(graphs[i : i + batch_size]).to(dev) for i in range(0, len(graphs), batch_size)]
    single = [Batch.from_data_list([g]).to(dev) for g in graphs]
    torch.manual_seed(0)
    models = {"mgvga_encoder": MGVGAEncoder(MGVGAConfig(hidden_size=hidden_size, num_encoder_layers=num_layers)),
              "plain_gcn": PlainGCN(hidden_size, num_layers)}
    res: dict = {"graph_set": graphs_set, "graphs": len(graphs), "nodes": n_nodes, "hidden_size": hidden_size,
                 "layers": num_layers, "batch_size": batch_size, "repeats": repeats, "device": str(dev),
                 "threads": torch.get_num_threads(), "parse_all_epfl_s": t_parse, "largest": big_name,
                 "largest_ands": big_ands}
    for name, m in models.items():
        m.to(dev).eval()
        res[name] = {"params": sum(p.numel() for p in m.parameters())}
        for mode, bs in (("batched", batched), ("per_graph", single)):
            dt = _time(m, bs, repeats, dev)
            res[name][mode] = {"seconds": dt, "graphs_per_s": len(graphs) / dt, "nodes_per_s": n_nodes / dt}
    enc, gcn = res["mgvga_encoder"], res["plain_gcn"]
    res["ratios"] = {
        "encoder_vs_gcn_batched": enc["batched"]["seconds"] / gcn["batched"]["seconds"],
        "encoder_batching_speedup": enc["per_graph"]["seconds"] / enc["batched"]["seconds"],
        "gcn_batching_speedup": gcn["per_graph"]["seconds"] / gcn["batched"]["seconds"],
    }
    return res


def format_bench(res: dict) -> str:
    """A Markdown table of :func:`run_bench` output plus a one-line summary."""
    lines = [f"{res['graphs']} {res.get('graph_set', 'epfl')} graphs, {res['nodes']} nodes, d={res['hidden_size']}, {res['layers']} layers, "
             f"device {res['device']}, {res['threads']} threads, mean of {res['repeats']} passes",
             "", "| model | params | mode | graphs/s | nodes/s |", "|---|---|---|---|---|"]
    for name in ("mgvga_encoder", "plain_gcn"):
        for mode in ("batched", "per_graph"):
            r = res[name][mode]
            lines.append(f"| {name} | {res[name]['params']} | {mode} | {r['graphs_per_s']:.2f} | {r['nodes_per_s']:.0f} |")
    q = res["ratios"]
    lines += ["", f"bench: the encoder takes {q['encoder_vs_gcn_batched']:.2f}x the plain GCN's time (batched); "
              f"per-graph time / batched time = {q['encoder_batching_speedup']:.2f} (encoder), "
              f"{q['gcn_batching_speedup']:.2f} (GCN)"
              + (f"; parsing all EPFL AIGs {res['parse_all_epfl_s']:.2f} s" if res.get("parse_all_epfl_s") else "")]
    return "\n".join(lines)
