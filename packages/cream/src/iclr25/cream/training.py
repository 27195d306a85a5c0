"""Training stages: SFT (M0 -> M1) and one CREAM/DPO stage (M_t -> M_{t+1}), on ``accelerate``.

Both run the same loop: AdamW, warm-up then cosine/linear/constant schedule, gradient clipping,
gradient accumulation, optional bf16 and optional LoRA (peft; merged into the weights at the end of
the stage). Under ``accelerate launch`` the data are sharded over processes and gradients synced
(DDP, or DeepSpeed ZeRO-2 with the config shipped in :func:`accelerate_config_path`).

DPO (spec §1.4, Algorithm line 9): the reference is the model the stage starts from; its
log-probabilities of every chosen and rejected response are computed **once** before the first
step (with the LoRA adapter disabled when LoRA is on) and kept for the stage (and its resumption).

Dropout (issue #44 item 4): with ``TrainConfig.disable_dropout`` (default, as TRL's
``DPOConfig.disable_dropout``) every dropout probability of the policy (the model's and LoRA's) is set to 0
for a DPO stage, so the policy forward at initialisation equals the cached, dropout-free reference and the
loss starts at exactly ``log 2``; ``disable_dropout=False`` keeps dropout on in the policy forward (the
reference stays dropout-free). SFT stages keep the model's dropout.

Checkpoints (``out_dir/checkpoint``): model weights (safetensors via ``save_pretrained``; a LoRA
adapter as a peft adapter), optimizer and scheduler state (``torch.save`` of tensors, reloaded with
``weights_only=True``), every RNG state of every process (``rng_state.json``, the core's
:func:`~iclr25.core.checkpoint.capture_rng_state`) and ``trainer_state.json``, written together through the
core's :func:`~iclr25.core.checkpoint.atomic_folder` (a kill mid-save keeps the previous checkpoint whole).
``resume=True`` continues from there with the same data order and dropout masks (bit-identical weights);
a stage whose final model exists is not retrained. ``stage_settings.json`` records the stage's settings and
a fingerprint of its data; a resume with other ones is refused, naming them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .config import TrainConfig
from .lora import apply_lora, disable_dropout, merge_lora
from .lora import is_peft as _is_peft
from .losses import cream_dpo_loss
from .pairs import PreferencePair
from .rewards import encode_responses, fit_max_length
from .stage_checkpoint import (
    StageResult,
    _drop_checkpoint,
    _final_exists,
    _guard_stage,
    _load_final,
    _load_tensors,
    _torch_save_atomic,
    _write_final,
    has_checkpoint,
)
from .stage_loop import _concat, _logps, _run_stage, _sharded_pair_logps

__all__ = ["StageResult", "train_sft", "train_dpo", "accelerate_config_path", "deepspeed_config_path",
           "apply_lora", "merge_lora", "disable_dropout", "has_checkpoint"]

log = logging.getLogger(__name__)


def accelerate_config_path(name: str = "deepspeed_zero2") -> Path:
    """Path of a shipped ``accelerate launch --config_file`` YAML (``"deepspeed_zero2"``: 8 GPUs,
    DeepSpeed ZeRO-2, bf16; ``"multi_cpu"``: 2 CPU processes for testing)."""
    p = resources.files("iclr25.cream") / "configs" / f"accelerate_{name}.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"no shipped accelerate config {name!r} ({p})")
    return Path(str(p))


def deepspeed_config_path() -> Path:
    """Path of the shipped DeepSpeed ZeRO-2 JSON (for ``accelerate launch --use_deepspeed
    --deepspeed_config_file``)."""
    return Path(str(resources.files("iclr25.cream") / "configs" / "deepspeed_zero2.json"))


def train_sft(model: Any, tokenizer: Any, examples: Sequence[tuple[str, str]], cfg: TrainConfig, *,
              out_dir: str | Path | None = None, resume: bool = False, progress: bool = True) -> StageResult:
    """Supervised fine-tuning on ``(prompt, response)`` pairs, loss on response tokens (+ EOS) only
    (the official SFT masks everything but the assistant turn).

    Args:
        model: a ``*ForCausalLM`` (trained in place unless LoRA is on).
        tokenizer: its tokenizer.
        examples: ``(prompt, response)`` strings.
        cfg: the stage's :class:`~iclr25.cream.config.TrainConfig` (``beta`` unused).
        out_dir: folder for checkpoints and the final ``model/`` (``None``: nothing written).
        resume: continue from ``out_dir/checkpoint``.
        progress: show a progress bar.

    Returns:
        :class:`StageResult` (``history`` has the mean token NLL per step).

    Raises:
        ValueError: no examples, empty texts. FileNotFoundError: ``resume`` without a checkpoint.
    """
    from iclr25.core.lm import token_logprobs

    out = Path(out_dir) if out_dir is not None else None
    _guard_stage(out, cfg, [list(e) for e in examples], resume)
    if resume and _final_exists(out):
        log.info("sft: %s already holds the finished stage; loading it", out)
        return StageResult(model=_load_final(out, model), n_examples=len(examples))  # type: ignore[arg-type]
    for i, (p, r) in enumerate(examples):
        if not p.strip() or not r.strip():
            raise ValueError(f"sft example {i}: empty {'prompt' if not p.strip() else 'response'}")
    enc = encode_responses(tokenizer, [e[0] for e in examples], [e[1] for e in examples],
                           chat_template=cfg.chat_template, max_length=fit_max_length(model, cfg.max_length))

    def step_loss(m: Any, idx: torch.Tensor, acc: Any) -> tuple[torch.Tensor, dict[str, float]]:
        b = enc.select(idx.cpu()).to(acc.device)
        lp = token_logprobs(m, b.input_ids, b.attention_mask, b.response_mask)
        ntok = (b.response_mask[:, 1:] * b.attention_mask[:, 1:]).sum().clamp(min=1)
        return -lp.sum() / ntok, {}

    res = _run_stage(model, tokenizer, cfg, len(enc), step_loss, kind="sft", out_dir=out, resume=resume,
                     progress_bar=progress)
    _write_final(res, tokenizer, out, {"kind": "sft", "config": asdict(cfg)})
    _drop_checkpoint(out)
    return res


# ---------------------------------------------------------------------------------------------
# DPO / CREAM


def train_dpo(model: Any, tokenizer: Any, pairs: Sequence[PreferencePair], cfg: TrainConfig, *,
              c: Sequence[float] | None = None, out_dir: str | Path | None = None, resume: bool = False,
              progress: bool = True) -> StageResult:
    """One CREAM stage: minimise :func:`~iclr25.cream.losses.cream_dpo_loss` over ``pairs`` from
    ``model``, with the starting model as frozen reference.

    Args:
        model: the policy ``pi_t`` at the start of the stage (trained in place unless LoRA is on).
        tokenizer: its tokenizer.
        pairs: the preference pairs; pairs whose chosen and rejected texts are identical are dropped
            and counted (``StageResult.n_dropped``), never trained as a silent zero gradient.
        cfg: :class:`~iclr25.cream.config.TrainConfig` (``beta``, ``lr``, ``epochs``...).
        c: the weight per pair (default: each pair's ``c``); ``1`` everywhere is plain DPO.
        out_dir, resume, progress: as :func:`train_sft`.

    Returns:
        :class:`StageResult` with the per-step loss and margin, the reference log-probs and the
        margins over all pairs after the stage.

    Raises:
        ValueError: no pairs left, ``c`` of the wrong length or outside ``[0, 1]``.
    """
    from .losses import check_consistency_weights

    out = Path(out_dir) if out_dir is not None else None
    weights = [p.c for p in pairs] if c is None else list(c)
    if len(weights) != len(pairs):
        raise ValueError(f"{len(weights)} weights for {len(pairs)} pairs")
    keep = [i for i, p in enumerate(pairs) if p.chosen != p.rejected]
    dropped = len(pairs) - len(keep)
    if dropped:
        log.warning("dpo: dropped %d pair(s) whose chosen and rejected texts are identical (no signal)", dropped)
    pairs = [pairs[i] for i in keep]
    cw = torch.tensor([weights[i] for i in keep], dtype=torch.float64)
    check_consistency_weights(cw, len(pairs))
    if not pairs:
        raise ValueError("dpo: no pairs to train on")
    _guard_stage(out, cfg, [[p.prompt, p.chosen, p.rejected] for p in pairs] + [cw.tolist()], resume)
    if resume and _final_exists(out):
        log.info("dpo: %s already holds the finished stage; loading it", out)
        return StageResult(model=_load_final(out, model), n_examples=len(pairs), n_dropped=dropped)  # type: ignore[arg-type]
    prompts = [p.prompt for p in pairs]
    enc_c = encode_responses(tokenizer, prompts, [p.chosen for p in pairs], chat_template=cfg.chat_template,
                             max_length=fit_max_length(model, cfg.max_length))
    enc_r = encode_responses(tokenizer, prompts, [p.rejected for p in pairs], chat_template=cfg.chat_template,
                             max_length=fit_max_length(model, cfg.max_length))
    holder: dict[str, torch.Tensor] = {}
    ref_file = out / "ref_logps.pt" if out is not None else None

    def before(acc: Any, m: Any) -> None:
        if cfg.disable_dropout:
            n_off = disable_dropout(m)
            if n_off:
                log.info("dpo: dropout disabled in the policy (%d probabilities set to 0; disable_dropout=False "
                         "keeps it)", n_off)
        elif any(isinstance(x, torch.nn.Dropout) and x.p > 0 for x in m.modules()):
            log.warning("dpo: disable_dropout=False: dropout is active in the policy forward while the reference "
                        "log-probs are dropout-free, so the loss at initialisation is not log 2")
        if resume and ref_file is not None and ref_file.is_file():
            ref = _load_tensors(ref_file, out / "checkpoint")  # type: ignore[operator]
            if not isinstance(ref, torch.Tensor) or tuple(ref.shape) != (len(pairs), 2) or not ref.isfinite().all():
                raise ValueError(f"{ref_file}: expected finite ({len(pairs)}, 2) reference log-probs (one row per "
                                 f"pair), got {getattr(ref, 'shape', type(ref).__name__)}; delete it and "
                                 f"{out / 'checkpoint'} to start the stage over")  # type: ignore[operator]
            holder["ref"] = ref
            return
        if _is_peft(m):
            with m.disable_adapter():
                ref = _sharded_pair_logps(acc, m, enc_c, enc_r, cfg.batch_size, "dpo: reference log-probs")
        else:
            ref = _sharded_pair_logps(acc, m, enc_c, enc_r, cfg.batch_size, "dpo: reference log-probs")
        holder["ref"] = ref
        if ref_file is not None and acc.is_main_process:
            _torch_save_atomic(ref, ref_file)

    def step_loss(m: Any, idx: torch.Tensor, acc: Any) -> tuple[torch.Tensor, dict[str, float]]:
        i = idx.cpu()
        both = _concat(enc_c.select(i), enc_r.select(i))
        lp = _logps(m, both, acc.device)
        k = len(i)
        ref = holder["ref"][i].to(device=acc.device, dtype=lp.dtype)
        loss, h = cream_dpo_loss(lp[:k], lp[k:], ref[:, 0], ref[:, 1], cw[i].to(acc.device, lp.dtype),
                                 beta=cfg.beta)
        return loss, {"margin": float(h.mean())}

    def after(acc: Any, m: Any) -> None:
        pol = _sharded_pair_logps(acc, m, enc_c, enc_r, cfg.batch_size, "dpo: final margins")
        ref = holder["ref"]
        holder["margins"] = cfg.beta * ((pol[:, 0] - ref[:, 0]) - (pol[:, 1] - ref[:, 1]))

    res = _run_stage(model, tokenizer, cfg, len(pairs), step_loss, kind="dpo", out_dir=out, resume=resume,
                     progress_bar=progress, before_train=before, after_train=after)
    res.n_dropped = dropped
    res.ref_logps = holder["ref"]
    res.final_margins = holder["margins"]
    res.final_margin_mean = float(holder["margins"].mean())
    _write_final(res, tokenizer, out, {"kind": "dpo", "config": asdict(cfg), "c_mean": float(cw.mean())})
    _drop_checkpoint(out)
    if ref_file is not None and ref_file.exists():
        from accelerate import PartialState

        if PartialState().is_main_process:
            ref_file.unlink()
    return res
