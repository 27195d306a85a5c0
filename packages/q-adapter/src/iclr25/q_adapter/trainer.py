"""Training loop for Q-Adapter and the DPO / SFT baselines (same LoRA adapter, same data order).

The loop uses ``accelerate.Accelerator`` for the device, gradient accumulation and ``backward`` (so
mixed precision works on GPU); it writes ``metrics.jsonl`` per step and a resumable checkpoint
(``checkpoint/``: the adapter via ``save_pretrained`` + ``trainer_state.pt`` with the optimiser, the
step and the RNG states). ``resume=True`` continues from it bit-for-bit in data order.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from iclr25.core.lm import dpo_loss

from .data import TokenizedPair, collate_pairs, iter_batches
from .losses import action_mask
from .model import LoRAPolicy, QAdapterModel, _PeftPolicy

__all__ = ["TrainerConfig", "PreferenceTrainer", "preference_step_loss", "train_qadapter"]

log = logging.getLogger(__name__)
Method = Literal["q-adapter", "dpo", "sft"]


@dataclass
class TrainerConfig:
    """Optimisation settings (official: AdamW, lr 3e-4, no warm-up, 3 epochs on DSP)."""

    method: Method = "q-adapter"
    """``q-adapter`` (the paper's loss), ``dpo`` (core ``dpo_loss``, reference = base) or ``sft``
    (NLL of the preferred responses)."""
    learning_rate: float = 3e-4
    """AdamW learning rate (official 3e-4)."""
    epochs: int = 3
    """Passes over the pairs (official: 3 on DSP, 2 on HH-RLHF)."""
    batch_size: int = 8
    """Preference pairs per optimiser step (official: 512 on 4 GPUs; CPU scale: 8)."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimiser step."""
    warmup_steps: int = 0
    """Linear warm-up steps (official 0)."""
    weight_decay: float = 0.0
    dpo_beta: float = 0.1
    """DPO's KL coefficient (baseline only)."""
    max_steps: int = 0
    """Stop after this many optimiser steps (0: run all epochs)."""
    seed: int = 0
    checkpoint_every: int = 0
    """Save a checkpoint every N steps (0: only at the end)."""
    log_every: int = 10
    progress: bool = True

    def __post_init__(self) -> None:
        if self.method not in ("q-adapter", "dpo", "sft"):
            raise ValueError(f"method must be 'q-adapter', 'dpo' or 'sft', got {self.method!r}")
        if self.batch_size < 1 or self.epochs < 1 or self.grad_accum < 1:
            raise ValueError("batch_size, epochs and grad_accum must be >= 1")


def preference_step_loss(policy: _PeftPolicy, batch: dict[str, torch.Tensor], method: str,
                         dpo_beta: float = 0.1) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of one collated batch (first half chosen) for ``method``.

    Returns: ``(scalar loss, stats)``.
    """
    ids, attn, resp = batch["input_ids"], batch["attention_mask"], batch["response_mask"]
    if method == "q-adapter":
        if not isinstance(policy, QAdapterModel):
            raise TypeError("method 'q-adapter' needs a QAdapterModel")
        return policy.loss(ids, attn, resp)
    mask = action_mask(resp, attn, "shifted")
    acts = ids[:, 1:].unsqueeze(-1)
    b = ids.shape[0] // 2
    if method == "sft":
        lp = policy.log_probs(ids[:b], attn[:b])[:, :-1].gather(-1, acts[:b]).squeeze(-1)
        loss = -(lp * mask[:b]).sum() / mask[:b].sum().clamp(min=1)
        return loss, {"nll": float(loss.detach())}
    if method == "dpo":
        lp = (policy.log_probs(ids, attn)[:, :-1].gather(-1, acts).squeeze(-1) * mask).sum(-1)
        lb = (policy.base_log_probs(ids, attn)[:, :-1].gather(-1, acts).squeeze(-1) * mask).sum(-1)
        loss, rw, rl = dpo_loss(lp[:b], lp[b:], lb[:b], lb[b:], beta=dpo_beta)
        return loss, {"pref_loss": float(loss.detach()), "accuracy": float((rw > rl).float().mean()),
                      "margin": float((rw - rl).mean())}
    raise ValueError(f"unknown method {method!r}")


class PreferenceTrainer:
    """Train the LoRA adapter of a :class:`QAdapterModel` (or a :class:`LoRAPolicy` for DPO/SFT).

    Args:
        policy: the model whose LoRA parameters are trained (base frozen).
        pairs: tokenised training pairs.
        pad_token_id: id used for right padding.
        cfg: :class:`TrainerConfig`.
        output_dir: where ``metrics.jsonl``, ``checkpoint/`` and the final adapter go (None: nowhere).
        accelerator: an ``accelerate.Accelerator`` (default: a fresh one on the policy's device).
    """

    def __init__(self, policy: _PeftPolicy, pairs: Sequence[TokenizedPair], pad_token_id: int,
                 cfg: TrainerConfig | None = None, *, output_dir: str | Path | None = None,
                 accelerator=None) -> None:
        from accelerate import Accelerator

        self.cfg = cfg or TrainerConfig()
        if self.cfg.method == "q-adapter" and not isinstance(policy, QAdapterModel):
            raise TypeError("method 'q-adapter' needs a QAdapterModel policy")
        if self.cfg.method != "q-adapter" and not isinstance(policy, LoRAPolicy):
            raise TypeError(f"method {self.cfg.method!r} needs a LoRAPolicy")
        if not pairs:
            raise ValueError("no training pairs")
        self.policy = policy
        self.pairs = list(pairs)
        self.pad = pad_token_id
        self.out = Path(output_dir) if output_dir is not None else None
        self.acc = accelerator or Accelerator(cpu=not torch.cuda.is_available(),
                                              gradient_accumulation_steps=self.cfg.grad_accum)
        params = policy.trainable_parameters()
        if not params:
            raise ValueError("the policy has no trainable (LoRA) parameters")
        self.opt = torch.optim.AdamW(params, lr=self.cfg.learning_rate, weight_decay=self.cfg.weight_decay)
        warm = self.cfg.warmup_steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.policy.to(self.acc.device)
        self.opt, self.sched = self.acc.prepare(self.opt, self.sched)
        micro = self.cfg.batch_size
        self.steps_per_epoch = -(-len(self.pairs) // micro) // self.cfg.grad_accum or 1
        total = self.steps_per_epoch * self.cfg.epochs
        self.total_steps = min(total, self.cfg.max_steps) if self.cfg.max_steps else total
        self.step = 0
        self.history: list[dict[str, float]] = []

    # --- checkpoints --------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path | None:
        return self.out / "checkpoint" if self.out is not None else None

    def save_checkpoint(self) -> None:
        """Write ``checkpoint/`` (adapter + optimiser + step + RNG)."""
        if self.checkpoint_dir is None:
            return
        d = self.checkpoint_dir
        self.policy.save_pretrained(d)
        lora = {k: v.detach().cpu() for k, v in self.policy.peft_model.named_parameters() if v.requires_grad}
        torch.save({"step": self.step, "optimizer": self.opt.state_dict(), "lora": lora,
                    "torch_rng": torch.get_rng_state(), "config": asdict(self.cfg)}, d / "trainer_state.pt")

    def load_checkpoint(self) -> bool:
        """Restore from ``checkpoint/``; returns False when there is none."""
        d = self.checkpoint_dir
        if d is None or not (d / "trainer_state.pt").is_file():
            return False
        st = torch.load(d / "trainer_state.pt", map_location="cpu", weights_only=True)
        named = dict(self.policy.peft_model.named_parameters())
        with torch.no_grad():
            for k, v in st["lora"].items():
                if k not in named:
                    raise ValueError(f"checkpoint {d} does not match this model (unknown parameter {k})")
                named[k].copy_(v.to(named[k].device))
        self.opt.load_state_dict(st["optimizer"])
        torch.set_rng_state(st["torch_rng"])
        self.step = int(st["step"])
        log.info("resumed from %s at step %d", d, self.step)
        return True

    # --- loop ----------------------------------------------------------------------------------
    def train(self, *, resume: bool = False) -> list[dict[str, float]]:
        """Run the optimisation; returns the per-step stats (also in ``metrics.jsonl``)."""
        from tqdm.auto import tqdm

        if resume and not self.load_checkpoint():
            log.warning("--resume: no checkpoint in %s; starting from scratch", self.checkpoint_dir)
        metrics_fh = None
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            metrics_fh = open(self.out / "metrics.jsonl", "a" if resume else "w", encoding="utf-8")
        self.policy.train()
        bar = tqdm(total=self.total_steps, initial=self.step, desc=f"train[{self.cfg.method}]",
                   disable=not self.cfg.progress, leave=False)
        t0 = time.perf_counter()
        try:
            epoch = self.step // self.steps_per_epoch
            while self.step < self.total_steps:
                rng = np.random.default_rng([self.cfg.seed, epoch])
                batches = list(iter_batches(self.pairs, self.cfg.batch_size, shuffle=True, rng=rng))
                skip = (self.step - epoch * self.steps_per_epoch) * self.cfg.grad_accum
                for i, items in enumerate(batches):
                    if i < skip:
                        continue
                    batch = {k: v.to(self.acc.device) for k, v in collate_pairs(items, self.pad).items()}
                    with self.acc.accumulate(self.policy):
                        loss, stats = preference_step_loss(self.policy, batch, self.cfg.method, self.cfg.dpo_beta)
                        self.acc.backward(loss)
                        if self.acc.sync_gradients:
                            self.acc.clip_grad_norm_(self.policy.trainable_parameters(), 1.0)
                        self.opt.step()
                        self.sched.step()
                        self.opt.zero_grad(set_to_none=True)
                    if not self.acc.sync_gradients:
                        continue
                    self.step += 1
                    rec = {"step": self.step, "epoch": epoch, "loss": float(loss.detach()), **stats}
                    self.history.append(rec)
                    if metrics_fh is not None:
                        metrics_fh.write(json.dumps(rec) + "\n")
                    bar.update(1)
                    if self.step % max(1, self.cfg.log_every) == 0:
                        bar.set_postfix(loss=f"{rec['loss']:.4f}")
                    if self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
                        self.save_checkpoint()
                    if self.step >= self.total_steps:
                        break
                epoch += 1
        finally:
            bar.close()
            if metrics_fh is not None:
                metrics_fh.close()
        self.policy.eval()
        self.save_checkpoint()
        log.info("%s: %d steps in %.1f s", self.cfg.method, self.step, time.perf_counter() - t0)
        return self.history


def train_qadapter(model: QAdapterModel, pairs: Sequence[TokenizedPair], pad_token_id: int,
                   cfg: TrainerConfig | None = None, **kwargs) -> list[dict[str, float]]:
    """Train ``model`` on tokenised pairs with :class:`PreferenceTrainer`; returns the per-step stats."""
    return PreferenceTrainer(model, pairs, pad_token_id, cfg or TrainerConfig(), **kwargs).train()
