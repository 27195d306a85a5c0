"""Config dataclasses of the ``iclr25-tie`` commands (light: no numpy/torch import here).

TIE itself has no hyper-parameters besides the prompts (spec "Algorithm"); the knobs below are the
offline pair's CPU-scale training (issue #30), the embedding run and the evaluation's explicit
choices (pool split, untranslated attribute values, empty pool groups).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iclr25.core.config import CommonOptions, ReproduceOptions, SeedOption

__all__ = ["TrainEncoderConfig", "EmbedConfig", "EvaluateConfig", "ReproduceConfig", "BenchConfig"]


def _finite(name: str, v: float, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")


@dataclass(kw_only=True)
class TrainEncoderConfig(CommonOptions, SeedOption):
    """Train the offline CLIP-style pair (frozen MiniLM + linear head; small CNN) on cifar10-subset
    with the injected green/blue frame. --seed seeds weights, colour draws, captions and batch order."""
    epochs: int = 6
    """training epochs (reproduce --quick: 6; full: 15)"""
    rho: float = 0.95
    """P(frame colour = superclass colour): animals green, vehicles blue"""
    batch_size: int = 64
    lr: float = 2e-3
    """AdamW learning rate (cosine decay)"""
    dim: int = 64
    """joint embedding width"""
    caption_class: float = 0.5
    """share of captions 'a photo of a {class}.'"""
    caption_class_colour: float = 0.3
    """share of captions 'a photo of a {class} with a {colour} frame.'"""
    caption_colour: float = 0.2
    """share of captions 'a photo with a {colour} frame.'"""
    resume: bool = False
    """continue from the last finished epoch of the checkpoint in --out"""
    data: Path | None = None
    """cifar10_subset.npz (default: $ICLR25_DATA/cifar10-subset/cifar10_subset.npz)"""

    def __post_init__(self) -> None:
        _finite("rho", self.rho, 0.0, 1.0)
        _finite("lr", self.lr, 0.0, lo_open=True)
        for n in ("caption_class", "caption_class_colour", "caption_colour"):
            _finite(n, getattr(self, n), 0.0, 1.0)
        if self.epochs < 1 or self.batch_size < 2 or self.dim < 2 or self.seed < 0:
            raise ValueError("epochs >= 1, batch_size >= 2, dim >= 2 and seed >= 0 are required")


@dataclass(kw_only=True)
class EmbedConfig(CommonOptions, SeedOption):
    """Embed images and prompts into an EmbeddingSet .npz (resumable per shard)."""

    encoder: Literal["offline-pair", "open_clip", "hf"] = "offline-pair"
    """offline-pair (default at CPU scale; needs --checkpoint), open_clip (local --pretrained file or
    --model-dir), hf (transformers CLIP from a local --model-dir)"""
    checkpoint: Path | None = None
    """offline pair: folder written by train-encoder"""
    model: str | None = None
    """open_clip model name, e.g. ViT-L-14, ViT-B-32, RN50"""
    pretrained: Path | None = None
    """open_clip: local weights file (e.g. open_clip_pytorch_model.bin for laion2b_s32b_b82k); never downloaded"""
    model_dir: Path | None = None
    """hf: local folder with config.json (CLIP, local_files_only); open_clip: local folder with
    open_clip_config.json + weights (e.g. BiomedCLIP)"""
    source: Literal["cifar10-frames", "metadata", "celeba"] = "metadata"
    """images: cifar10-frames (the offline pair's renders: λ pool + paired test renders), metadata
    (a CSV: img_filename, y, a|place, split) or celeba (list_attr_celeba.txt + list_eval_partition.txt)"""
    metadata: Path | None = None
    """metadata CSV (source=metadata), e.g. WILDS waterbirds metadata.csv as is"""
    images_root: Path | None = None
    """folder the CSV's file names are relative to (default: the CSV's folder); celeba: the data set root"""
    y_column: str = "y"
    a_column: str | None = None
    """attribute column (default: a, else place)"""
    split_column: str = "split"
    filename_column: str = "img_filename"
    celeba_target: str = "Blond_Hair"
    celeba_attribute: str = "Male"
    prompts: Path | None = None
    """JSON in the format of official_prompts_and_outputs.json (class prompts + {attribute_value: prompt})"""
    prompts_key: str | None = None
    """data set inside the prompts JSON (e.g. waterbirds, celeba, fmow)"""
    class_names: Path | None = None
    """text file, one class name per line (index = label), for prompts given as class_prompt_template (FMoW)"""
    untranslated: Literal["error", "keep"] = "error"
    """attribute values without a prompt: error, or keep them untranslated"""
    batch_size: int = 256
    shard_size: int = 4096
    """images per shard file (a rerun skips finished shards)"""
    shard: str = "0/1"
    """k/n: this process embeds shards k, k+n, ...; the process that finds all shards writes the npz"""
    rho: float = 0.95
    """cifar10-frames: training correlation of the λ pool's frame colours (--seed: its colour draw)"""
    data: Path | None = None
    """cifar10-frames: cifar10_subset.npz (default: the ICLR25_DATA mirror)"""

    def __post_init__(self) -> None:
        _finite("rho", self.rho, 0.0, 1.0)
        if self.batch_size < 1 or self.shard_size < 1:
            raise ValueError("batch_size and shard_size must be >= 1")
        try:
            k, n = (int(v) for v in self.shard.split("/"))
        except ValueError:
            raise ValueError(f"shard must be 'k/n' with 0 <= k < n, got {self.shard!r}") from None
        if not 0 <= k < n:
            raise ValueError(f"shard must be 'k/n' with 0 <= k < n, got {self.shard!r}")


@dataclass(kw_only=True)
class EvaluateConfig(CommonOptions):
    """Zero-shot / TIE / TIE* / projection on an EmbeddingSet .npz, per group."""

    embeddings: Path
    """EmbeddingSet .npz (image_emb, y, a, split, text_emb_class, text_emb_spurious, attribute_values)"""
    pool_split: Literal["train", "val"]
    """unlabeled images for λ: train (as the official code) or val — explicit"""
    mode: Literal["all", "true", "inferred"] = "all"
    """true: TIE (needs a); inferred: TIE*; all: both. Zero-shot and projection always run"""
    untranslated: Literal["error", "keep"] = "error"
    """attribute values without a prompt (FMoW 'Other'): error, or keep those images untranslated"""
    empty_group: Literal["error", "zero"] = "error"
    """an attribute value with no pool image: error, or λ = 0 (untranslated)"""


@dataclass(kw_only=True)
class ReproduceConfig(ReproduceOptions):
    """Reproduce the paper's claims at CPU scale (offline pair + synthetic paper-model)."""

    workers: int = 2
    """jobs (encoders, the synthetic model) run in parallel processes (1: in this process)"""
    worker_threads: int = 1
    """torch threads of each job"""
    resume: bool = False
    """keep the jobs an interrupted run in --out finished (records/); changed settings are refused"""
    data: Path | None = None
    """cifar10_subset.npz (default: the ICLR25_DATA mirror)"""

    def __post_init__(self) -> None:
        if self.workers < 1 or self.worker_threads < 1:
            raise ValueError(f"workers and worker_threads must be >= 1, got {self.workers}, {self.worker_threads}")


@dataclass(kw_only=True)
class BenchConfig(CommonOptions):
    """Time zero-shot vs TIE on large random embeddings, and TIE's share of the offline pair's
    embedding time."""

    n: int = 100_000
    """test embeddings"""
    pool: int = 50_000
    """pool embeddings for λ"""
    dim: int = 768
    classes: int = 62
    attributes: int = 5
    repeats: int = 3
    """timed repetitions (means reported)"""
    renders: int = 2000
    """offline pair: test renders to embed (0 skips the encoder timing)"""

    def __post_init__(self) -> None:
        if min(self.n, self.pool, self.dim, self.repeats) < 1 or self.classes < 2 or self.attributes < 1 or self.renders < 0:
            raise ValueError("n, pool, dim, repeats >= 1, classes >= 2, attributes >= 1, renders >= 0 are required")
