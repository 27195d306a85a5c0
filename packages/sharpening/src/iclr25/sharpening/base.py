"""The trap task's base model ``pi_base``: core ``tiny_causal_lm`` + core ``byte_tokenizer``, pre-trained
from scratch on strings sampled from :class:`~iclr25.sharpening.task.TrapArithmeticTask` with core
``cached_tiny_lm`` (``(prompt, answer)`` pairs: the loss is on the two answer digits and EOS only), cached
in the user cache under ``sharpening/tinylm-<key>``, the key covering the training spec and the corpus
(which the task and the seed determine).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .task import TrapArithmeticTask

__all__ = ["TrapBaseConfig", "TrapBase", "trap_corpus", "cached_trap_base", "use_fused_gelu"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrapBaseConfig:
    """Size and pre-training schedule of the trap task's base model (spec §4.1; issue #31 probe).

    Args:
        n_layer, n_embd, n_head: transformer size (spec: 2 layers, d = 128; do not shrink it, the
            trap must be representable).
        n_strings: training strings sampled from the task distribution (issue: 50k quick, 100k-200k full).
        epochs: passes over the strings. The issue's probe needed ~1,500 optimiser steps (batch 256); batch
            128 for 1,600 steps learns the trap as well at half the compute (``base/trap_learned`` shows it).
        batch_size: strings per optimiser step.
        lr: peak AdamW learning rate (warm-up over 5% of the steps, cosine decay; core ``pretrain_tiny_lm``).
        weight_decay: AdamW weight decay.
        beta2: AdamW's second-moment decay.
        warmup_frac: share of the steps with linear warm-up.
        seed: initialisation, corpus and shuffling seed.
    """

    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_strings: int = 51_200
    epochs: int = 4
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    beta2: float = 0.999
    warmup_frac: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("n_layer", "n_embd", "n_head", "n_strings", "epochs", "batch_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TrapBaseConfig.{f} must be an integer >= 1, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"TrapBaseConfig.n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"TrapBaseConfig.lr must be a finite number > 0, got {self.lr!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"TrapBaseConfig.weight_decay must be finite and >= 0, got {self.weight_decay!r}")
        if self.seed < 0:
            raise ValueError(f"TrapBaseConfig.seed must be >= 0, got {self.seed}")

    @property
    def steps(self) -> int:
        """Optimiser steps, ``ceil(epochs * n_strings / batch_size)``."""
        return math.ceil(self.epochs * self.n_strings / self.batch_size)

    def spec(self):
        """The core ``TinyLMSpec`` (byte tokenizer, one example per string, 16-token window)."""
        from iclr25.core.lm import TinyLMSpec

        return TinyLMSpec(tokenizer="byte", n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head,
                          n_positions=32, packing="sequences", seq_len=16, steps=None, epochs=float(self.epochs),
                          batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay, beta2=self.beta2,
                          warmup_frac=self.warmup_frac, seed=self.seed)


@dataclass
class TrapBase:
    """A pre-trained base: ``model`` (GPT-2, eval mode, CPU), ``tokenizer`` (byte tokenizer, left padding),
    ``info`` (dict: pretrain_seconds, final_loss, steps, cached, path)."""

    model: object
    tokenizer: object
    info: dict


def trap_corpus(task: TrapArithmeticTask, n_strings: int, seed: int) -> list[tuple[str, str]]:
    """``n_strings`` ``(prompt, answer)`` pairs: operands uniform over the task's prompts, answers from the
    data-generating distribution (numpy generator seeded with ``seed``)."""
    rng = np.random.default_rng(seed)
    all_pairs = task.pairs()
    pairs = all_pairs[rng.integers(0, len(all_pairs), n_strings)]
    answers = task.sample_answers(pairs, rng)
    cands = task.candidates
    return [(f"{a}+{b}=", cands[y]) for (a, b), y in zip(pairs, answers)]


def use_fused_gelu(model) -> None:
    """Swap GPT-2's ``gelu_new`` (a chain of Python-level elementwise ops) for torch's fused
    ``gelu(approximate="tanh")``: the same function (max difference ~1e-6), about 40% less CPU time per
    forward of the tiny model. Recorded in the config, so ``save_pretrained`` / ``from_pretrained`` keep it."""
    from transformers.activations import ACT2FN

    if getattr(model.config, "model_type", None) != "gpt2":
        return
    model.config.activation_function = "gelu_pytorch_tanh"
    for block in model.transformer.h:
        block.mlp.act = ACT2FN["gelu_pytorch_tanh"]


def cached_trap_base(task: TrapArithmeticTask = TrapArithmeticTask(), cfg: TrapBaseConfig = TrapBaseConfig(), *,
                     cache: str | Path | None = None, progress: bool = True) -> TrapBase:
    """The pre-trained base for ``(task, cfg)`` through core ``cached_tiny_lm``: trained once (answer-only
    loss), then reloaded from ``<cache>/sharpening/tinylm-<key>``.

    Args:
        cache: cache root (default: the iclr25 user cache, ``$ICLR25_CACHE`` or ``~/.cache/iclr25``).

    Returns:
        :class:`TrapBase`; ``info["cached"]`` says whether it was loaded, ``info["pretrain_seconds"]`` is the
        one-time pre-training time (measured when it was trained), ``info["final_loss"]`` the last step's
        answer loss (nats/token; the data distribution's floor is its conditional entropy).
    """
    from iclr25.core.lm import byte_tokenizer, cached_tiny_lm
    from iclr25.core.lm.pretrain import corpus_sha256, tiny_lm_dir

    texts = trap_corpus(task, cfg.n_strings, cfg.seed)
    spec = cfg.spec()
    folder = tiny_lm_dir("sharpening", spec, corpus_sha256(texts), cache)
    cached = (folder / "config.json").is_file()
    if not cached:
        log.info("pre-training the trap base once (%d steps); cached at %s", cfg.steps, folder)
    t0 = time.perf_counter()
    model, _, folder = cached_tiny_lm("sharpening", texts, spec, cache=cache, progress=progress)
    seconds = time.perf_counter() - t0
    train = json.loads((Path(folder) / "tinylm_train.json").read_text()) if (Path(folder) / "tinylm_train.json").is_file() else {}
    use_fused_gelu(model)
    model.eval()
    info = {"cached": cached, "path": str(folder), "pretrain_seconds": float(train.get("seconds", seconds)),
            "load_seconds": seconds if cached else 0.0, "final_loss": train.get("final_loss"),
            "steps": train.get("steps", cfg.steps), "task": asdict(task), "config": asdict(cfg)}
    return TrapBase(model, byte_tokenizer(padding_side="left"), info)
