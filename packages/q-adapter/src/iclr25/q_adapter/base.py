"""The embedded default base model ``pi_1``: a tiny GPT-2 pre-trained on CPU from mirrored text, cached.

Corpus (general-assistant text, never the new preference): the chosen dialogues of the HH-RLHF
helpful test split (minus a held-out part for the forgetting metric) and DSP ``normal`` (original
Alpaca) responses of the training queries, rendered as ``"## Human:\\n{q}\\n\\n## Assistant:\\n{r}"``.
Tokenizer and model: the core's :func:`iclr25.core.lm.cached_tiny_lm` (a byte-level BPE, vocab 2,048,
trained on that corpus with ``tokenizers``, spec Sec. 4.2, or the byte tokenizer; stream packing),
saved with ``save_pretrained`` under ``<iclr25 cache>/q-adapter/tinylm-<key>`` and reloaded afterwards.

:func:`load_base` also accepts any local path or Hugging Face id (``AutoModelForCausalLM``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from iclr25.core.lm.pretrain import TinyLMSpec

from .data import dsp_prompt, load_dsp, load_hh_rlhf, split_queries

__all__ = ["BaseLMConfig", "QUICK_BASE", "FULL_BASE", "general_corpus", "load_embedded_base", "load_base",
           "heldout_general_texts", "check_context", "model_context"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaseLMConfig:
    """The embedded base LM: its size and pre-training schedule (a core ``TinyLMSpec``) and the corpus.

    Args:
        lm: tokenizer, size and schedule (spec Sec. 4.2: quick 2 layers d=128, full 4 layers d=256).
        dsp_train_queries: DSP queries (of 661, seeded split) in the train part; their ``normal``
            answers join the corpus.
        heldout_helpful: helpful dialogues kept out of pre-training (the forgetting metric's held-out text).
    """

    lm: TinyLMSpec = field(default_factory=lambda: TinyLMSpec(
        n_layer=2, n_embd=128, n_head=4, n_positions=192, vocab_size=2048, packing="stream", seq_len=96,
        batch_size=16, steps=250, lr=3e-3, warmup_frac=0.08))
    dsp_train_queries: int = 500
    heldout_helpful: int = 300

    def __post_init__(self) -> None:
        if not isinstance(self.lm, TinyLMSpec):
            raise ValueError(f"BaseLMConfig.lm must be a TinyLMSpec, got {type(self.lm).__name__}")
        for name in ("dsp_train_queries", "heldout_helpful"):
            if getattr(self, name) < 0:
                raise ValueError(f"BaseLMConfig.{name} must be >= 0, got {getattr(self, name)}")


QUICK_BASE = BaseLMConfig()
FULL_BASE = BaseLMConfig(lm=TinyLMSpec(n_layer=4, n_embd=256, n_head=4, n_positions=256, vocab_size=2048,
                                       packing="stream", seq_len=128, batch_size=16, steps=600, lr=2e-3,
                                       warmup_frac=0.08))


def general_corpus(cfg: BaseLMConfig) -> list[str]:
    """The pre-training texts (see module docstring).

    Raises: :class:`iclr25.core.data.DataNotFoundError` when the mirrored text is absent.
    """
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


def load_embedded_base(cfg: BaseLMConfig = QUICK_BASE, *, progress: bool = True) -> tuple[Any, Any]:
    """The embedded base for ``cfg``: pre-trained once on :func:`general_corpus` by the core's
    :func:`~iclr25.core.lm.cached_tiny_lm` (namespace ``q-adapter``) and reloaded from its cache afterwards.

    Returns: ``(model, tokenizer)`` — ``GPT2LMHeadModel`` in eval mode on CPU and a fast tokenizer.
    Raises: :class:`iclr25.core.data.DataNotFoundError` when the mirrored text is absent.
    """
    from iclr25.core.lm import cached_tiny_lm

    model, tok, _ = cached_tiny_lm("q-adapter", general_corpus(cfg), cfg.lm, progress=progress)
    return model, tok


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

    from .lora import check_causal_lm

    if base == "embedded":
        if load_in_4bit or load_in_8bit or device_map is not None:
            raise ValueError("--load-in-4bit/8bit and --device-map apply to a real --base model, not to the "
                             "tiny embedded base")
        from iclr25.core.lm.loading import resolve_dtype

        model, tok = load_embedded_base(cfg or (QUICK_BASE if quick else FULL_BASE))
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
