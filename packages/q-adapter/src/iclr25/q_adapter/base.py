"""The embedded default base model ``pi_1``: a tiny GPT-2 pre-trained on CPU from mirrored text, cached.

Corpus (general-assistant text, never the new preference): the chosen dialogues of the HH-RLHF
helpful test split (minus a held-out part for the forgetting metric) and DSP ``normal`` (original
Alpaca) responses of the training queries, rendered as ``"## Human:\\n{q}\\n\\n## Assistant:\\n{r}"``.
Tokenizer: a byte-level BPE (vocab 2,048) trained on that corpus with ``tokenizers`` (spec Sec. 4.2),
or the core's byte tokenizer (``tokenizer="byte"``). The model and tokenizer are saved with
``save_pretrained`` under the iclr25 cache and reloaded on the next call.

:func:`load_base` also accepts any local path or Hugging Face id (``AutoModelForCausalLM``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from iclr25.core.data import cache_dir
from iclr25.core.seed import seed_everything

from .data import dsp_prompt, load_dsp, load_hh_rlhf, split_queries

__all__ = ["BaseLMConfig", "general_corpus", "pretrain_base", "load_base", "heldout_general_texts", "check_context",
           "model_context"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaseLMConfig:
    """Size and pre-training budget of the embedded base LM (spec Sec. 4.2)."""

    n_layer: int = 2
    """Transformer blocks (quick 2, full 4)."""
    n_embd: int = 128
    """Width (quick 128, full 256)."""
    n_head: int = 4
    """Attention heads."""
    n_positions: int = 192
    """Context length."""
    vocab_size: int = 2048
    """BPE vocabulary (ignored for ``tokenizer="byte"``)."""
    tokenizer: str = "bpe"
    """``"bpe"`` (trained here) or ``"byte"`` (core's byte tokenizer, 258 ids)."""
    seq_len: int = 96
    """Tokens per pre-training sequence."""
    batch_size: int = 16
    steps: int = 250
    lr: float = 3e-3
    seed: int = 0
    dsp_train_queries: int = 500
    """DSP queries (of 661, seeded split) in the train part; their ``normal`` answers join the corpus."""
    heldout_helpful: int = 300
    """Helpful dialogues kept out of pre-training (the forgetting metric's held-out general text)."""

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


QUICK_BASE = BaseLMConfig()
FULL_BASE = BaseLMConfig(n_layer=4, n_embd=256, n_head=4, n_positions=256, seq_len=128, steps=600, lr=2e-3)


def general_corpus(cfg: BaseLMConfig) -> list[str]:
    """The pre-training texts (see module docstring)."""
    helpful = load_hh_rlhf(split="helpful")
    texts = [p.prompt + p.chosen for p in helpful[cfg.heldout_helpful:]]
    recs = load_dsp()
    train_idx, _ = split_queries(len(recs), cfg.dsp_train_queries, seed=0)
    texts += [dsp_prompt(recs[i]["query"]) + recs[i]["responses"]["normal"] for i in train_idx]
    return texts


def heldout_general_texts(n_helpful: int = 300, n_harmless: int = 300) -> list[str]:
    """Held-out general text for the forgetting metric: the first ``n_helpful`` helpful dialogues (never
    in the pre-training corpus) and ``n_harmless`` harmless-base chosen dialogues."""
    helpful = load_hh_rlhf(split="helpful")[:n_helpful]
    harmless = load_hh_rlhf(split="harmless")[:n_harmless]
    return [p.prompt + p.chosen for p in helpful] + [p.prompt + p.chosen for p in harmless]


def _train_bpe(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<pad>", clean_up_tokenization_spaces=False)


def pretrain_base(cfg: BaseLMConfig = QUICK_BASE, *, out_dir: str | Path | None = None,
                  progress: bool = True) -> tuple[Any, Any]:
    """Train the tokenizer and the tiny GPT-2 on the general corpus; save both to ``out_dir``.

    Returns: ``(model, tokenizer)`` — ``GPT2LMHeadModel`` in eval mode and a fast tokenizer.
    Raises: :class:`iclr25.core.data.DataNotFoundError` when the mirrored text is absent.
    """
    from iclr25.core.progress import progress as _progress

    from iclr25.core.lm import byte_tokenizer, tiny_causal_lm

    t0 = time.perf_counter()
    seed_everything(cfg.seed)
    texts = general_corpus(cfg)
    tok = _train_bpe(texts, cfg.vocab_size) if cfg.tokenizer == "bpe" else byte_tokenizer()
    eos = tok.eos_token_id
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    stream = np.fromiter((t for seq in ids for t in (*seq, eos)), dtype=np.int64)
    model = tiny_causal_lm(vocab_size=len(tok), n_positions=cfg.n_positions, n_embd=cfg.n_embd,
                           n_layer=cfg.n_layer, n_head=cfg.n_head, seed=cfg.seed,
                           eos_token_id=eos, pad_token_id=tok.pad_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * min(s, cfg.steps) / cfg.steps)))
    rng = np.random.default_rng(cfg.seed)
    model.train()
    bar = _progress(range(cfg.steps), desc="pre-train base", unit="step", quiet=None if progress else True)
    L = cfg.seq_len
    for _ in bar:
        starts = rng.integers(0, len(stream) - L - 1, size=cfg.batch_size)
        x = torch.from_numpy(np.stack([stream[s:s + L] for s in starts]))
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    log.info("pre-trained base LM (%d layers, d=%d, %d tokens in corpus) in %.1f s, last loss %.3f",
             cfg.n_layer, cfg.n_embd, len(stream), time.perf_counter() - t0, loss.item())
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tok.save_pretrained(out)
        (out / "base_lm_config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    return model, tok


def embedded_base_dir(cfg: BaseLMConfig = QUICK_BASE) -> Path:
    """Cache folder of the embedded base for ``cfg``."""
    return cache_dir() / "q-adapter" / f"base-{cfg.key()}"


def model_context(model: Any) -> int | None:
    """The model's context length in tokens (``n_positions`` / ``max_position_embeddings``), or None."""
    conf = getattr(model, "config", None)
    for name in ("n_positions", "max_position_embeddings", "n_ctx", "max_sequence_length"):
        v = getattr(conf, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def check_context(model: Any, max_length: int) -> None:
    """Raise ``ValueError`` when ``max_length`` exceeds the model's context (it would index past the
    position embeddings)."""
    ctx = model_context(model)
    if ctx is not None and max_length > ctx:
        raise ValueError(f"--max-length {max_length} exceeds the model's context of {ctx} tokens; "
                         f"use --max-length {ctx} or less")


def load_base(base: str = "embedded", *, quick: bool = True, device: str = "auto",
              cfg: BaseLMConfig | None = None, dtype: str = "auto", device_map: str | None = None,
              load_in_4bit: bool = False, load_in_8bit: bool = False, gradient_checkpointing: bool = False,
              trust_remote_code: bool = False) -> tuple[Any, Any]:
    """Load the base LM ``pi_1`` and its tokenizer.

    Args:
        base: ``"embedded"`` (the tiny pre-trained GPT-2; built and cached on first use), a local folder,
            or a Hugging Face model id (loaded with :func:`iclr25.core.lm.load_causal_lm`).
        quick: with ``"embedded"``: the quick (2-layer) or full (4-layer) size.
        device: ``auto|cpu|cuda|cuda:N|mps`` (ignored with ``device_map``).
        cfg: explicit embedded-base config (overrides ``quick``).
        dtype, device_map, load_in_4bit, load_in_8bit, gradient_checkpointing, trust_remote_code: as in
            :func:`iclr25.core.lm.load_causal_lm` (for 7-8B models: ``dtype="bfloat16"``,
            ``device_map="auto"`` or 4-bit for QLoRA-style training).
    Returns:
        ``(model, tokenizer)`` in eval mode; the tokenizer has a pad token (EOS when it had none).
    Raises:
        iclr25.core.lm.ModelNotFoundError: a missing folder / id (offline: no download attempted).
        ValueError: the model has no causal-LM head; quantisation or a device map for the embedded base.
    """
    from iclr25.core.seed import choose_device

    from .model import check_causal_lm

    if base == "embedded":
        if load_in_4bit or load_in_8bit or device_map is not None:
            raise ValueError("--load-in-4bit/8bit and --device-map apply to a real --base model, not to the "
                             "tiny embedded base")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from iclr25.core.lm.loading import resolve_dtype

        cfg = cfg or (QUICK_BASE if quick else FULL_BASE)
        d = embedded_base_dir(cfg)
        if (d / "config.json").is_file():
            model = AutoModelForCausalLM.from_pretrained(d)
            tok = AutoTokenizer.from_pretrained(d)
        else:
            model, tok = pretrain_base(cfg, out_dir=d)
        dt = resolve_dtype(dtype)
        if dt != "auto":
            model = model.to(dt)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.config.use_cache = False
        model = model.to(choose_device(device))
    else:
        from iclr25.core.lm import load_causal_lm

        model, tok = load_causal_lm(base, dtype=dtype, device=device, device_map=device_map,
                                    load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit,
                                    gradient_checkpointing=gradient_checkpointing,
                                    trust_remote_code=trust_remote_code)
    check_causal_lm(model)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model.eval()
    return model, tok
