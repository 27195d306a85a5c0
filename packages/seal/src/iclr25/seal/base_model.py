"""The tiny aligned base model θ₀ of a safety task (spec §4.1): a word-level fast tokenizer (``tokenizers``)
over the task's texts and the core ``tiny_causal_lm`` (3 layers, width 96, 4 heads) pre-trained on task A +
harmful -> refusal by core ``pretrain_tiny_lm``, cached on disk."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .safety_task import SPECIAL_TOKENS, SafetyTask

__all__ = ["word_tokenizer", "base_spec", "aligned_base"]

def word_tokenizer(texts: Sequence[str], *, vocab_size: int = 5000, lowercase: bool = True,
                   model_max_length: int = 40):
    """A word-level fast tokenizer trained on ``texts`` (``tokenizers``' WordLevel model).

    Words and punctuation runs are tokens (``Whitespace`` pre-tokenizer); the ``vocab_size`` most
    frequent are kept, others map to ``<unk>``. Specials: ``<pad>`` 0, ``<unk>`` 1, ``<bos>`` 2 (prepended
    when ``add_special_tokens``), ``<eos>`` 3. Decoding joins tokens with spaces.

    Returns:
        ``transformers.PreTrainedTokenizerFast``; ``save_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)``
        round-trip it.

    Raises:
        ValueError: no texts, or ``vocab_size`` too small for the special tokens.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise ValueError("word_tokenizer: no texts")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"word_tokenizer: vocab_size={vocab_size} must exceed the {len(SPECIAL_TOKENS)} special tokens")
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=list(SPECIAL_TOKENS),
                                        show_progress=False)
    tok.train_from_iterator(list(texts), trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", model_max_length=model_max_length,
                                   clean_up_tokenization_spaces=False)
    return fast


def base_spec(task: SafetyTask, seed: int = 0):
    """The core ``TinyLMSpec`` of the aligned base (spec §4.1-4.2: 3 layers, width 96, 4 heads,
    8 epochs, lr 2e-3, batch 64, one example per sequence, loss on the response and EOS)."""
    from iclr25.core.lm.pretrain import TinyLMSpec

    return TinyLMSpec(tokenizer="byte", add_bos=True, n_layer=3, n_embd=96, n_head=4, n_positions=task.max_len,
                      packing="sequences", seq_len=task.max_len, steps=None, epochs=8, batch_size=64, lr=2e-3,
                      weight_decay=0.0, warmup_frac=0.05, seed=seed)


def aligned_base(task: SafetyTask, seed: int = 0, *, cache: str | Path | None = None,
                 progress: bool = False, epochs: int | None = None) -> tuple[Any, Any, Path]:
    """The tiny aligned base θ₀ of ``task``: a word tokenizer over the task's texts and a core
    ``tiny_causal_lm`` pre-trained on ``task.base`` with core ``pretrain_tiny_lm``.

    Cached (``save_pretrained``: safetensors + tokenizer.json) under ``<cache>/seal/base-<key>``, the
    key hashing the spec, the corpus and the vocabulary.

    Args:
        epochs: pre-training epochs (default: the spec's 8, as the reproduction uses; fewer give a
            quicker, less aligned base for a first look — it is cached under its own key).

    Raises:
        ValueError: ``epochs`` < 1.

    Returns:
        ``(model, tokenizer, folder)``; the model in eval mode on CPU.
    """
    import time

    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from iclr25.core.data import cache_dir
    from iclr25.core.lm.pretrain import corpus_sha256, pretrain_tiny_lm

    spec = base_spec(task, seed)
    if epochs is not None:
        if epochs < 1:
            raise ValueError(f"epochs={epochs} must be >= 1 (or None for the spec's {spec.epochs})")
        spec = replace(spec, epochs=int(epochs))
    pairs = [(task.template.format(p), r) for p, r in zip(task.base.prompts, task.base.responses)]
    tok = word_tokenizer(task.vocab_texts, vocab_size=task.vocab_size, model_max_length=task.max_len)
    vocab_sha = hashlib.sha256(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest()
    key = hashlib.sha256(json.dumps([asdict(spec), corpus_sha256(pairs), vocab_sha, "seal-base-v1"]).encode()
                         ).hexdigest()[:16]
    root = Path(cache) if cache is not None else cache_dir()
    d = root / "seal" / f"base-{key}"
    if (d / "config.json").is_file() and (d / "tokenizer.json").is_file():
        return AutoModelForCausalLM.from_pretrained(d).eval(), PreTrainedTokenizerFast.from_pretrained(d), d
    model, tok, info = pretrain_tiny_lm(pairs, spec, tokenizer=tok, progress=progress)
    tmp = d.with_name(d.name + f".tmp-{time.time_ns()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "seal_base.json").write_text(json.dumps({"spec": asdict(spec), "train": info, "task": task.name,
                                                    "seed": seed}, indent=2) + "\n")
    if d.exists():
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(d)
    return AutoModelForCausalLM.from_pretrained(d).eval(), PreTrainedTokenizerFast.from_pretrained(d), d
