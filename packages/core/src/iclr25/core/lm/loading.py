"""Loading a causal LM and its tokenizer by local path or Hugging Face id, at any scale.

:func:`load_causal_lm` is what every iclr25 LLM package calls for ``--model``: dtype
(``auto|bfloat16|float16|float32``), 8-/4-bit quantisation (bitsandbytes), ``device_map="auto"``
(accelerate's big-model placement over the visible GPUs), gradient checkpointing. Failures are
clean errors: a missing local folder, a folder without ``config.json``, a hub id that is not in
the local cache while offline (the message says that no download was attempted), a model without
a causal-LM head, quantisation without bitsandbytes or without CUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["ModelLoadOptions", "ModelNotFoundError", "load_causal_lm", "hub_offline", "resolve_dtype"]

Dtype = Literal["auto", "bfloat16", "float16", "float32"]


class ModelNotFoundError(FileNotFoundError):
    """A model path or id that cannot be found (locally, or in the hub cache when offline)."""


@dataclass(kw_only=True)
class ModelLoadOptions:
    """How to load a model (mix into a command's config next to ``--model``)."""

    dtype: Dtype = "auto"
    """Weights dtype: auto (the checkpoint's own), bfloat16, float16 or float32."""
    device_map: str | None = None
    """'auto' places layers over the visible GPUs (and CPU) with accelerate; None: one device."""
    load_in_8bit: bool = False
    """8-bit weights (bitsandbytes, CUDA only)."""
    load_in_4bit: bool = False
    """4-bit NF4 weights with bfloat16 compute (bitsandbytes, CUDA only)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, about 30% slower)."""
    trust_remote_code: bool = False
    """Allow model code shipped with the checkpoint (off: never run downloaded code)."""

    def load_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`load_causal_lm` for these options."""
        return {"dtype": self.dtype, "device_map": self.device_map, "load_in_8bit": self.load_in_8bit,
                "load_in_4bit": self.load_in_4bit, "gradient_checkpointing": self.gradient_checkpointing,
                "trust_remote_code": self.trust_remote_code}


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def resolve_dtype(dtype: str):
    """``"auto"`` -> ``"auto"``; ``"bfloat16"|"float16"|"float32"`` -> the torch dtype.

    Raises:
        ValueError: any other name.
    """
    import torch

    if dtype == "auto":
        return "auto"
    table = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
             "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}
    if dtype not in table:
        raise ValueError(f"dtype={dtype!r} is not one of auto, bfloat16, float16, float32")
    return table[dtype]


def _check_source(name_or_path: str) -> tuple[str, bool]:
    """Return ``(source, local_files_only)``; raise for a missing/invalid local folder."""
    if not name_or_path or not str(name_or_path).strip():
        raise ValueError("model: empty model path or id")
    p = Path(str(name_or_path)).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ModelNotFoundError(f"model {name_or_path!r} is a file; pass the folder written by "
                                     "save_pretrained (with config.json), or a Hugging Face id")
        if not (p / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {p} has no config.json; it is not a Hugging Face model "
                                     "folder (save one with model.save_pretrained(folder))")
        return str(p), True
    if str(name_or_path).startswith((".", "/", "~")) or str(name_or_path).count("/") > 1:
        raise ModelNotFoundError(f"model {name_or_path!r}: no such folder")
    return str(name_or_path), hub_offline()


def load_causal_lm(name_or_path: str, *, dtype: str = "auto", device: str = "auto",
                   device_map: str | None = None, load_in_8bit: bool = False, load_in_4bit: bool = False,
                   gradient_checkpointing: bool = False, trust_remote_code: bool = False,
                   tokenizer: str | None = None, padding_side: str | None = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local folder or a Hugging Face id.

    Args:
        name_or_path: a folder written by ``save_pretrained`` or a hub id
            (e.g. ``"meta-llama/Llama-3.1-8B"``). With ``HF_HUB_OFFLINE=1`` only the local hub
            cache is used.
        dtype: ``auto`` (the checkpoint's dtype), ``bfloat16``, ``float16`` or ``float32``.
        device: ``auto|cpu|cuda|cuda:N|mps`` when ``device_map`` is ``None``.
        device_map: e.g. ``"auto"`` to spread layers over GPUs (needs ``accelerate``).
        load_in_8bit, load_in_4bit: bitsandbytes quantisation (CUDA only; not both).
        gradient_checkpointing: enable it (and turn the KV cache off) for training.
        trust_remote_code: allow code shipped with the checkpoint.
        tokenizer: tokenizer folder or id (default: ``name_or_path``).
        padding_side: set the tokenizer's padding side (``"left"`` for batched generation).

    Returns:
        ``(model, tokenizer)``: a ``*ForCausalLM`` (eval mode) and its tokenizer, which always has
        a pad token (EOS when the checkpoint defines none).

    Raises:
        ModelNotFoundError: a missing folder, a folder without ``config.json``, or a hub id not
            available (offline: not in the cache, and no download was attempted).
        ValueError: a model without a causal-LM head; bad ``dtype``; both quantisations.
        ImportError: quantisation without ``bitsandbytes`` / ``device_map`` without ``accelerate``
            (the message names the package to install).
        RuntimeError: quantisation without CUDA.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from ..seed import choose_device

    source, local_only = _check_source(name_or_path)
    if load_in_4bit and load_in_8bit:
        raise ValueError("load_in_4bit and load_in_8bit are exclusive; choose one")
    torch_dtype = resolve_dtype(dtype)
    kw: dict[str, Any] = {"local_files_only": local_only, "trust_remote_code": trust_remote_code}
    try:
        config = AutoConfig.from_pretrained(source, **kw)
    except (OSError, ValueError) as e:
        if local_only and not Path(source).exists():
            raise ModelNotFoundError(
                f"model {source!r} is not a local folder and is not in the Hugging Face cache; the hub is "
                "offline (HF_HUB_OFFLINE=1), so no download was attempted. Download it first "
                f"(`hf download {source}`) or pass a local folder.") from None
        raise ModelNotFoundError(f"model {source!r} could not be loaded: {e}") from None
    mkw: dict[str, Any] = dict(kw)
    mkw["dtype"] = torch_dtype
    if load_in_4bit or load_in_8bit:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise ImportError("4-/8-bit loading needs bitsandbytes: pip install bitsandbytes") from None
        if not torch.cuda.is_available():
            raise RuntimeError("4-/8-bit loading (bitsandbytes) needs a CUDA GPU; none is visible")
        from transformers import BitsAndBytesConfig

        compute = torch_dtype if torch_dtype not in ("auto", torch.float32) else torch.bfloat16
        mkw["quantization_config"] = (
            BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute,
                               bnb_4bit_use_double_quant=True)
            if load_in_4bit else BitsAndBytesConfig(load_in_8bit=True))
        device_map = device_map or "auto"
    if device_map is not None:
        try:
            import accelerate  # noqa: F401
        except ImportError:
            raise ImportError("device_map needs accelerate: pip install accelerate") from None
        mkw["device_map"] = device_map
    try:
        model = AutoModelForCausalLM.from_pretrained(source, config=config, **mkw)
    except ValueError as e:
        if "Unrecognized configuration class" in str(e) or "AutoModelForCausalLM" in str(e):
            raise ValueError(f"model {source!r} ({type(config).__name__}) has no causal-LM head; "
                             "pass a *ForCausalLM checkpoint") from None
        raise
    except OSError as e:
        raise ModelNotFoundError(f"model {source!r}: the weights could not be loaded: {e}") from None
    tok = AutoTokenizer.from_pretrained(tokenizer or source, **kw)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if padding_side is not None:
        tok.padding_side = padding_side
    if gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
        model.config.use_cache = False
    if device_map is None:
        model = model.to(choose_device(device))
    model.eval()
    return model, tok
