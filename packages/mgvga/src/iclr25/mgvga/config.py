"""Configs of the ``iclr25-mgvga`` commands (paper defaults where the paper has one).

Imports nothing heavy: ``iclr25-mgvga --help`` only needs these dataclasses.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption, SeedsOption

__all__ = ["ConvertConfig", "PretrainConfig", "EmbedConfig", "ProbeConfig", "BenchConfig", "ReproduceConfig"]

Direction = Literal["fanin", "fanout", "bidirectional"]


def _out_folder(cfg, command: str, old_file: str) -> None:
    """0.1 shim: ``--out FILE.pt|.json`` (a file) became ``--out DIR``; keep the file's folder + stem."""
    if cfg.out is not None and Path(cfg.out).suffix in (".pt", ".pth", ".json"):
        new = Path(cfg.out).with_suffix("")
        msg = (f"iclr25-mgvga {command}: --out is now a folder (it was the output file); writing "
               f"{new}/{old_file} instead of {cfg.out}. Pass a folder; the file form goes away in the next minor release")
        warnings.warn(msg, FutureWarning, stacklevel=3)
        cfg.out = new


def _check_ratio(name: str, v: float) -> None:
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], got {v}")


def _check_pos(name: str, v: float) -> None:
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"--{name.replace('_', '-')} must be a finite number > 0, got {v}")


@dataclass(kw_only=True)
class ConvertConfig(CommonOptions):
    """Convert circuit files (.aig/.aag/.bench/.blif/.v) into a PyG graph dataset: OUT/circuits.safetensors
    (tensors, no pickle; read with iclr25.mgvga.load_graphs) and OUT/circuits.json (sizes)."""

    inputs: tuple[Path, ...] = ()
    """Circuit files to convert."""
    direction: Direction = "fanin"
    """Edge orientation (official: fanin = consumer -> fanin)."""
    expand_not: bool = True
    """One NOT node per inverted edge (official)."""

    top: str | None = None
    """Verilog (.v) only: the module to read (default: the module named top, else the file's only module)."""

    def __post_init__(self) -> None:
        _out_folder(self, "convert", "circuits.safetensors")


@dataclass(kw_only=True)
class PretrainConfig(CommonOptions, SeedOption):
    """Pre-train an encoder with MGVGA, MGM, VGA or the GraphMAE-style baseline. Writes OUT/checkpoint.pt
    (resume state, weights_only-loadable), OUT/checkpoint.encoder.safetensors and OUT/checkpoint.history.json."""

    objective: Literal["mgvga", "mgm", "vga", "graphmae"] = "mgvga"
    """Loss to optimise (paper: mgvga)."""
    circuits: tuple[Path, ...] = ()
    """Extra circuit files for the MGM pool (default: the mirrored real circuits + synthetic)."""
    n_synthetic: int = 200
    """Synthetic template RTL <-> AIG pairs for VGA (and MGM)."""
    synth_max_width: int = 6
    """Largest operand width of the synthetic pairs."""
    max_nodes: int = 1500
    """Drop graphs with more nodes (after NOT expansion)."""
    hidden_size: int = 64
    """d (paper: 64)."""
    num_encoder_layers: int = 7
    """Encoder blocks (paper: 7)."""
    mgm_mask_ratio: float = 0.3
    """r_MGM (paper: 0.3)."""
    vga_mask_ratio: float = 0.7
    """r_VGA (script: 0.7)."""
    direction: Direction = "fanin"
    """Edge orientation of every graph (official: fanin)."""
    steps: int = 200
    """Optimiser steps."""
    batch_size: int = 4
    """Graphs (and graph-text pairs) per step (official: 512 via accumulation)."""
    lr: float = 1e-3
    """AdamW learning rate (paper: 1e-3, cosine to 0.1x)."""
    seed: int = 42
    """Seed (paper: 42)."""
    resume: bool = False
    """Continue from OUT/checkpoint.pt."""
    checkpoint_every: int = 50
    """Steps between checkpoints."""
    text_cache: Path | None = None
    """Folder for cached text embeddings (default: the iclr25 cache, mgvga-text)."""
    use_mirror: bool = True
    """Add the mirrored real circuits and RTL pairs ($ICLR25_DATA/mgvga) to the pools."""
    text_model: str = "minilm"
    """'minilm' (all-MiniLM-L6-v2, offline) or a Hugging Face model id / local path (e.g.
    Alibaba-NLP/gte-Qwen2-7B-instruct, 3584-d, the paper's encoder)."""
    text_granularity: Literal["sentence", "token"] = "sentence"
    """VGA keys: 'sentence' = one pooled vector per Verilog file (the paper); 'token' = the text
    encoder's per-token states with a padding mask (named extension, not the paper's method)."""

    def __post_init__(self) -> None:
        _check_ratio("mgm_mask_ratio", self.mgm_mask_ratio)
        _check_ratio("vga_mask_ratio", self.vga_mask_ratio)
        _check_pos("lr", self.lr)
        for k in ("steps", "batch_size", "checkpoint_every", "hidden_size", "num_encoder_layers", "max_nodes"):
            if getattr(self, k) < 1:
                raise ValueError(f"--{k.replace('_', '-')} must be >= 1, got {getattr(self, k)}")


@dataclass(kw_only=True)
class EmbedConfig(CommonOptions):
    """Embed circuits with a pre-trained (or random) encoder; writes OUT/embeddings.safetensors
    (per circuit: graph Float[d] and nodes Float[N, d]; read with iclr25.mgvga.storage.load_embeddings)."""

    inputs: tuple[Path, ...] = ()
    """Circuit files."""
    checkpoint: Path | None = None
    """checkpoint.pt or *.encoder.safetensors from 'pretrain' (None: random-init encoder, for smoke tests)."""

    top: str | None = None
    """Verilog (.v) only: the module to read (default: the module named top, else the file's only module)."""

    def __post_init__(self) -> None:
        _out_folder(self, "embed", "embeddings.safetensors")


@dataclass(kw_only=True)
class ProbeConfig(CommonOptions, SeedsOption):
    """Frozen-encoder probes on the mirrored data: QoR leave-one-design-out, circuit-level equivalence,
    gate-level logic probability and gate-level equivalence. Writes OUT/probe.json (undefined metrics are null)."""

    checkpoint: Path | None = None
    """Encoder checkpoint (None: random-init encoder)."""
    task: Literal["qor", "equivalence", "gates", "all"] = "all"
    """Which probes."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Head seeds (recipe subsets / head initialisation)."""
    max_recipes: int = 100
    """Labelled recipes per design for QoR."""
    epochs: int = 150
    """QoR head training epochs (mlp head only)."""
    head: Literal["ridge", "mlp"] = "ridge"
    """QoR head: ridge with inner-CV penalty (as in reproduce) or the OpenABC-D-style MLP (QoRHead)."""
    emb_dims: int | None = 8
    """PCA dimensions of the design embeddings (None: all)."""
    gate_designs: tuple[str, ...] = ("ctrl", "int2float", "router", "cavlc", "dec", "priority", "i2c", "adder")
    """EPFL designs of the gate-level probes."""

    def __post_init__(self) -> None:
        if self.max_recipes < 2:
            raise ValueError(f"--max-recipes {self.max_recipes}: the QoR head needs >= 2 labelled recipes per design")
        if self.emb_dims is not None and self.emb_dims < 1:
            raise ValueError(f"--emb-dims {self.emb_dims} must be >= 1 (None keeps every dimension)")
        if self.epochs < 1:
            raise ValueError(f"--epochs {self.epochs} must be >= 1")
        _out_folder(self, "probe", "probe.json")


@dataclass(kw_only=True)
class BenchConfig(CommonOptions):
    """Throughput of the MGVGA encoder beside a plain GCN of the same width and depth (PyG batching and
    per-graph), on the EPFL circuits, and parsing speed. Writes OUT/bench.json."""

    hidden_size: int = 64
    """d."""
    num_encoder_layers: int = 7
    """Blocks (the GCN baseline gets the same number of layers)."""
    batch_size: int = 4
    """Graphs per PyG batch."""
    max_nodes: int = 20000
    """Skip larger graphs."""
    repeats: int = 3
    """Timed passes (the mean is reported)."""
    graphs: Literal["epfl", "synthetic"] = "epfl"
    """Graph set: the EPFL circuits (large) or synthetic template circuits (small, the VGA pool's size)."""
    n_synthetic: int = 64
    """Synthetic circuits when --graphs synthetic."""


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (paired over pre-training seeds); writes results.json / results.md."""

    direction: Direction = "fanin"
    """Edge orientation of every graph (official: fanin)."""
    resume: bool = False
    """Keep the jobs an interrupted run in --out finished (records/; changed settings are refused); an
    unfinished pre-training continues from its last checkpoint. Ctrl-C / SIGTERM stop the workers and keep the
    finished jobs (exit 130)."""
    workers: int | None = None
    """Worker processes of the runner (default: the CPUs, at most the number of jobs; 1: in this process)."""
    checkpoint_every: int = 100
    """Pre-training steps between checkpoints."""

    def __post_init__(self) -> None:
        if self.checkpoint_every < 1:
            raise ValueError(f"--checkpoint-every must be >= 1, got {self.checkpoint_every}")

