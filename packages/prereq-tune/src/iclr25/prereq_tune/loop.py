"""The shared training loop of both stages: the stage settings (:class:`TrainArgs` and the CPU-scale and
official presets), the run record (:class:`TrainResult`), the optimiser and schedule, gradient accumulation,
the frozen check before every step, and checkpoints (``<dir>/last``, atomic; ``--resume``)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .data import finite_in
from .groups import _Roles
from .lora import FrozenTensorError, changed_tensors

__all__ = ["TrainArgs", "TrainResult", "KNOWLEDGE_ARGS_TINY", "SKILL_ARGS_TINY", "KNOWLEDGE_ARGS_BIO_STATEMENT",
           "KNOWLEDGE_ARGS_BIO_PASSAGE", "SKILL_ARGS_BIO", "SKILL_ARGS_POPQA", "STATE_FILE", "RNG_FILE", "checkpoint_exists"]

log = logging.getLogger("iclr25.prereq_tune.training")
STATE_FILE = "trainer_state.json"
RNG_FILE = "rng_state.json"


def checkpoint_exists(checkpoint_dir: str | Path) -> bool:
    """Whether ``checkpoint_dir/last`` holds a checkpoint, after the core's
    :func:`~iclr25.core.checkpoint.recover_folder` puts back one a kill left between the two renames of a save."""
    from iclr25.core.checkpoint import recover_folder

    return recover_folder(Path(checkpoint_dir) / "last") is not None


@dataclass(frozen=True)
class TrainArgs:
    """Optimisation settings of one training stage (AdamW, warm-up then cosine or constant).

    Args:
        epochs: passes over the data (> 0; fractional allowed).
        lr: peak learning rate (> 0).
        batch_size: rows (or subjects, in multi-version mode) per micro-batch and process.
        grad_accum: micro-batches per optimiser step.
        weight_decay, beta1, beta2: AdamW.
        warmup_ratio: linear warm-up share of the optimiser steps, in [0, 1].
        scheduler: ``"cosine"`` (decay to 0, as the official recipes) or ``"constant"``.
        max_grad_norm: gradient-norm clip (0: none).
        max_length: token limit per row (skill rows longer are dropped and counted; knowledge
            texts are truncated and counted).
        seed: sampling and adapter-draw seed.
        save_every: write a checkpoint every this many optimiser steps (0: at the end of every
            epoch only) when a checkpoint folder is given.
    """

    epochs: float = 1.0
    lr: float = 3e-5
    batch_size: int = 8
    grad_accum: int = 1
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    warmup_ratio: float = 0.0
    scheduler: Literal["cosine", "constant"] = "cosine"
    max_grad_norm: float = 1.0
    max_length: int = 768
    seed: int = 0
    save_every: int = 0

    def __post_init__(self) -> None:
        finite_in("epochs", self.epochs, 0.0, lo_open=True)
        finite_in("lr", self.lr, 0.0, lo_open=True)
        finite_in("weight_decay", self.weight_decay, 0.0)
        finite_in("beta1", self.beta1, 0.0, 0.999999)
        finite_in("beta2", self.beta2, 0.0, 0.999999)
        finite_in("warmup_ratio", self.warmup_ratio, 0.0, 1.0)
        finite_in("max_grad_norm", self.max_grad_norm, 0.0)
        for k in ("batch_size", "grad_accum", "max_length"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k}={v!r} must be an integer >= 1")
        if isinstance(self.save_every, bool) or not isinstance(self.save_every, int) or self.save_every < 0:
            raise ValueError(f"save_every={self.save_every!r} must be an integer >= 0")
        if self.scheduler not in ("cosine", "constant"):
            raise ValueError(f"scheduler={self.scheduler!r} must be 'cosine' or 'constant'")


#: CPU-scale stage settings (spec §4.4 prototype): knowledge 40 epochs, lr 3e-3, batch 64;
#: skill 20 epochs, lr 2e-3, batch 64. Weight decay, betas and warm-up follow the official recipes.
KNOWLEDGE_ARGS_TINY = TrainArgs(epochs=40, lr=3e-3, batch_size=64, weight_decay=0.1, beta2=0.95, warmup_ratio=0.03,
                                max_length=32)
SKILL_ARGS_TINY = TrainArgs(epochs=20, lr=2e-3, batch_size=64, weight_decay=0.01, warmup_ratio=0.1, max_length=32)
#: Official Llama-3-8B recipes (spec §1.7).
KNOWLEDGE_ARGS_BIO_STATEMENT = TrainArgs(epochs=15, lr=3e-5, batch_size=64, grad_accum=1, weight_decay=0.1,
                                         beta2=0.95, warmup_ratio=0.03, max_length=128)
KNOWLEDGE_ARGS_BIO_PASSAGE = TrainArgs(epochs=15, lr=3e-5, batch_size=8, grad_accum=2, weight_decay=0.1,
                                       beta2=0.95, warmup_ratio=0.03, max_length=768)
SKILL_ARGS_BIO = TrainArgs(epochs=50, lr=3e-5, batch_size=8, grad_accum=2, weight_decay=0.01, warmup_ratio=0.1,
                           max_length=768)
SKILL_ARGS_POPQA = TrainArgs(epochs=3, lr=5e-5, batch_size=32, grad_accum=2, weight_decay=0.01, warmup_ratio=0.1,
                             max_length=64)


@dataclass
class TrainResult:
    """What a training run did.

    Attributes:
        adapter: the trained adapter.
        steps: optimiser steps taken in total (including those before a resume).
        epochs_done: data passes completed (fractional when stopped early).
        final_loss: mean loss of the last optimiser step (nats per label token).
        losses: loss of every optimiser step.
        seconds: wall time of this call.
        rows_forwarded, rows_counted: rows that went through a forward pass, and rows whose labels
            counted in the main loss (their ratio is 1 with routing, V with the official sampler).
        frozen_changed: names of frozen tensors whose hash changed (always empty: a change raises).
        trainable_unchanged: trained-adapter tensors that did not change.
        n_frozen, n_trainable: tensor counts.
        resumed_from: the optimiser step a ``resume`` continued from (0: fresh).
        stopped_early: a callback stopped training.
        draws: how often each knowledge adapter was drawn.
        history: the callback's records.
        frozen_hashes: sha256 of every frozen tensor (before = after).
    """

    adapter: str
    steps: int = 0
    epochs_done: float = 0.0
    final_loss: float = float("nan")
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    rows_forwarded: int = 0
    rows_counted: int = 0
    frozen_changed: list[str] = field(default_factory=list)
    trainable_unchanged: list[str] = field(default_factory=list)
    n_frozen: int = 0
    n_trainable: int = 0
    resumed_from: int = 0
    stopped_early: bool = False
    draws: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    frozen_hashes: dict[str, str] = field(default_factory=dict, repr=False)
    n_dropped_rows: int = 0

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("frozen_hashes")
        d["losses"] = [round(x, 5) for x in self.losses[-20:]]
        return d


def _dist(accelerator: Any) -> tuple[int, int]:
    if accelerator is None:
        return 0, 1
    return int(accelerator.process_index), int(accelerator.num_processes)


def _lr_lambda(n_steps: int, warmup_ratio: float, kind: str) -> Callable[[int], float]:
    warm = max(1, int(round(warmup_ratio * n_steps))) if warmup_ratio > 0 else 0

    def f(s: int) -> float:
        if warm and s < warm:
            return (s + 1) / warm
        if kind == "constant":
            return 1.0
        prog = (s - warm) / max(1, n_steps - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, prog)))

    return f


class _Loop:
    """Optimiser, schedule, accumulation, frozen checks, checkpoints."""

    def __init__(self, model: Any, roles: _Roles, args: TrainArgs, n_steps: int, *, accelerator: Any,
                 checkpoint_dir: str | Path | None, kind: str, fingerprint: dict[str, Any]) -> None:
        import torch

        self.model, self.roles, self.args, self.n_steps = model, roles, args, n_steps
        self.acc = accelerator
        self.ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.kind, self.fingerprint = kind, fingerprint
        params = [p for _, p in roles.trainable]
        if not params:
            raise ValueError(f"adapter {roles.trained!r} has no parameters to train")
        self.opt = torch.optim.AdamW(params, lr=args.lr, betas=(args.beta1, args.beta2), weight_decay=args.weight_decay)
        opt_ids = {id(p) for g in self.opt.param_groups for p in g["params"]}
        if opt_ids != {id(p) for p in params} or any(id(p) in opt_ids for _, p in roles.frozen):
            raise FrozenTensorError("the optimiser must hold the trained adapter's parameters only")
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, _lr_lambda(n_steps, args.warmup_ratio, args.scheduler))
        self.engine = None
        if accelerator is not None:
            from accelerate.utils import DistributedType

            if accelerator.distributed_type == DistributedType.DEEPSPEED:
                self.engine, self.opt, self.sched = accelerator.prepare(model, self.opt, self.sched)
        self.step = 0

    def backward(self, loss: Any, last_micro: bool) -> None:
        if self.engine is not None:       # DeepSpeed: the engine scales, reduces, clips and steps
            self.acc.gradient_state._set_sync_gradients(last_micro)
            self.acc.backward(loss)
        else:
            (loss / self.args.grad_accum).backward()

    def optimizer_step(self) -> None:
        import torch

        self.roles.check(f"{self.kind} step {self.step}")
        params = [p for _, p in self.roles.trainable]
        if self.engine is None:
            if self.acc is not None and self.acc.num_processes > 1:
                for p in params:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    p.grad = self.acc.reduce(p.grad, reduction="mean")
            if self.args.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        self.sched.step()
        self.step += 1

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self, extra: dict[str, Any]) -> None:
        """Write ``<checkpoint_dir>/last`` through the core's :func:`~iclr25.core.checkpoint.atomic_folder` (a kill
        mid-save keeps the previous checkpoint whole): the adapter, optimiser and scheduler (or DeepSpeed's state),
        every RNG state of every process (``rng_state.json``: torch CPU/CUDA, NumPy, Python, so LoRA dropout draws
        the same masks after a resume) and ``trainer_state.json``."""
        if self.ckpt is None:
            return
        from iclr25.core.checkpoint import atomic_folder, capture_rng_state

        rngs = [capture_rng_state(torch_state=True)]
        distributed = self.acc is not None and self.acc.num_processes > 1
        if distributed:
            from accelerate.utils import gather_object

            rngs = gather_object(rngs)  # collective: every rank
        main = self.acc is None or self.acc.is_main_process
        if not main and self.engine is None:
            return
        import contextlib

        import torch
        from safetensors.torch import save_file

        last = self.ckpt / "last"
        with contextlib.ExitStack() as stack:
            if main:
                tmp = stack.enter_context(atomic_folder(last))
            if self.engine is not None:  # every rank writes its ZeRO shard into the one temporary folder
                self.acc.wait_for_everyone()
                tmp = last.with_name(last.name + ".tmp")
                self.acc.save_state(str(tmp / "accelerate"))
                self.acc.wait_for_everyone()
            else:
                save_file({n: p.detach().cpu().contiguous() for n, p in self.roles.trainable},
                          str(tmp / "adapter.safetensors"))
                torch.save({"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict()}, tmp / "optim.pt")
            if main:
                (tmp / RNG_FILE).write_text(json.dumps({"processes": rngs}), encoding="utf-8")
                state = {"step": self.step, "kind": self.kind, "fingerprint": self.fingerprint,
                         "args": asdict(self.args), "n_steps": self.n_steps, **extra}
                (tmp / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
        if self.engine is not None:
            self.acc.wait_for_everyone()

    def load(self) -> dict[str, Any]:
        import torch
        from safetensors.torch import load_file

        if self.ckpt is None:
            raise ValueError("resume needs a checkpoint folder")
        checkpoint_exists(self.ckpt)
        d = self.ckpt / "last"
        f = d / STATE_FILE
        if not f.is_file():
            raise FileNotFoundError(f"--resume: no checkpoint in {self.ckpt} (expected {f}); run without --resume")
        state = json.loads(f.read_text())
        if state.get("kind") != self.kind:
            raise ValueError(f"--resume: the checkpoint in {d} is a {state.get('kind')} run, not {self.kind}")
        fp = state.get("fingerprint", {})
        for k, v in self.fingerprint.items():
            if k != "frozen_hashes" and fp.get(k) != v:
                raise ValueError(f"--resume: the checkpoint in {d} was made with {k}={fp.get(k)!r}, this run has "
                                 f"{v!r}; resume with the same data and settings or start afresh")
        if fp.get("frozen_hashes") != self.fingerprint.get("frozen_hashes"):
            bad = changed_tensors(fp.get("frozen_hashes", {}), self.fingerprint.get("frozen_hashes", {}))
            raise FrozenTensorError(f"--resume: {len(bad)} frozen tensor(s) differ from the checkpoint's "
                                    f"(e.g. {bad[:3]}): the knowledge adapters or the base model are not the ones "
                                    "training started with")
        if self.engine is not None:
            self.acc.load_state(str(d / "accelerate"))
        else:
            w = load_file(str(d / "adapter.safetensors"))
            with torch.no_grad():
                for n, p in self.roles.trainable:
                    if n not in w:
                        raise ValueError(f"--resume: the checkpoint lacks {n}")
                    p.copy_(w[n].to(p.device, p.dtype))
            o = torch.load(d / "optim.pt", weights_only=True, map_location="cpu")
            self.opt.load_state_dict(o["optimizer"])
            self.sched.load_state_dict(o["scheduler"])
        self.step = int(state["step"])
        self._restore_rng(d)
        return state

    def _restore_rng(self, d: Path) -> None:
        """Put back this process's RNG states (last: nothing after it in the resume path draws)."""
        from iclr25.core.checkpoint import restore_rng_state

        f = d / RNG_FILE
        if not f.is_file():
            log.warning("--resume: %s is missing (a checkpoint of an older version): the torch/NumPy/Python RNG "
                        "states are not restored, so LoRA dropout draws other masks than an uninterrupted run "
                        "(the resume is not exact)", f)
            return
        try:
            rngs = json.loads(f.read_text(encoding="utf-8"))["processes"]
        except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"--resume: {f} is damaged ({e}); run without --resume (it starts over) or start a "
                             "new --out") from None
        rank, world = _dist(self.acc)
        if not isinstance(rngs, list) or len(rngs) != world:
            raise ValueError(f"--resume: {f} holds the RNG states of {len(rngs) if isinstance(rngs, list) else '?'} "
                             f"process(es), this run has {world}; resume with the same number of processes")
        restore_rng_state(rngs[rank])


def _progress(total: int, desc: str, quiet: bool):
    from iclr25.core.progress import progress

    return progress(range(total), desc=desc, total=total, unit="step", quiet=quiet or None)
