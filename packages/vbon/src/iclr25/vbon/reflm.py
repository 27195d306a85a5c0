"""The embedded tiny reference LM ``pi_ref``: a GPT-2-architecture model (``iclr25.core.lm.tiny_causal_lm``)
pre-trained from scratch on the mirrored movie-review snippets, cached on disk so later runs are offline
and instant (stand-in for ``lvwerra/gpt2-imdb``).

Tokenizer: a byte-level BPE with a 2,048-token vocabulary trained on the same snippets (spec §4.2), or the
core's 258-token byte tokenizer (``tokenizer="byte"``). Both add ``<|endoftext|>`` as BOS to every encoded
text, so prompts are always conditioned on a start token.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

__all__ = ["RefLMConfig", "vbon_cache_dir", "train_bpe_tokenizer", "pretrain_reference_lm", "load_reference_lm"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefLMConfig:
    """Size and pre-training schedule of the embedded reference LM (spec §4.2: quick 2 layers d=128,
    full 4 layers d=256; 1 epoch).

    Args:
        tokenizer: ``"bpe"`` (byte-level BPE, ``vocab_size`` tokens) or ``"byte"`` (core byte tokenizer).
        vocab_size: BPE vocabulary size incl. the two special tokens.
        n_layer, n_embd, n_head: transformer size.
        max_len: longest training sequence in tokens (longer snippets are truncated).
        epochs: passes over the 90% training split.
        batch_size: sequences per step.
        lr: peak AdamW learning rate (linear warm-up over 5% of steps, cosine decay).
        seed: initialisation and shuffling seed.
        max_snippets: train on the first ``max_snippets`` training snippets only (tests); ``None``: all.
    """

    tokenizer: str = "bpe"
    vocab_size: int = 2048
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    max_len: int = 64
    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 2e-3
    seed: int = 0
    max_snippets: int | None = None

    def key(self, data_sha: str) -> str:
        return hashlib.sha256(json.dumps([asdict(self), data_sha, "v1"]).encode()).hexdigest()[:12]


def vbon_cache_dir() -> Path:
    """``<iclr25 cache>/vbon`` (``$ICLR25_CACHE`` or ``~/.cache/iclr25``)."""
    from iclr25.core.data import cache_dir

    return cache_dir() / "vbon"


def _add_bos(fast) -> None:
    from tokenizers.processors import TemplateProcessing

    bos = fast.bos_token
    fast._tokenizer.post_processor = TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, fast.bos_token_id)])


def train_bpe_tokenizer(texts: list[str], vocab_size: int = 2048):
    """Train a byte-level BPE on ``texts``; returns a ``PreTrainedTokenizerFast`` that prepends BOS.

    Specials: ``<|endoftext|>`` (BOS/EOS, id 0) and ``<pad>`` (id 1).
    """
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                            special_tokens=["<|endoftext|>", "<pad>"], show_progress=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<pad>", clean_up_tokenization_spaces=False)
    _add_bos(fast)
    return fast


def _make_tokenizer(cfg: RefLMConfig, texts: list[str]):
    if cfg.tokenizer == "bpe":
        return train_bpe_tokenizer(texts, cfg.vocab_size)
    if cfg.tokenizer == "byte":
        from iclr25.core.lm import byte_tokenizer

        tok = byte_tokenizer()
        _add_bos(tok)
        return tok
    raise ValueError(f"RefLMConfig.tokenizer must be 'bpe' or 'byte', got {cfg.tokenizer!r}")


def pretrain_reference_lm(texts: list[str], cfg: RefLMConfig = RefLMConfig(), progress: bool = True):
    """Train the tokenizer and a ``tiny_causal_lm`` on ``texts`` (plain next-token LM, BOS + text + EOS).

    Returns:
        ``(model, tokenizer)``; the model in eval mode on CPU.
    """
    from iclr25.core.lm import tiny_causal_lm
    from iclr25.core.progress import progress as progress_bar

    if not texts:
        raise ValueError("pretrain_reference_lm: no texts")
    if cfg.max_snippets is not None:
        texts = texts[: cfg.max_snippets]
    tok = _make_tokenizer(cfg, texts)
    g = torch.Generator().manual_seed(cfg.seed)
    enc = tok(texts, add_special_tokens=True)["input_ids"]
    seqs = [torch.tensor((ids + [tok.eos_token_id])[: cfg.max_len]) for ids in enc]
    model = tiny_causal_lm(vocab_size=len(tok), n_positions=max(cfg.max_len, 128), n_embd=cfg.n_embd,
                           n_layer=cfg.n_layer, n_head=cfg.n_head, seed=cfg.seed,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.config.bos_token_id = tok.bos_token_id
    n_steps = max(1, math.ceil(cfg.epochs * len(seqs) / cfg.batch_size))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95))
    warm = max(1, n_steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / n_steps))))
    order = torch.cat([torch.randperm(len(seqs), generator=g) for _ in range(math.ceil(cfg.epochs) + 1)])
    model.train()
    bar = progress_bar(range(n_steps), desc="pretrain reference LM", quiet=None if progress else True)
    for s in bar:
        idx = order[s * cfg.batch_size:(s + 1) * cfg.batch_size]
        batch = torch.nn.utils.rnn.pad_sequence([seqs[i] for i in idx], batch_first=True,
                                                padding_value=tok.pad_token_id)
        attn = (batch != tok.pad_token_id).long()
        labels = batch.masked_fill(attn == 0, -100)
        loss = model(input_ids=batch, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if s % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return model, tok


def load_reference_lm(cfg: RefLMConfig = RefLMConfig(), data=None, cache: str | Path | None = None,
                      progress: bool = True):
    """The cached reference LM for ``cfg``: loaded from ``<cache>/reflm-<key>`` or pre-trained on the
    mirrored polarity train split and saved there (``save_pretrained``, safetensors).

    Returns:
        ``(model, tokenizer)``, model in eval mode.

    Raises:
        iclr25.core.data.DataNotFoundError: when it must be trained and the mirror is missing.
    """
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from .data import load_polarity

    data = data or load_polarity()
    d = Path(cache) if cache else vbon_cache_dir() / f"reflm-{cfg.key(data.sha)}"
    if (d / "config.json").is_file() and (d / "tokenizer.json").is_file():
        tok = PreTrainedTokenizerFast.from_pretrained(d)
        _add_bos(tok)
        return AutoModelForCausalLM.from_pretrained(d).eval(), tok
    log.info("pre-training the reference LM (cached at %s)", d)
    model, tok = pretrain_reference_lm(data.train_texts, cfg, progress=progress)
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    (d / "reflm_config.json").write_text(json.dumps(asdict(cfg)))
    return model, tok
