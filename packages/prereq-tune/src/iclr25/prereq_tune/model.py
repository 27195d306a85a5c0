"""Base models: the tiny pre-trained M0 of the synthetic world, and any causal LM by path or id.

M0 (spec §4.1) is the core ``tiny_causal_lm`` GPT-2 (3 layers, d 96, 4 heads, 32 positions) with a
word-level tokenizer built from the world's vocabulary, pre-trained from scratch by the core's
``pretrain_tiny_lm`` on statements about the real entities R only (it "knows" R and has never seen
a question). It is cached under the user cache (``<cache>/prereq-tune/m0-<key>``, key = spec +
corpus + vocabulary), so the one-time pre-training is paid once per world and reported separately.

The M0 of the quick world (seed 0, the default :class:`M0Spec`) ships in the package
(``iclr25/prereq_tune/m0/m0-<key>/``, safetensors, sha256-checked against ``SHA256SUMS``): the quick
reproduction and the README example load it instead of pre-training (≈ 140 CPU-s), and every machine starts
from the same weights. Any other world or spec is pre-trained once and cached; ``ICLR25_PREREQ_PACKAGED_M0=0``
ignores the packaged copy (pre-train it yourself).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .world import World, pretraining_corpus, world_tokenizer, world_vocabulary

__all__ = ["M0Spec", "pretrain_m0", "m0_dir", "packaged_m0_dir", "load_base_model", "fuse_gelu"]

log = logging.getLogger(__name__)
_FORMAT = "prereq-tune-m0-v1"


@dataclass(frozen=True)
class M0Spec:
    """Size and pre-training schedule of M0 (spec §4.1, §4.4 prototype: 50 epochs, lr 3e-3, batch 128).

    Args:
        n_layer, n_embd, n_head, n_positions: the GPT-2 size (issue #23: 3 / 96 / 4 / 32).
        epochs: passes over the pre-training statements.
        batch_size: statements per step.
        lr: peak AdamW learning rate (warm-up then cosine decay, the core's schedule).
        passages: add passage-form texts about R to the pre-training corpus (more paraphrase
            variety, spec §7; off by default).
        seed: initialisation and shuffling seed.
    """

    n_layer: int = 3
    n_embd: int = 96
    n_head: int = 4
    n_positions: int = 32
    epochs: float = 50.0
    batch_size: int = 128
    lr: float = 3e-3
    passages: bool = False
    seed: int = 0

    def tiny_lm_spec(self):
        from iclr25.core.lm import TinyLMSpec

        return TinyLMSpec(tokenizer="bpe", vocab_size=512, add_bos=True, n_layer=self.n_layer, n_embd=self.n_embd,
                          n_head=self.n_head, n_positions=self.n_positions, packing="sequences",
                          seq_len=self.n_positions, steps=None, epochs=self.epochs, batch_size=self.batch_size,
                          lr=self.lr, weight_decay=0.01, warmup_frac=0.05, grad_clip=1.0, seed=self.seed)


def m0_dir(world: World, spec: M0Spec, cache: str | Path | None = None) -> Path:
    """The cache folder of M0 for ``(world, spec)``."""
    from iclr25.core.data import cache_dir

    blob = json.dumps([asdict(spec), world.digest(), world_vocabulary(world), _FORMAT], sort_keys=True).encode()
    key = hashlib.sha256(blob).hexdigest()[:16]
    root = Path(cache) if cache is not None else cache_dir()
    return root / "prereq-tune" / f"m0-{key}"


def packaged_m0_dir(world: World, spec: M0Spec) -> Path | None:
    """The packaged M0 for ``(world, spec)`` (same key as :func:`m0_dir`), or ``None`` when none ships for it
    (or ``ICLR25_PREREQ_PACKAGED_M0=0``). Its files are checked against ``SHA256SUMS``.

    Raises:
        ValueError: a packaged file is missing or its sha256 differs (a damaged install: reinstall the package).
    """
    import os
    from importlib.resources import files

    if os.environ.get("ICLR25_PREREQ_PACKAGED_M0", "1") == "0":
        return None
    d = Path(str(files("iclr25.prereq_tune") / "m0" / m0_dir(world, spec, "/").name))
    sums = d / "SHA256SUMS"
    if not sums.is_file():
        return None
    for line in sums.read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        f = d / name.strip()
        got = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "missing"
        if got != digest:
            raise ValueError(f"the packaged M0 file {f} is damaged (sha256 {got[:12]}…, expected {digest[:12]}…); "
                             "reinstall iclr25-prereq-tune or set ICLR25_PREREQ_PACKAGED_M0=0 to pre-train it")
    return d


def pretrain_m0(world: World, spec: M0Spec = M0Spec(), *, cache: str | Path | None = None,
                progress: bool = True) -> tuple[Any, Any, Path, dict[str, Any]]:
    """M0 for ``world``: reloaded from the cache, or pre-trained once and saved there.

    Returns:
        ``(model, tokenizer, folder, info)``: ``GPT2LMHeadModel`` (eval, CPU, float32), the word-level
        tokenizer, the cache folder (``save_pretrained`` layout plus ``world.json`` with every fact
        and ``m0_train.json``) and ``{"cached": bool, "seconds": pre-training seconds, ...}``.
    """
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    d = m0_dir(world, spec, cache)
    packaged = None if (d / "config.json").is_file() and (d / "m0_train.json").is_file() else \
        packaged_m0_dir(world, spec)
    if packaged is not None or ((d / "config.json").is_file() and (d / "m0_train.json").is_file()):
        src = packaged or d
        tok = PreTrainedTokenizerFast.from_pretrained(src)
        tok._tokenizer.post_processor = world_tokenizer(world)._tokenizer.post_processor
        info = json.loads((src / "m0_train.json").read_text())
        model = AutoModelForCausalLM.from_pretrained(src, use_safetensors=True).eval()
        return model, tok, src, {**info, "cached": True, "packaged": packaged is not None}
    log.info("pre-training M0 once (cached at %s)", d)
    from iclr25.core.lm import pretrain_tiny_lm  # only when pre-training (a packaged or cached M0 skips it)

    tok = world_tokenizer(world)
    texts = pretraining_corpus(world, passages=spec.passages)
    t0 = time.perf_counter()
    model, tok, info = pretrain_tiny_lm(texts, spec.tiny_lm_spec(), tokenizer=tok, progress=progress)
    info = {**info, "seconds": time.perf_counter() - t0, "spec": asdict(spec), "n_params": sum(
        p.numel() for p in model.parameters()), "vocab_size": len(tok)}
    model.zero_grad(set_to_none=True)
    model.config.bos_token_id = tok.bos_token_id
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    tmp = d.with_name(d.name + f".tmp-{time.time_ns()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "world.json").write_text(json.dumps(world.to_dict()) + "\n")
    (tmp / "m0_train.json").write_text(json.dumps(info, indent=2) + "\n")
    if d.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(d)
    return model.eval(), tok, d, {**info, "cached": False}


def load_base_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto", bf16: bool = False,
                    device_map: str | None = None, load_in_4bit: bool = False, load_in_8bit: bool = False,
                    gradient_checkpointing: bool = False, trust_remote_code: bool = False) -> tuple[Any, Any]:
    """Load a base causal LM and its tokenizer through the core's ``load_causal_lm`` (local folder or
    Hugging Face id; ``bf16`` is ``dtype="bfloat16"``).

    Raises:
        iclr25.core.lm.ModelNotFoundError: a missing folder, or a hub id not available offline.
        ValueError: bad dtype, or a model without a causal-LM head.
    """
    from iclr25.core.lm import load_causal_lm

    if bf16:
        if dtype not in ("auto", "bfloat16"):
            raise ValueError(f"--bf16 conflicts with --dtype {dtype}")
        dtype = "bfloat16"
    model, tok = load_causal_lm(name_or_path, dtype=dtype, device=device, device_map=device_map,
                                load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit,
                                gradient_checkpointing=gradient_checkpointing, trust_remote_code=trust_remote_code)
    if tok.eos_token_id is None:
        raise ValueError(f"the tokenizer of {name_or_path!r} has no EOS token; completion-only training needs one")
    return model, tok


def fuse_gelu(model: Any) -> int:
    """Swap GPT-2's ``gelu_new`` activation modules for the fused ``gelu_pytorch_tanh`` kernel (a speed-up
    only: both compute ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``; ``gelu_new`` spells it as five
    separate tensor ops, each with its own autograd node, the fused one as one op forward and one
    backward). Outputs agree up to float32 rounding (max |Δlogit| ≈ 1e-5 on M0, tested); the weights
    and the config are not touched.

    Returns:
        The number of activation modules replaced (0 for a model without ``gelu_new``).
    """
    from transformers.activations import ACT2FN, NewGELUActivation

    n = 0
    for mod in model.modules():
        for name, child in list(mod.named_children()):
            if type(child) is NewGELUActivation:
                setattr(mod, name, ACT2FN["gelu_pytorch_tanh"])
                n += 1
    return n
