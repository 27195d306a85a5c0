"""``iclr25-mgvga`` command line: convert, pretrain, probe, embed, bench, reproduce.

Only config dataclasses are imported at module level, so ``--help`` loads no torch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from iclr25.core.config import Command, reproduce_command, run_cli

from ._version import __version__
from .config import BenchConfig, ConvertConfig, EmbedConfig, PretrainConfig, ProbeConfig, ReproduceConfig

__all__ = ["main"]

log = logging.getLogger("iclr25.mgvga")


def convert_cmd(c: ConvertConfig) -> int:
    from .graph import to_graph
    from .parsers import load_circuit
    from .storage import save_graphs

    if not c.inputs:
        raise ValueError("give at least one circuit file with --inputs FILE ...")
    graphs, names, stats = [], [], []
    for p in c.inputs:
        circ = load_circuit(p, top=c.top)
        g = to_graph(circ, expand_not=c.expand_not, direction=c.direction)
        st = {"file": str(p), **circ.stats(), "nodes": g.num_nodes, "edges": int(g.edge_index.shape[1])}
        graphs.append(g)
        names.append(circ.name)
        stats.append(st)
        print(json.dumps(st))
    out = Path(c.out)
    path = save_graphs(out / "circuits.safetensors", graphs, names, stats)
    (out / "circuits.json").write_text(json.dumps(stats, indent=1))
    print(f"wrote {len(graphs)} graphs to {path} (safetensors; iclr25.mgvga.load_graphs reads it)")
    return 0


def pretrain_cmd(c: PretrainConfig) -> int:
    import torch

    from iclr25.core.seed import choose_device

    from .graph import to_graph
    from .model import MGVGAConfig, MGVGAPretrainer
    from .parsers import load_circuit
    from .pools import ReproSettings, build_pools, text_encoder
    from .pretrain import pretrain

    dev = str(choose_device(c.device))
    s = ReproSettings(n_synthetic=c.n_synthetic, synth_widths=(2, c.synth_max_width), max_nodes=c.max_nodes,
                      n_eval_pairs=1, seed=c.seed, pretrain_seeds=(c.seed, c.seed + 1), direction=c.direction)
    if c.use_mirror:
        mgm, vga, texts, _, _, _ = build_pools(s, c.direction)
    else:
        from .synth import synthetic_pairs
        from .text import compact_verilog

        pairs = synthetic_pairs(c.n_synthetic, widths=(2, c.synth_max_width), seed=c.seed)
        vga = [to_graph(p.circuit, direction=c.direction) for p in pairs]
        texts = [compact_verilog(p.verilog) for p in pairs]
        mgm = list(vga)
    mgm += [to_graph(load_circuit(p), direction=c.direction) for p in c.circuits]
    emb = tmask = None
    if c.objective in ("mgvga", "vga") and c.text_granularity == "token":
        from .text import HFEmbeddingEncoder, MiniLMEncoder

        tok_enc = MiniLMEncoder(device=dev) if c.text_model == "minilm" else HFEmbeddingEncoder(c.text_model,
                                                                                               device=dev)
        states, tmask = tok_enc.encode_tokens(texts)  # not cached: [P, T, d_v] is large
        emb, tmask = torch.as_tensor(states), torch.as_tensor(tmask)
        print(f"token-level VGA text: {tuple(emb.shape)} states, {int(tmask.sum())} valid tokens "
              f"({int((~tmask.any(1)).sum())} texts without any are excluded from the VGA loss)")
    elif c.objective in ("mgvga", "vga"):
        if c.text_model == "minilm":
            tenc = text_encoder(c.text_cache)
        else:
            from iclr25.core.data import cache_dir

            from .text import CachedTextEncoder, HFEmbeddingEncoder

            tenc = CachedTextEncoder(lambda: HFEmbeddingEncoder(c.text_model, device=dev),
                                     c.text_cache or cache_dir() / "mgvga-text", c.text_model)
        emb = torch.as_tensor(tenc.encode(texts))
    cfg = MGVGAConfig(hidden_size=c.hidden_size, num_encoder_layers=c.num_encoder_layers,
                      num_heads=8 if c.hidden_size % 8 == 0 else 4, text_dim=384 if emb is None else emb.shape[-1],
                      mgm_mask_ratio=c.mgm_mask_ratio, vga_mask_ratio=c.vga_mask_ratio, objective=c.objective,
                      direction=c.direction)
    torch.manual_seed(c.seed)
    model = MGVGAPretrainer(cfg)
    out = Path(c.out)
    out.mkdir(parents=True, exist_ok=True)
    # Ctrl-C stops at once: the last checkpoint (every --checkpoint-every steps) stays; --resume continues from it
    hist = pretrain(model, mgm, vga, emb, steps=c.steps, batch_size=c.batch_size, lr=c.lr, seed=c.seed,
                    checkpoint=out / "checkpoint.pt", checkpoint_every=c.checkpoint_every, resume=c.resume,
                    device=dev, progress=not c.quiet, vga_text_mask=tmask)
    last = hist[-1] if hist else {}
    print(json.dumps(last, indent=1))
    print(f"pretrain[{c.objective}]: {last.get('step', 0)} steps, loss {last.get('loss', float('nan')):.4f} -> "
          f"{out / 'checkpoint.pt'} (+ checkpoint.encoder.safetensors)")
    return 0


def _encoder(checkpoint):
    from .model import MGVGAConfig, MGVGAEncoder
    from .pretrain import load_encoder

    return load_encoder(checkpoint) if checkpoint else MGVGAEncoder(MGVGAConfig()).eval()


def embed_cmd(c: EmbedConfig) -> int:
    import torch

    from .graph import to_graph
    from .parsers import load_circuit
    from .storage import save_embeddings

    if not c.inputs:
        raise ValueError("give at least one circuit file with --inputs FILE ...")
    enc = _encoder(c.checkpoint)
    res = {}
    with torch.no_grad():
        for p in c.inputs:
            circ = load_circuit(p, top=c.top)
            g = to_graph(circ, direction=enc.cfg.direction)
            h = enc(g.x, g.edge_index)
            if h.shape[0] == 0 or not torch.isfinite(h).all():
                bad = int((~torch.isfinite(h)).any(1).sum()) if h.numel() else 0
                raise ValueError(f"{p}: the embedding is not finite ({bad} of {h.shape[0]} nodes NaN/inf) with "
                                 f"checkpoint {c.checkpoint or '(random init)'}; check the checkpoint (a diverged "
                                 "pre-training) and the circuit")
            res[circ.name] = {"graph": h.mean(0), "nodes": h}
            print(json.dumps({"file": str(p), "nodes": int(h.shape[0]), "dim": int(h.shape[1])}))
    path = save_embeddings(Path(c.out) / "embeddings.safetensors", res,
                           {"checkpoint": str(c.checkpoint) if c.checkpoint else None})
    print(f"embedded {len(res)} circuits -> {path}")
    return 0


def probe_cmd(c: ProbeConfig) -> int:
    from .probe import run_probes

    res = run_probes(_encoder(c.checkpoint), c)
    out = Path(c.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(res, indent=1, allow_nan=False))
    summary = {k: {kk: vv for kk, vv in v.items() if not isinstance(vv, (dict, list))} for k, v in res.items()}
    print(json.dumps(summary, indent=1))
    print(f"probe: {', '.join(res)} -> {out / 'probe.json'}")
    return 0


def bench_cmd(c: BenchConfig) -> int:
    from .bench import format_bench, run_bench

    res = run_bench(hidden_size=c.hidden_size, num_layers=c.num_encoder_layers, batch_size=c.batch_size,
                    max_nodes=c.max_nodes, repeats=c.repeats, device=c.device,
                    graphs=c.graphs, n_synthetic=c.n_synthetic)
    out = Path(c.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(res, indent=1))
    print(format_bench(res))
    return 0


COMMANDS = {
    "convert": Command(ConvertConfig, convert_cmd, "circuit files -> PyG graph dataset (safetensors)"),
    "pretrain": Command(PretrainConfig, pretrain_cmd, "pre-train an encoder (mgvga/mgm/vga/graphmae)"),
    "probe": Command(ProbeConfig, probe_cmd, "frozen-encoder QoR / equivalence / gate-level probes"),
    "embed": Command(EmbedConfig, embed_cmd, "node and graph embeddings of circuits (safetensors)"),
    "bench": Command(BenchConfig, bench_cmd, "encoder vs plain GCN throughput; batching vs per-graph"),
}


def main(argv: list[str] | None = None) -> int:
    cmds = dict(COMMANDS)
    cmds["reproduce"] = reproduce_command("mgvga", "iclr25.mgvga.reproduce:reproduce", __version__,
                                          config=ReproduceConfig)
    return run_cli("iclr25-mgvga", "MGVGA (ICLR 2025): AIG representation learning with masked gate modeling and "
                   "Verilog-AIG alignment.", cmds, argv, version=__version__)
