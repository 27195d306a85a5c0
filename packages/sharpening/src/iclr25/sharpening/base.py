"""The trap task's base model ``pi_base``: core ``tiny_causal_lm`` + core ``byte_tokenizer``, pre-trained
from scratch on strings sampled from :class:`~iclr25.sharpening.task.TrapArithmeticTask`, cached in the
user cache keyed by the task, the training config and the seed.

Why a package-specific loop rather than core ``pretrain_tiny_lm``: the trap needs an *answer-only*
next-token loss (the prompt digits are uniform noise that a full-text loss would spend the tiny model's
capacity on, and the issue's probe that learns the trap in ~1,500 steps used answer-only loss), and the
byte tokenizer spells every digit and symbol as one token, so there is no tokenizer to train either.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .task import TrapArithmeticTask

__all__ = ["TrapBaseConfig", "TrapBase", "encode_trap", "pretrain_trap_base", "cached_trap_base",
           "sharpening_cache_dir", "use_fused_gelu"]

log = logging.getLogger(__name__)

#: Bump when the training procedure changes, so stale cached bases are not reused.
_RECIPE = "trap-base-v1"


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
        lr: peak AdamW learning rate of the one-cycle schedule.
        weight_decay: AdamW weight decay.
        seed: initialisation, data and shuffling seed.
    """

    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_strings: int = 51_200
    epochs: int = 4
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("n_layer", "n_embd", "n_head", "n_strings", "epochs", "batch_size"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
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
        """Optimiser steps, ``ceil(n_strings / batch_size) * epochs``."""
        return math.ceil(self.n_strings / self.batch_size) * self.epochs


@dataclass
class TrapBase:
    """A pre-trained base: ``model`` (GPT-2, eval mode, CPU), ``tokenizer`` (byte tokenizer, left padding),
    ``info`` (dict: pretrain_seconds, final_loss, steps, cached, path, key)."""

    model: object
    tokenizer: object
    info: dict


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


def sharpening_cache_dir() -> Path:
    """``<iclr25 cache>/sharpening`` (``$ICLR25_CACHE`` or ``$XDG_CACHE_HOME/iclr25`` or ``~/.cache/iclr25``)."""
    from iclr25.core.data import cache_dir

    return cache_dir() / "sharpening"


def _cache_key(task: TrapArithmeticTask, cfg: TrapBaseConfig) -> str:
    blob = json.dumps([_RECIPE, asdict(task), asdict(cfg)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def encode_trap(task: TrapArithmeticTask, pairs: np.ndarray, answers: np.ndarray, eos_id: int):
    """Token ids ``"a+b=" + answer + EOS`` for the byte tokenizer, vectorised: ``(B, 9)`` int64 numpy.

    Byte tokenizer ids equal the UTF-8 byte values, so digit ``d`` is ``48 + d``, ``+`` is 43 and ``=``
    is 61 (the test suite checks this against the tokenizer itself).
    """
    p = np.asarray(pairs, dtype=np.int64)
    y = np.asarray(answers, dtype=np.int64)
    n = len(p)
    out = np.empty((n, 9), dtype=np.int64)
    out[:, 0], out[:, 1] = 48 + p[:, 0] // 10, 48 + p[:, 0] % 10
    out[:, 2] = 43
    out[:, 3], out[:, 4] = 48 + p[:, 1] // 10, 48 + p[:, 1] % 10
    out[:, 5] = 61
    out[:, 6], out[:, 7] = 48 + y // 10, 48 + y % 10
    out[:, 8] = eos_id
    return out


def pretrain_trap_base(task: TrapArithmeticTask, cfg: TrapBaseConfig = TrapBaseConfig(), *,
                       progress: bool = True) -> TrapBase:
    """Pre-train ``tiny_causal_lm`` on ``cfg.n_strings`` strings sampled from ``task`` (answer-only loss).

    The operands of each string are uniform over all prompts of the task; the answer is drawn from the
    data-generating distribution. The loss is the next-token cross-entropy on the two answer digits and
    EOS only (nats/token); AdamW with a one-cycle schedule (peak ``cfg.lr``) and gradient clipping 1.0.

    Returns:
        :class:`TrapBase` with ``info["final_loss"]`` (mean answer loss over the last 5% of steps,
        nats/token) and ``info["pretrain_seconds"]``.
    """
    import torch

    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    from .progress import progress_bar

    t0 = time.perf_counter()
    tok = byte_tokenizer(padding_side="left")
    rng = np.random.default_rng(cfg.seed)
    all_pairs = task.pairs()
    pairs = all_pairs[rng.integers(0, len(all_pairs), cfg.n_strings)]
    answers = task.sample_answers(pairs, rng)
    ids = torch.from_numpy(encode_trap(task, pairs, answers, tok.eos_token_id))
    model = tiny_causal_lm(vocab_size=len(tok), n_positions=32, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                           n_head=cfg.n_head, seed=cfg.seed, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)
    use_fused_gelu(model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps, pct_start=0.1)
    gen = torch.Generator().manual_seed(cfg.seed)
    per_epoch = math.ceil(cfg.n_strings / cfg.batch_size)
    losses: list[float] = []
    model.train()
    bar = progress_bar(range(cfg.steps), desc="pre-train trap base", total=cfg.steps, unit="step",
                       enabled=progress)
    order = None
    for step in bar:
        if step % per_epoch == 0:
            order = torch.randperm(cfg.n_strings, generator=gen)
        j = step % per_epoch
        batch = ids[order[j * cfg.batch_size:(j + 1) * cfg.batch_size]]
        logits = model(input_ids=batch).logits[:, 5:8]                       # predict d1, d2, EOS
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 6:9].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"pre-training loss is {losses[-1]} at step {step}; lower TrapBaseConfig.lr")
    model.eval()
    tail = losses[-max(1, len(losses) // 20):]
    info = {"pretrain_seconds": time.perf_counter() - t0, "final_loss": float(np.mean(tail)),
            "steps": cfg.steps, "cached": False, "task": asdict(task), "config": asdict(cfg), "recipe": _RECIPE}
    return TrapBase(model, tok, info)


def cached_trap_base(task: TrapArithmeticTask = TrapArithmeticTask(), cfg: TrapBaseConfig = TrapBaseConfig(), *,
                     cache: str | Path | None = None, progress: bool = True) -> TrapBase:
    """The pre-trained base for ``(task, cfg)``: loaded from ``<cache>/base-<key>`` or trained once and saved
    there (``save_pretrained``: safetensors weights + tokenizer + ``info.json``).

    Args:
        cache: folder holding cached bases (default :func:`sharpening_cache_dir`).

    Returns:
        :class:`TrapBase`; ``info["cached"]`` says whether it was loaded, ``info["pretrain_seconds"]`` is
        the one-time pre-training time (measured when it was trained).
    """
    from transformers import GPT2LMHeadModel

    from iclr25.core.lm import byte_tokenizer

    root = Path(cache) if cache is not None else sharpening_cache_dir()
    key = _cache_key(task, cfg)
    path = root / f"base-{key}"
    if (path / "info.json").is_file() and (path / "model.safetensors").is_file():
        model = GPT2LMHeadModel.from_pretrained(path).eval()
        info = json.loads((path / "info.json").read_text())
        info.update(cached=True, path=str(path), key=key)
        return TrapBase(model, byte_tokenizer(padding_side="left"), info)
    log.info("pre-training the trap base (one time, cached in %s): %d steps", path, cfg.steps)
    base = pretrain_trap_base(task, cfg, progress=progress)
    tmp = root / f".tmp-{key}"
    tmp.mkdir(parents=True, exist_ok=True)
    base.model.save_pretrained(tmp, safe_serialization=True)
    (tmp / "info.json").write_text(json.dumps(base.info, indent=2))
    if path.exists():  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(path)
    base.info.update(path=str(path), key=key)
    return base
