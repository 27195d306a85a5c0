"""Pre-training a tiny GPT-2 on a small corpus, cached under the user cache.

Several papers need a small *pre-trained* base model on CPU (a reference policy, a base that
already knows some facts or a skill). :func:`cached_tiny_lm` trains the tokenizer and a
:func:`~iclr25.core.lm.models.tiny_causal_lm` once per (spec, corpus) and reloads it afterwards
from ``<cache>/<namespace>/tinylm-<key>`` (``save_pretrained``: safetensors + tokenizer.json).

Two ways to feed the corpus (:attr:`TinyLMSpec.packing`):

- ``"stream"``: the texts joined with EOS into one token stream, random windows of ``seq_len``
  tokens per example (classic LM pre-training; ``steps`` optimiser steps);
- ``"sequences"``: each text one example (BOS when ``add_bos``, EOS appended, truncated to
  ``seq_len`` tokens — the count truncated is logged), padded per batch, ``epochs`` passes.

Texts given as ``(prompt, response)`` pairs train on the response tokens only (and EOS), which
is what supervised fine-tuning on a task needs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["TinyLMSpec", "train_bpe_tokenizer", "pretrain_tiny_lm", "cached_tiny_lm", "tiny_lm_dir",
           "corpus_sha256"]

log = logging.getLogger(__name__)
_FORMAT = "tinylm-v1"


@dataclass(frozen=True)
class TinyLMSpec:
    """Tokenizer, size and training schedule of a tiny pre-trained GPT-2.

    Args:
        tokenizer: ``"bpe"`` (a byte-level BPE trained on the corpus) or ``"byte"`` (the core
            byte tokenizer, 258 ids; every UTF-8 byte is one token).
        vocab_size: BPE vocabulary size, special tokens included (ignored for ``"byte"``).
        add_bos: prepend BOS (``<|endoftext|>``) to every encoded text.
        n_layer, n_embd, n_head, n_positions, dropout: model size (see ``tiny_causal_lm``).
        packing: ``"stream"`` or ``"sequences"`` (module docstring).
        seq_len: tokens per training example (window length, or truncation length).
        steps: optimiser steps (``None`` with ``"sequences"``: ``epochs`` passes).
        epochs: passes over the texts with ``"sequences"`` when ``steps`` is ``None``.
        batch_size: examples per step.
        lr: peak AdamW learning rate (linear warm-up over ``warmup_frac`` of the steps, then
            cosine decay to 0).
        weight_decay, beta1, beta2: AdamW.
        warmup_frac: warm-up share of the steps.
        grad_clip: gradient-norm clip (``0``: none).
        seed: initialisation, tokenizer-independent sampling and shuffling seed.
    """

    tokenizer: Literal["bpe", "byte"] = "bpe"
    vocab_size: int = 2048
    add_bos: bool = False
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 256
    dropout: float = 0.0
    packing: Literal["stream", "sequences"] = "stream"
    seq_len: int = 96
    steps: int | None = 250
    epochs: float = 1.0
    batch_size: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    warmup_frac: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.tokenizer not in ("bpe", "byte"):
            raise ValueError(f"TinyLMSpec.tokenizer must be 'bpe' or 'byte', got {self.tokenizer!r}")
        if self.packing not in ("stream", "sequences"):
            raise ValueError(f"TinyLMSpec.packing must be 'stream' or 'sequences', got {self.packing!r}")
        for name in ("vocab_size", "n_layer", "n_embd", "n_head", "n_positions", "seq_len", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyLMSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.seq_len > self.n_positions:
            raise ValueError(f"TinyLMSpec.seq_len={self.seq_len} exceeds n_positions={self.n_positions}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"TinyLMSpec.steps must be >= 1 (or None), got {self.steps}")
        if self.packing == "stream" and self.steps is None:
            raise ValueError("TinyLMSpec: packing='stream' needs steps")
        def bad(name: str, rule: str) -> ValueError:
            return ValueError(f"TinyLMSpec.{name}={getattr(self, name)!r} must be finite and {rule}")

        checks = {"lr": (lambda v: v > 0, "> 0"), "epochs": (lambda v: v > 0, "> 0"),
                  "weight_decay": (lambda v: v >= 0, ">= 0"), "beta1": (lambda v: 0 <= v < 1, "in [0, 1)"),
                  "beta2": (lambda v: 0 <= v < 1, "in [0, 1)"), "warmup_frac": (lambda v: 0 <= v <= 1, "in [0, 1]"),
                  "grad_clip": (lambda v: v >= 0, ">= 0"), "dropout": (lambda v: 0 <= v < 1, "in [0, 1)")}
        for name, (ok, rule) in checks.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
                raise bad(name, rule)

    def key(self, corpus_sha: str) -> str:
        """Cache key of this spec trained on a corpus with sha256 ``corpus_sha``."""
        blob = json.dumps([asdict(self), corpus_sha, _FORMAT], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def corpus_sha256(texts: Sequence[str | tuple[str, str]]) -> str:
    """sha256 over the corpus (texts, or prompt/response pairs), order-sensitive."""
    h = hashlib.sha256()
    for t in texts:
        parts = (t,) if isinstance(t, str) else tuple(t)
        h.update(json.dumps(parts, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


def _add_bos(fast: Any) -> None:
    from tokenizers.processors import TemplateProcessing

    bos = fast.bos_token
    fast._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A",
                                                        special_tokens=[(bos, fast.bos_token_id)])


def train_bpe_tokenizer(texts: Sequence[str], vocab_size: int = 2048, *, add_bos: bool = False,
                        min_frequency: int = 2):
    """Train a byte-level BPE tokenizer on ``texts``.

    Special tokens: ``<|endoftext|>`` (id 0; BOS and EOS) and ``<pad>`` (id 1).

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` (prepends BOS when ``add_bos``).

    Raises:
        ValueError: no texts, or ``vocab_size`` smaller than the byte alphabet plus specials.
    """
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise ValueError("train_bpe_tokenizer: no texts")
    if vocab_size < 258:
        raise ValueError(f"vocab_size={vocab_size} must be >= 258 (256 bytes + 2 special tokens)")
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(list(texts), vocab_size=vocab_size, min_frequency=min_frequency,
                            special_tokens=["<|endoftext|>", "<pad>"], show_progress=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<pad>",
                                   clean_up_tokenization_spaces=False)
    if add_bos:
        _add_bos(fast)
    return fast


def _tokenizer(spec: TinyLMSpec, texts: list[str]):
    if spec.tokenizer == "bpe":
        return train_bpe_tokenizer(texts, spec.vocab_size, add_bos=spec.add_bos)
    from .tokenizer import byte_tokenizer

    tok = byte_tokenizer(model_max_length=spec.n_positions)
    if spec.add_bos:
        _add_bos(tok)
    return tok


def pretrain_tiny_lm(texts: Sequence[str | tuple[str, str]], spec: TinyLMSpec = TinyLMSpec(), *,
                     tokenizer: Any = None, progress: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """Train a tokenizer (unless given) and a tiny GPT-2 on ``texts``.

    Args:
        texts: strings, or ``(prompt, response)`` pairs (loss on the response and EOS only; needs
            ``packing="sequences"``).
        spec: the :class:`TinyLMSpec`.
        tokenizer: an existing tokenizer to use instead of training one.
        progress: show a progress bar (off anyway under ``--quiet``).

    Returns:
        ``(model, tokenizer, log)``: ``GPT2LMHeadModel`` in eval mode on CPU, the tokenizer, and
        ``{"steps", "seconds", "cpu_seconds", "final_loss", "n_texts", "n_tokens", "n_truncated"}`` (``seconds``
        wall time, ``cpu_seconds`` this process's CPU time, both of the training loop).

    Raises:
        ValueError: empty corpus, pairs with ``packing="stream"``, a stream shorter than one window.
    """
    import numpy as np
    import torch

    from ..progress import progress as bar_of
    from .models import tiny_causal_lm

    if not texts:
        raise ValueError("pretrain_tiny_lm: no texts")
    pairs = not isinstance(texts[0], str)
    if pairs and spec.packing != "sequences":
        raise ValueError("pretrain_tiny_lm: (prompt, response) pairs need packing='sequences'")
    t0, c0 = time.perf_counter(), time.process_time()
    flat = [t if isinstance(t, str) else t[0] + t[1] for t in texts]
    tok = tokenizer if tokenizer is not None else _tokenizer(spec, flat)
    eos, pad = tok.eos_token_id, tok.pad_token_id
    torch.manual_seed(spec.seed)
    model = tiny_causal_lm(vocab_size=len(tok), n_positions=spec.n_positions, n_embd=spec.n_embd,
                           n_layer=spec.n_layer, n_head=spec.n_head, dropout=spec.dropout, seed=spec.seed,
                           eos_token_id=eos, pad_token_id=pad)
    if tok.bos_token_id is not None:
        model.config.bos_token_id = tok.bos_token_id
    rng = np.random.default_rng(spec.seed)
    L = spec.seq_len
    n_truncated = 0
    if spec.packing == "stream":
        ids = tok(flat, add_special_tokens=spec.add_bos)["input_ids"]
        stream = np.fromiter((t for seq in ids for t in (*seq, eos)), dtype=np.int64)
        if len(stream) < L + 2:
            raise ValueError(f"pretrain_tiny_lm: the corpus has {len(stream)} tokens, fewer than one "
                             f"window of seq_len={L}")
        n_tokens = int(len(stream))
        n_steps = int(spec.steps)  # type: ignore[arg-type]

        def batch_at(step: int):
            starts = rng.integers(0, len(stream) - L, size=spec.batch_size)
            x = torch.from_numpy(np.stack([stream[s:s + L] for s in starts]))
            return x, torch.ones_like(x), x.clone()
    else:
        if pairs:
            p_ids = tok([t[0] for t in texts], add_special_tokens=spec.add_bos)["input_ids"]  # type: ignore[index]
            r_ids = tok([t[1] for t in texts], add_special_tokens=False)["input_ids"]  # type: ignore[index]
            seqs, masks = [], []
            for p, r in zip(p_ids, r_ids):
                full = list(p) + list(r) + [eos]
                m = [0] * len(p) + [1] * (len(r) + 1)
                if len(full) > L:
                    n_truncated += 1
                seqs.append(full[:L])
                masks.append(m[:L])
        else:
            enc = tok(flat, add_special_tokens=spec.add_bos)["input_ids"]
            seqs, masks = [], []
            for s in enc:
                full = list(s) + [eos]
                if len(full) > L:
                    n_truncated += 1
                seqs.append(full[:L])
                masks.append([0] + [1] * (len(full[:L]) - 1) if spec.add_bos else [1] * len(full[:L]))
        if n_truncated:
            log.info("pretrain_tiny_lm: %d of %d texts truncated to seq_len=%d tokens", n_truncated, len(seqs), L)
        n_tokens = sum(len(s) for s in seqs)
        n_steps = spec.steps or max(1, math.ceil(spec.epochs * len(seqs) / spec.batch_size))
        order = np.concatenate([rng.permutation(len(seqs))
                                for _ in range(math.ceil(n_steps * spec.batch_size / len(seqs)) + 1)])

        def batch_at(step: int):
            idx = order[step * spec.batch_size:(step + 1) * spec.batch_size]
            width = max(len(seqs[i]) for i in idx)
            x = torch.full((len(idx), width), pad, dtype=torch.long)
            attn = torch.zeros_like(x)
            lab = torch.full_like(x, -100)
            for row, i in enumerate(idx):
                s = torch.tensor(seqs[i])
                x[row, :len(s)] = s
                attn[row, :len(s)] = 1
                m = torch.tensor(masks[i], dtype=torch.bool)
                lab[row, :len(s)] = s.masked_fill(~m, -100)
            return x, attn, lab

    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay,
                            betas=(spec.beta1, spec.beta2))
    warm = max(1, int(spec.warmup_frac * n_steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / n_steps))))
    model.train()
    bar = bar_of(range(n_steps), desc="pre-train tiny LM", unit="step", quiet=None if progress else True)
    loss = torch.tensor(float("nan"))
    for step in bar:
        x, attn, lab = batch_at(step)
        loss = model(input_ids=x, attention_mask=attn, labels=lab).loss
        if not torch.isfinite(loss):
            raise FloatingPointError(f"pretrain_tiny_lm: loss became {loss.item()} at step {step}; "
                                     f"lower lr (now {spec.lr})")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if spec.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        opt.step()
        sched.step()
        if step % 25 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    info = {"steps": n_steps, "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "final_loss": float(loss.item()),
            "n_texts": len(texts), "n_tokens": n_tokens, "n_truncated": n_truncated}
    log.info("pre-trained a tiny LM (%d layers, d=%d, %d steps) in %.1f s, final loss %.3f",
             spec.n_layer, spec.n_embd, n_steps, info["seconds"], info["final_loss"])
    return model, tok, info


def tiny_lm_dir(namespace: str, spec: TinyLMSpec, corpus_sha: str, cache: str | Path | None = None) -> Path:
    """The cache folder of ``spec`` trained on a corpus: ``<cache>/<namespace>/tinylm-<key>``."""
    from ..data import cache_dir

    root = Path(cache) if cache is not None else cache_dir()
    return root / namespace / f"tinylm-{spec.key(corpus_sha)}"


def cached_tiny_lm(namespace: str, texts: Sequence[str | tuple[str, str]], spec: TinyLMSpec = TinyLMSpec(), *,
                   cache: str | Path | None = None, progress: bool = True) -> tuple[Any, Any, Path]:
    """The tiny LM for ``(spec, texts)``: reloaded from the cache, or pre-trained and saved there.

    Args:
        namespace: the package's cache folder name (e.g. ``"vbon"``).
        texts, spec, progress: as in :func:`pretrain_tiny_lm`.
        cache: cache root (default :func:`iclr25.core.data.cache_dir`).

    Returns:
        ``(model, tokenizer, folder)``; the folder holds the model (safetensors), the tokenizer,
        ``tinylm_spec.json`` and ``tinylm_train.json`` (steps, seconds, final loss).
    """
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    d = tiny_lm_dir(namespace, spec, corpus_sha256(texts), cache)
    if (d / "config.json").is_file() and (d / "tokenizer.json").is_file():
        tok = PreTrainedTokenizerFast.from_pretrained(d)
        if spec.add_bos:
            _add_bos(tok)
        return AutoModelForCausalLM.from_pretrained(d).eval(), tok, d
    log.info("pre-training a tiny LM once; it is cached at %s", d)
    model, tok, info = pretrain_tiny_lm(texts, spec, progress=progress)
    tmp = d.with_name(d.name + f".tmp-{time.time_ns()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "tinylm_spec.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    (tmp / "tinylm_train.json").write_text(json.dumps(info, indent=2) + "\n")
    if d.exists():  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
        return cached_tiny_lm(namespace, texts, spec, cache=cache, progress=progress)
    tmp.rename(d)
    return model, tok, d
