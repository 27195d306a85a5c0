"""Training loop for Q-Adapter and the DPO / SFT baselines (same LoRA adapter, same data order).

The loop uses ``accelerate.Accelerator``: the policy is prepared by it (wrapped in DDP under
``accelerate launch`` / ``torchrun``, so LoRA gradients are all-reduced), each optimiser step draws one
*global* batch of ``batch_size x num_processes`` pairs from the seeded epoch order and every rank takes
its own contiguous slice (data parallelism: ranks see different pairs; the result equals one process on
the concatenated batch). It also handles gradient accumulation and ``backward`` (mixed precision on
GPU). Rank 0 writes ``metrics.jsonl`` per step and a resumable checkpoint (``checkpoint/``: the adapter
via ``save_pretrained`` + ``trainer_state.pt`` with the optimiser, the step and the RNG states).
``resume=True`` continues from it in data order.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from .baseline import LoRAPolicy
from .data import TokenizedPair, collate_pairs
from .model import QAdapterModel, _PeftPolicy
from .step_loss import preference_step_loss

__all__ = ["TrainerConfig", "PreferenceTrainer", "preference_step_loss", "train_qadapter", "disable_model_dropout"]

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
    """Preference pairs per process per micro-step (global batch = batch_size x processes x grad_accum;
    official: 512 in all on 4 GPUs; CPU scale: 8)."""
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
    disable_dropout: bool = True
    """Set the base model's dropout to 0 (TRL's ``disable_dropout``, on by default for preference losses), so
    the policy forward and the reference forward (adapter off) see the same dropout-free network: with
    dropout on, DPO at initialisation (policy == reference) is not ``log 2`` and Q-Adapter's residual rewards
    mix two dropout masks. LoRA's own dropout (``QAdapterConfig.lora_dropout``, official 0.05) is kept: it
    only touches the adapter's input. ``False``: the model's dropout as configured (the official code)."""

    def __post_init__(self) -> None:
        if self.method not in ("q-adapter", "dpo", "sft"):
            raise ValueError(f"method must be 'q-adapter', 'dpo' or 'sft', got {self.method!r}")
        for name in ("batch_size", "epochs", "grad_accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "warmup_steps", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = off), got {getattr(self, name)}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a finite number > 0, got {self.learning_rate}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be finite and >= 0, got {self.weight_decay}")
        if not (math.isfinite(self.dpo_beta) and self.dpo_beta > 0):
            raise ValueError(f"dpo_beta must be finite and > 0, got {self.dpo_beta}")


def disable_model_dropout(model: torch.nn.Module) -> int:
    """Set the dropout of a (PEFT-wrapped) model to 0, LoRA's own ``lora_dropout`` excepted (TRL's
    ``disable_dropout_in_model`` for the base network): every ``nn.Dropout`` and every float
    ``attention_dropout`` attribute (Llama-style attention applies it functionally). Returns how many were set."""
    n = 0
    for name, mod in model.named_modules():
        if "lora_dropout" in name:
            continue
        if isinstance(mod, torch.nn.Dropout) and mod.p:
            mod.p = 0.0
            n += 1
        if isinstance(getattr(mod, "attention_dropout", None), float) and mod.attention_dropout:
            mod.attention_dropout = 0.0
            n += 1
    return n


class PreferenceTrainer:
    """Train the LoRA adapter of a :class:`QAdapterModel` (or a :class:`LoRAPolicy` for DPO/SFT).

    Args:
        policy: the model whose LoRA parameters are trained (base frozen).
        pairs: tokenised training pairs.
        pad_token_id: id used for right padding.
        cfg: :class:`TrainerConfig`.
        output_dir: where ``metrics.jsonl``, ``checkpoint/`` and the final adapter go (None: nowhere).
        accelerator: an ``accelerate.Accelerator`` (default: a fresh one; ``device="cpu"`` or no CUDA
            gives a CPU one, which under ``torchrun``/``accelerate launch`` is multi-process with gloo).
        device: ``auto``, ``cpu`` or ``cuda`` for the default accelerator.
    """

    def __init__(self, policy: _PeftPolicy, pairs: Sequence[TokenizedPair], pad_token_id: int,
                 cfg: TrainerConfig | None = None, *, output_dir: str | Path | None = None,
                 accelerator=None, device: str = "auto") -> None:
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
        cpu = device == "cpu" or not torch.cuda.is_available()
        self.acc = accelerator or Accelerator(cpu=cpu, gradient_accumulation_steps=self.cfg.grad_accum)
        if self.acc.gradient_accumulation_steps != self.cfg.grad_accum:
            # `accelerate launch` with a DeepSpeed config exports ACCELERATE_GRADIENT_ACCUMULATION_STEPS, which
            # overrides the value passed to Accelerator; the step counting and --resume assume grad_accum
            raise ValueError(
                f"grad_accum: the trainer is set to {self.cfg.grad_accum} but the Accelerator accumulates "
                f"{self.acc.gradient_accumulation_steps} batches (the accelerate launch config's "
                "gradient_accumulation_steps / ACCELERATE_GRADIENT_ACCUMULATION_STEPS, or the accelerator "
                "passed in); set --grad-accum and the config to the same value")
        if self.cfg.disable_dropout:
            disable_model_dropout(policy.peft_model)
        params = policy.trainable_parameters()
        if not params:
            raise ValueError("the policy has no trainable (LoRA) parameters")
        # a model dispatched over devices (device_map) or quantised stays where the loader put it
        base = policy.peft_model.get_base_model()
        placed = bool(getattr(base, "hf_device_map", None)) or bool(getattr(base, "is_quantized", False))
        # the policy's forward computes the loss, so DDP sees the forward and syncs the LoRA gradients
        self.model = self.acc.prepare_model(policy, device_placement=not placed)
        self.opt = torch.optim.AdamW(params, lr=self.cfg.learning_rate, weight_decay=self.cfg.weight_decay)
        warm = self.cfg.warmup_steps
        # stepped once per optimiser step (not prepared: accelerate would step it once per process)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.opt = self.acc.prepare_optimizer(self.opt)
        self.world = self.acc.num_processes
        self.rank = self.acc.process_index
        self.global_batch = self.cfg.batch_size * self.world
        if self.world > 1 and len(self.pairs) < self.global_batch:
            raise ValueError(f"{len(self.pairs)} training pairs cannot fill one global batch of "
                             f"{self.cfg.batch_size} pairs x {self.world} processes; lower batch_size")
        self.steps_per_epoch = -(-len(self.pairs) // self.global_batch) // self.cfg.grad_accum or 1
        total = self.steps_per_epoch * self.cfg.epochs
        self.total_steps = min(total, self.cfg.max_steps) if self.cfg.max_steps else total
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.seen: list[list[int]] = []
        """Indices (into ``pairs``) this rank trained on, one list per micro-batch (for checks)."""

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's micro-batches of ``epoch``: indices into ``pairs``.

        The seeded epoch order (``[seed, epoch]``, the same on every rank) is cut into global batches
        of ``batch_size x num_processes``; rank ``r`` takes slice ``[r*B, (r+1)*B)`` of each. With more
        than one process a short last global batch is filled from the start of the order (as
        ``accelerate``'s ``even_batches`` does), so every rank runs the same number of steps.
        """
        order = np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.pairs))
        G, B = self.global_batch, self.cfg.batch_size
        out = []
        for i in range(0, len(order), G):
            g = order[i:i + G]
            if self.world > 1 and len(g) < G:
                g = np.concatenate([g, order[: G - len(g)]])
            out.append([int(j) for j in g[self.rank * B:(self.rank + 1) * B]])
        return out

    # --- checkpoints --------------------------------------------------------------------------
    @property
    def checkpoint_dir(self) -> Path | None:
        return self.out / "checkpoint" if self.out is not None else None

    def save_checkpoint(self) -> None:
        """Write ``checkpoint/`` (adapter + optimiser + step + every RNG state) with
        :func:`iclr25.core.checkpoint.atomic_folder`: a kill at any moment leaves the previous checkpoint or
        this one whole, never the adapter of one step beside the optimiser of another."""
        from iclr25.core.checkpoint import atomic_folder, capture_rng_state

        if self.checkpoint_dir is None or not self.acc.is_main_process:
            return
        lora = {k: v.detach().cpu() for k, v in self.policy.peft_model.named_parameters() if v.requires_grad}
        with atomic_folder(self.checkpoint_dir) as tmp:
            self.policy.save_pretrained(tmp)
            # byte-identical after a resume: pickle memoises a string object shared with the optimiser state
            # (its "step" / "weight_decay" keys) in a fresh run but not in a resumed one (equal values, other
            # bytes), so the metadata is JSON text and the step is "global_step"
            torch.save({"global_step": self.step, "optimizer": self.opt.state_dict(), "lora": lora,
                        "rng": json.dumps(capture_rng_state(torch_state=True)),
                        "config": json.dumps(asdict(self.cfg), sort_keys=True),
                        "n_pairs": len(self.pairs), "data_sha256": self.data_digest(), "world": self.world,
                        "policy": json.dumps({"kind": self.policy.kind, **self.policy.cfg.to_dict()}, sort_keys=True)},
                       tmp / "trainer_state.pt")

    # settings a resumed run may change (a longer run, other logging); every other TrainerConfig field
    # fixes the data order, the loss or the optimiser state, so a change is an error
    RESUMABLE_CHANGES = ("epochs", "max_steps", "checkpoint_every", "log_every", "progress")

    def has_checkpoint(self) -> bool:
        """Whether ``checkpoint/`` holds a trainer state (after putting back one a kill left half-swapped)."""
        from iclr25.core.checkpoint import recover_folder

        d = self.checkpoint_dir
        return d is not None and recover_folder(d) is not None and (d / "trainer_state.pt").is_file()

    def data_digest(self) -> str:
        """SHA-256 of the tokenised training pairs in order (the data file, the truncation lengths, the pair
        limit and the tokenizer all change it): a resume on other data is refused, not continued."""
        import hashlib

        if getattr(self, "_data_sha256", None) is None:  # the pairs are fixed: hashed once, not per checkpoint
            h = hashlib.sha256()
            for p in self.pairs:
                for ids in (p.prompt, p.chosen, p.rejected):
                    h.update(len(ids).to_bytes(8, "little"))
                    h.update(np.asarray(ids, dtype=np.int64).tobytes())
            self._data_sha256 = h.hexdigest()
        return self._data_sha256

    def check_checkpoint(self) -> dict | None:
        """Read ``checkpoint/`` and refuse (``ValueError`` naming them) settings or data other than those it
        was written with; returns the trainer state, or None when there is no checkpoint. Nothing is
        restored (the CLI calls it before it writes ``config.json``)."""
        d = self.checkpoint_dir
        if not self.has_checkpoint():
            return None
        fix = f"delete {d} or run without --resume (or in another --out)"
        try:
            st = torch.load(d / "trainer_state.pt", map_location="cpu", weights_only=True)
            if not isinstance(st, dict) or not {"global_step", "optimizer", "lora", "rng"} <= set(st):
                raise ValueError("not a trainer state written by PreferenceTrainer")
        except Exception as e:  # torch raises UnpicklingError/RuntimeError/EOFError on a torn or foreign file
            raise ValueError(f"checkpoint {d / 'trainer_state.pt'} is torn or not a PreferenceTrainer state "
                             f"({type(e).__name__}); {fix}") from e
        saved = json.loads(st["config"]) if isinstance(st.get("config"), str) else st.get("config", {})
        now = asdict(self.cfg)
        changed = [f"{k}: {saved[k]!r} -> {now[k]!r}" for k in now
                   if k in saved and k not in self.RESUMABLE_CHANGES and saved[k] != now[k]]
        for key, cur in (("n_pairs", len(self.pairs)), ("world", self.world)):
            if key in st and st[key] != cur:
                changed.append(f"{'training pairs' if key == 'n_pairs' else 'processes'}: {st[key]} -> {cur}")
        if "data_sha256" in st and st["data_sha256"] != self.data_digest():  # absent in older checkpoints
            changed.append("training data: other tokenised pairs (--data, --max-length, --max-prompt-length, "
                           "--max-pairs or the tokenizer changed)")
        cur_policy = json.dumps({"kind": self.policy.kind, **self.policy.cfg.to_dict()}, sort_keys=True)
        if "policy" in st and st["policy"] != cur_policy:
            old_p, new_p = json.loads(st["policy"]), json.loads(cur_policy)
            changed += [f"{k}: {old_p.get(k)!r} -> {new_p.get(k)!r}" for k in sorted(set(old_p) | set(new_p))
                        if old_p.get(k) != new_p.get(k)]
        if changed:
            raise ValueError(f"--resume: checkpoint {d} was written with other settings ({'; '.join(changed)}); "
                             f"only {', '.join(self.RESUMABLE_CHANGES)} may change on resume; {fix}")
        return st

    def load_checkpoint(self) -> bool:
        """Restore from ``checkpoint/`` (after :meth:`check_checkpoint`); returns False when there is none."""
        from iclr25.core.checkpoint import restore_rng_state

        st = self.check_checkpoint()
        if st is None:
            return False
        d = self.checkpoint_dir
        fix = f"delete {d} or run without --resume (or in another --out)"
        named = dict(self.policy.peft_model.named_parameters())
        with torch.no_grad():
            for k, v in st["lora"].items():
                if k not in named:
                    raise ValueError(f"checkpoint {d} does not match this model (unknown parameter {k}); {fix}")
                if named[k].shape != v.shape:
                    raise ValueError(f"checkpoint {d} does not match this model ({k}: shape {tuple(v.shape)} "
                                     f"saved, {tuple(named[k].shape)} now); {fix}")
                named[k].copy_(v.to(named[k].device))
        self.opt.load_state_dict(st["optimizer"])
        restore_rng_state(json.loads(st["rng"]))
        self.step = int(st["global_step"])
        log.info("resumed from %s at step %d", d, self.step)
        return True

    # --- loop ----------------------------------------------------------------------------------
    def train(self, *, resume: bool = False, on_step=None) -> list[dict[str, float]]:
        """Run the optimisation; returns the per-step stats (also in ``metrics.jsonl``).

        Args:
            resume: continue from ``checkpoint/`` when there is one.
            on_step: ``on_step(step, record)`` called after each optimiser step (e.g. an evaluation for
                an accuracy-vs-steps curve; the model is put back in train mode after it).
        """
        from iclr25.core.checkpoint import trim_jsonl
        from iclr25.core.progress import progress

        if resume and not self.load_checkpoint():
            # one behaviour for every package (vbon's): a resume that cannot resume is an error, not a fresh run
            raise FileNotFoundError(f"--resume given but no checkpoint in {self.checkpoint_dir} (train without "
                                    "--resume first)")
        metrics_fh = None
        main = self.acc.is_main_process
        if self.out is not None and main:
            self.out.mkdir(parents=True, exist_ok=True)
            metrics_path = self.out / "metrics.jsonl"
            if resume:  # records past the checkpoint (a kill between two checkpoints) and a torn line go
                trim_jsonl(metrics_path, self.step)
            metrics_fh = open(metrics_path, "a" if resume else "w", encoding="utf-8")
        self.model.train()
        bar = progress(None, desc=f"train[{self.cfg.method}]", total=self.total_steps,
                       unit="step") if (self.cfg.progress and main) else None
        if bar is not None and self.step:
            bar.update(self.step)
        t0 = time.perf_counter()
        try:
            epoch = self.step // self.steps_per_epoch
            while self.step < self.total_steps:
                batches = self.epoch_batches(epoch)
                skip = (self.step - epoch * self.steps_per_epoch) * self.cfg.grad_accum
                for i, idx in enumerate(batches):
                    if i < skip:
                        continue
                    items = [self.pairs[j] for j in idx]
                    batch = {k: v.to(self.acc.device) for k, v in collate_pairs(items, self.pad).items()}
                    self.seen.append(idx)
                    with self.acc.accumulate(self.model):
                        loss, stats = self.model(**batch, method=self.cfg.method, dpo_beta=self.cfg.dpo_beta)
                        self.acc.backward(loss)
                        if self.acc.sync_gradients:
                            self.acc.clip_grad_norm_(self.policy.trainable_parameters(), 1.0)
                        self.opt.step()
                        if self.acc.sync_gradients:
                            self.sched.step()
                        self.opt.zero_grad(set_to_none=True)
                    if not self.acc.sync_gradients:
                        continue
                    self.step += 1
                    # the loss of the global batch: mean over ranks (= one process on the concatenation)
                    gloss = float(self.acc.reduce(loss.detach(), "mean")) if self.world > 1 else float(loss.detach())
                    if not math.isfinite(gloss):
                        raise FloatingPointError(f"non-finite loss {gloss} at step {self.step}; lower the "
                                                 "learning rate or check the data")
                    rec = {"step": self.step, "epoch": epoch, "loss": gloss, **stats}
                    self.history.append(rec)
                    if metrics_fh is not None:
                        metrics_fh.write(json.dumps(rec) + "\n")
                        metrics_fh.flush()  # a kill must not lose logged steps that a checkpoint already covers
                    if bar is not None:
                        bar.update(1)
                        if self.step % max(1, self.cfg.log_every) == 0:
                            bar.set_postfix(loss=f"{rec['loss']:.4f}")
                    if on_step is not None:
                        on_step(self.step, rec)
                        self.model.train()
                    if self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
                        self.save_checkpoint()
                    if self.step >= self.total_steps:
                        break
                epoch += 1
        finally:
            if bar is not None:
                bar.close()
            if metrics_fh is not None:
                metrics_fh.close()
        self.model.eval()
        self.save_checkpoint()
        self.acc.wait_for_everyone()
        log.info("%s: %d steps in %.1f s", self.cfg.method, self.step, time.perf_counter() - t0)
        return self.history


def train_qadapter(model: QAdapterModel, pairs: Sequence[TokenizedPair], pad_token_id: int,
                   cfg: TrainerConfig | None = None, **kwargs) -> list[dict[str, float]]:
    """Train ``model`` on tokenised pairs with :class:`PreferenceTrainer`; returns the per-step stats."""
    return PreferenceTrainer(model, pairs, pad_token_id, cfg or TrainerConfig(), **kwargs).train()
