"""The two training stages of Prereq-Tune (spec §1.3, §1.5, §1.6).

* :func:`train_knowledge_adapter` — stage 1: one knowledge LoRA on a knowledge corpus with the
  ordinary causal-LM loss on all tokens; the base and every other adapter frozen.
* :func:`train_skill_adapter` — stage 2: the skill LoRA with a knowledge LoRA active but frozen:

  - **multi-version routing** (``multi_version=True``): at every loss computation one fictitious
    knowledge adapter ``k`` is drawn, its version ``v`` parsed from the name, and the micro-batch
    holds only version-``v`` rows (one row of each sampled subject). The official sampler instead
    loads all V versions of each subject and masks the loss of the others (V rows forwarded per
    counted row); it is kept as ``sampler="all_versions"``;
  - **mixed real/fictitious mode** (rows with ``fake=False``): fictitious rows with a fictitious
    knowledge LoRA + skill, real rows with the real knowledge LoRA + skill, one token-mean CE over
    both, plus ``real_weight`` × CE of the real rows with the skill LoRA alone;
  - **alternating groups** (``alternate_groups=True``): the ordered adapter list is split into a
    first and second half; loss computation ``c`` draws from the first half when ``c`` is even
    (the counter advances per micro-batch, as in the official trainer).

  With no knowledge adapter it is plain single-LoRA SFT (the SFT_real / SFT_fictitious baselines).

Frozen invariant (issue #23): the optimiser holds the trained adapter's parameters only;
``requires_grad`` is re-applied to every other parameter after each activation and asserted (with
"no gradient") before each step; all other tensors are hashed (sha256) before and after training
and across ``--resume``, and any difference raises :class:`~iclr25.prereq_tune.lora.FrozenTensorError`.

Full scale: pass an ``accelerate.Accelerator`` (``accelerate launch``, DDP or DeepSpeed ZeRO-2).
Each process reads a disjoint shard of every epoch's order; gradients are averaged over processes
(DeepSpeed: by its engine; DDP: an explicit all-reduce of the trainable gradients, because the
mixed mode runs several forward passes per backward).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .data import (
    OFFICIAL_FORMAT,
    EncodedRows,
    PromptFormat,
    SkillExample,
    encode_completions,
    encode_texts,
    finite_in,
)
from .lora import FrozenTensorError, adapter_names, adapter_parameters, changed_tensors, tensor_hashes

__all__ = [
    "TrainArgs",
    "TrainResult",
    "KNOWLEDGE_ARGS_TINY",
    "SKILL_ARGS_TINY",
    "merged_knowledge_weights",
    "KNOWLEDGE_ARGS_BIO_STATEMENT",
    "KNOWLEDGE_ARGS_BIO_PASSAGE",
    "SKILL_ARGS_BIO",
    "SKILL_ARGS_POPQA",
    "train_knowledge_adapter",
    "train_skill_adapter",
    "adapter_groups",
    "completion_loss",
]

log = logging.getLogger(__name__)
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


# ------------------------------------------------------------------------------------------------
# losses


def _supports_logits_to_keep(model: Any) -> bool:
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def completion_loss(model: Any, input_ids: Any, attention_mask: Any, labels: Any, *,
                    logits_to_keep: bool | None = None, param_overrides: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Summed next-token cross-entropy over label positions, and their count.

    Args:
        model: a causal LM (``model(input_ids=, attention_mask=).logits``: ``(B, T, V)``).
        input_ids, attention_mask, labels: ``(B, T)`` long; ``labels == -100`` where no loss is taken
            (label ``t`` is predicted from position ``t - 1``).
        logits_to_keep: compute logits only at positions that predict a label (union over the
            batch) when the model supports it (``None``: detect).
        param_overrides: parameter name -> tensor used in place of that parameter for this forward
            (``torch.func.functional_call``; the module's own tensors are not touched), e.g. base
            weights with a frozen knowledge LoRA folded in (:func:`merged_knowledge_weights`).

    Returns:
        ``(loss_sum, n_tokens)``: float32 scalar (nats) and a long scalar. The token-mean CE is
        ``loss_sum / n_tokens``.
    """
    import torch
    import torch.nn.functional as F

    dev = next(model.parameters()).device
    input_ids, attention_mask, labels = input_ids.to(dev), attention_mask.to(dev), labels.to(dev)
    target = labels[:, 1:]
    if logits_to_keep is None:
        logits_to_keep = _supports_logits_to_keep(model)
    if param_overrides:
        def fwd(**kw: Any) -> Any:
            return torch.func.functional_call(model, param_overrides, (), kw, strict=False)
    else:
        fwd = model
    if logits_to_keep:
        pos = torch.nonzero((target != -100).any(0)).flatten()
        logits = fwd(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=pos).logits
        target = target[:, pos]
    else:
        logits = fwd(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    mask = target != -100
    n = mask.sum()
    loss = F.cross_entropy(logits[mask].float(), target[mask], reduction="sum")
    return loss, n


def merged_knowledge_weights(model: Any, adapter: str) -> dict[str, Any]:
    """The base weights with the frozen LoRA ``adapter`` folded in: ``{name: W + ΔW}`` for every base
    weight ``adapter`` adapts, with ``ΔW = scaling · B A`` in the weight's own layout (PEFT's
    ``get_delta_weight``; transposed for GPT-2 ``Conv1D``). New tensors, no gradient; the model is not
    modified. Forwarding with them (``completion_loss(..., param_overrides=)``) and only the skill LoRA
    active computes the same function as the stacked forward with ``[adapter, skill]`` active (up to
    float rounding), at the cost of a plain single-LoRA step: the knowledge LoRA's gradient is never
    needed, so its two extra matmuls per layer need not run. Memory: one copy of every adapted weight
    per knowledge adapter — meant for small models (the CPU-scale reproduction), not an 8B base.

    Raises:
        ValueError: ``adapter`` adapts no layer, a non-floating (quantised) base weight, or LoRA dropout
            > 0 on ``adapter`` (the stacked forward would apply it in training mode; merging cannot).
    """
    import torch
    from peft.tuners.lora import LoraLayer

    params = dict(model.named_parameters())
    out: dict[str, Any] = {}
    with torch.no_grad():
        for mname, mod in model.named_modules():
            if not (isinstance(mod, LoraLayer) and adapter in mod.lora_A):
                continue
            if not isinstance(mod.lora_dropout[adapter], torch.nn.Identity):
                raise ValueError(f"merged knowledge forward: adapter {adapter!r} has LoRA dropout > 0 in {mname}; "
                                 "use knowledge_forward='stacked'")
            w = mod.get_base_layer().weight
            if not w.is_floating_point():
                raise ValueError(f"merged knowledge forward: the base weight of {mname} is {w.dtype} (quantised); "
                                 "use knowledge_forward='stacked'")
            name = next((n for n, p in params.items() if p is w), None)
            if name is None:
                raise ValueError(f"merged knowledge forward: cannot find the parameter name of {mname}'s base weight")
            out[name] = (w + mod.get_delta_weight(adapter).to(w.dtype)).detach()
    if not out:
        raise ValueError(f"merged knowledge forward: adapter {adapter!r} adapts no layer of this model")
    return out


# ------------------------------------------------------------------------------------------------
# adapter groups and routing


def adapter_groups(names: Sequence[str], alternate: bool) -> tuple[list[str], list[str]]:
    """The two adapter groups of ``alternate_cpt_group`` (spec §1.5): first and second half of the
    ordered list, or the whole list twice when ``alternate`` is off.

    Raises:
        ValueError: ``alternate`` with fewer than two adapters.
    """
    names = list(names)
    if not alternate:
        return names, names
    if len(names) < 2:
        raise ValueError(f"alternate_groups needs at least two knowledge adapters, got {names}")
    h = len(names) // 2
    return names[:h], names[h:]


class _Roles:
    """The run's parameters split once: trained adapter vs everything else."""

    def __init__(self, model: Any, trained: str) -> None:
        ids = {id(p) for p in adapter_parameters(model, trained).values()}
        from peft.tuners.lora import LoraLayer

        self.model = model
        self.trained = trained
        self.lora_layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
        self.trainable = [(n, p) for n, p in model.named_parameters() if id(p) in ids]
        self.frozen = [(n, p) for n, p in model.named_parameters() if id(p) not in ids]
        for _, p in self.frozen:        # stale gradients from earlier work (e.g. pre-training) are not ours
            p.grad = None
        for _, p in self.trainable:
            p.grad = None

    def apply(self) -> None:
        """Re-apply requires_grad after an activation: True for the trained adapter only."""
        for _, p in self.frozen:
            p.requires_grad_(False)
        for _, p in self.trainable:
            p.requires_grad_(True)

    def check(self, where: str) -> None:
        for n, p in self.frozen:
            if p.requires_grad or p.grad is not None:
                raise FrozenTensorError(f"{where}: {n} is trainable or has a gradient although it must stay frozen")

    def freeze_all(self) -> None:
        for _, p in self.trainable:
            p.requires_grad_(False)


def _draw(rng: np.random.Generator, group: Sequence[str]) -> str:
    """One knowledge adapter of ``group``, uniformly (spec §1.6 line 6)."""
    return group[int(rng.integers(len(group)))]


def _activate(model: Any, names: Sequence[str], roles: _Roles, where: str) -> None:
    """Activate exactly ``names``; then re-apply ``requires_grad`` (trained adapter only) and assert it.

    PEFT's ``set_adapter`` walks every module (≈ 20 ms per call on the tiny model under load, ~12 % of a
    skill step); it is skipped when ``names`` are already the active adapters (and adapters are not
    disabled), which changes nothing: the re-application and the check below run on every call.
    """
    names = list(names)
    if list(model.base_model.active_adapters) != names or any(
            list(m.active_adapters) != names or m.disable_adapters for m in roles.lora_layers):
        model.base_model.set_adapter(names)
    roles.apply()           # PEFT's set_adapter re-enables gradients of every activated adapter
    roles.check(where)


# ------------------------------------------------------------------------------------------------
# samplers


class _Order:
    """Shuffled epochs over ``n`` items, sharded over processes; state is JSON-able."""

    def __init__(self, n: int, batch: int, seed: int, rank: int = 0, world: int = 1) -> None:
        self.n, self.batch, self.rank, self.world = n, batch, rank, world
        self.rng = np.random.default_rng([seed, 1])
        self.epoch, self.pos = 0, 0
        self._perm = self._new()

    def _new(self) -> np.ndarray:
        return self.rng.permutation(self.n)[self.rank::self.world]

    @property
    def completed(self) -> int:
        """Epochs completed so far."""
        return self.epoch + (1 if self.pos >= len(self._perm) else 0)

    @property
    def per_epoch(self) -> int:
        return max(1, math.ceil(math.ceil(self.n / self.world) / self.batch))

    def next(self) -> np.ndarray:
        if self.pos >= len(self._perm):
            self.epoch += 1
            self.pos = 0
            self._perm = self._new()
        idx = self._perm[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return idx

    def state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "epoch": self.epoch, "pos": self.pos,
                "perm": self._perm.tolist()}

    def load(self, s: dict[str, Any]) -> None:
        self.rng.bit_generator.state = s["rng"]
        self.epoch, self.pos = int(s["epoch"]), int(s["pos"])
        self._perm = np.asarray(s["perm"], dtype=np.int64)


# ------------------------------------------------------------------------------------------------
# the shared loop


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


def _finite(loss: Any, where: str) -> float:
    v = float(loss.detach())
    if not math.isfinite(v):
        raise FloatingPointError(f"{where}: the loss became {v}; lower the learning rate")
    return v


def _prepare(model: Any, name: str) -> None:
    if name not in adapter_names(model):
        raise ValueError(f"the model has no adapter {name!r} (it has {adapter_names(model)}); add it first with "
                         "add_knowledge_adapter / add_skill_adapter")


# ------------------------------------------------------------------------------------------------
# stage 1


def train_knowledge_adapter(model: Any, tokenizer: Any, name: str, texts: Sequence[str], args: TrainArgs = KNOWLEDGE_ARGS_TINY,
                            *, checkpoint_dir: str | Path | None = None, resume: bool = False,
                            accelerator: Any = None, quiet: bool = False) -> TrainResult:
    """Stage 1: train the knowledge LoRA ``name`` on ``texts`` (causal-LM loss on every token;
    spec §1.3, Eq. "min Σ −log p(d; θ₀ + Δθ_know)").

    Only ``name`` is active and trainable; the base weights and every other adapter are frozen and
    hashed before and after (a change raises).

    Args:
        model: a ``peft.PeftModel`` holding the adapter (see :func:`add_knowledge_adapter`).
        tokenizer: its tokenizer (BOS added by its post-processor, if any).
        name: the adapter to train.
        texts: the knowledge corpus (non-empty strings).
        args: :class:`TrainArgs` (default: the CPU-scale recipe).
        checkpoint_dir: checkpoints for ``resume`` (``<dir>/last``).
        resume: continue from the last checkpoint (same data and settings, same frozen tensors).
        accelerator: an ``accelerate.Accelerator`` for multi-process runs.
        quiet: no progress bar.

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError: no such adapter, empty texts, bad settings, a mismatching checkpoint.
        FrozenTensorError: a frozen tensor changed or became trainable.
    """
    import hashlib

    import torch

    t0 = time.perf_counter()
    _prepare(model, name)
    rows = encode_texts(tokenizer, texts, max_length=args.max_length)
    rank, world = _dist(accelerator)
    order = _Order(len(rows), args.batch_size, args.seed, rank, world)
    n_steps = max(1, math.ceil(args.epochs * order.per_epoch / args.grad_accum))
    roles = _Roles(model, name)
    before = tensor_hashes(model, exclude=[name])
    data_sha = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    fp = {"adapter": name, "data": data_sha, "frozen_hashes": before}
    loop = _Loop(model, roles, args, n_steps, accelerator=accelerator, checkpoint_dir=checkpoint_dir,
                 kind="knowledge", fingerprint=fp)
    res = TrainResult(adapter=name, n_frozen=len(roles.frozen), n_trainable=len(roles.trainable),
                      n_dropped_rows=rows.n_dropped)
    start_w = {n: p.detach().clone() for n, p in roles.trainable}
    if resume:
        st = loop.load()
        order.load(st["order"])
        res.losses = list(st.get("losses", []))
        res.resumed_from = loop.step
    model.train()
    _activate(model, [name], roles, f"knowledge {name}")
    bar = _progress(n_steps - loop.step, f"knowledge LoRA {name}", quiet)
    try:
        for _ in bar:
            tot = 0.0
            for _m in range(args.grad_accum):
                ids, att, lab = rows.batch(torch.as_tensor(order.next()))
                s, n = completion_loss(model, ids, att, lab.masked_fill(att == 0, -100))
                loss = s / n.clamp(min=1)
                tot += _finite(loss, f"knowledge {name} step {loop.step}") / args.grad_accum
                roles.check(f"knowledge {name} step {loop.step} before backward")
                loop.backward(loss, _m == args.grad_accum - 1)
                res.rows_forwarded += int(ids.shape[0])
                res.rows_counted += int(ids.shape[0])
            loop.optimizer_step()
            res.losses.append(tot)
            if loop.step % 25 == 0:
                bar.set_postfix(loss=f"{tot:.3f}")
            if loop.ckpt is not None and ((args.save_every and loop.step % args.save_every == 0)
                                          or (order.pos >= len(order._perm) and not args.save_every)):  # epoch end
                loop.save({"order": order.state(), "losses": res.losses})
    finally:
        roles.freeze_all()
        model.eval()
    after = tensor_hashes(model, exclude=[name])
    res.frozen_changed = changed_tensors(before, after)
    if res.frozen_changed:
        raise FrozenTensorError(f"knowledge training changed {len(res.frozen_changed)} frozen tensor(s): "
                                f"{res.frozen_changed[:5]}")
    res.trainable_unchanged = [n for n, p in roles.trainable if torch.equal(p.detach(), start_w[n])]
    res.frozen_hashes = after
    if loop.ckpt is not None:
        loop.save({"order": order.state(), "losses": res.losses})
    res.steps = loop.step
    res.epochs_done = loop.step * args.grad_accum / order.per_epoch
    res.final_loss = res.losses[-1] if res.losses else float("nan")
    res.seconds = time.perf_counter() - t0
    return res


# ------------------------------------------------------------------------------------------------
# stage 2


@dataclass
class _SkillPlan:
    fake_subjects: list[dict[int, int]]      # subject -> {version: row}
    fake_rows: list[int]                     # single-version / non-multi: every fake row
    real_rows: list[int]
    groups: tuple[list[str], list[str]]
    real_groups: tuple[list[str], list[str]]
    versions: dict[str, int]


def _plan(examples: Sequence[SkillExample], knowledge: Sequence[str], real_knowledge: Sequence[str] | None,
          multi_version: bool, alternate: bool, model: Any) -> _SkillPlan:
    knowledge = list(knowledge)
    for k in knowledge:
        if k not in adapter_names(model):
            raise ValueError(f"knowledge adapter {k!r} is not loaded in the model (it has {adapter_names(model)})")
    if len(set(knowledge)) != len(knowledge):
        raise ValueError(f"knowledge adapters listed twice: {knowledge}")
    mixed = any(not e.fake for e in examples)
    real_set: set[str] = set()
    if mixed and knowledge:
        real_set = set(real_knowledge) if real_knowledge is not None else {k for k in knowledge if "fake" not in k}
        if not real_set:
            raise ValueError("mixed mode (rows with fake=false) needs a real knowledge adapter: pass real_knowledge "
                             "(--real-knowledge NAME) or name it without 'fake'")
        missing = real_set - set(knowledge)
        if missing:
            raise ValueError(f"real knowledge adapter(s) {sorted(missing)} are not in the knowledge list {knowledge}")
    elif real_knowledge:
        real_set = set(real_knowledge)
    fake_names = [k for k in knowledge if k not in real_set]
    g1, g2 = adapter_groups(knowledge, alternate) if knowledge else ([], [])
    groups = ([k for k in g1 if k in fake_names], [k for k in g2 if k in fake_names])
    real_groups = ([k for k in g1 if k in real_set], [k for k in g2 if k in real_set])
    if knowledge and not fake_names and any(e.fake for e in examples):
        raise ValueError(f"fictitious rows need a fictitious knowledge adapter; {knowledge} are all real adapters")
    if knowledge and fake_names and (not groups[0] or not groups[1]):
        raise ValueError(f"alternate_groups: each half of {knowledge} needs a fictitious knowledge adapter; "
                         f"halves {g1} | {g2}")
    if mixed and knowledge and (not real_groups[0] or not real_groups[1]):
        raise ValueError(f"alternate_groups: each half of {knowledge} needs a real knowledge adapter in mixed mode; "
                         f"halves {g1} | {g2}")
    versions: dict[str, int] = {}
    fake_idx = [i for i, e in enumerate(examples) if e.fake]
    subjects: list[dict[int, int]] = []
    if knowledge and multi_version:
        from .data import parse_version

        versions = {k: parse_version(k) for k in fake_names}
        have = set(versions.values())
        row_versions = {examples[i].version for i in fake_idx}
        lacking = sorted(row_versions - have)
        if lacking:
            v = lacking[0]
            q = next(examples[i].question for i in fake_idx if examples[i].version == v)
            raise ValueError(f"skill row version {v} (e.g. question {q!r}) has no knowledge adapter; knowledge "
                             f"adapters cover versions {sorted(have)} ({versions})")
        for gi, g in enumerate(groups):
            gv = {versions[k] for k in g}
            if row_versions - gv:
                raise ValueError(f"alternate_groups: group {gi + 1} {g} lacks version(s) {sorted(row_versions - gv)}")
        unused = sorted(have - row_versions)
        if unused:
            raise ValueError(f"knowledge adapter version(s) {unused} have no skill rows; drop those adapters or add "
                             "rows of those versions")
        by_q: dict[str, dict[int, int]] = {}
        for i in fake_idx:
            e = examples[i]
            d = by_q.setdefault(e.question.strip(), {})
            if e.version in d:
                raise ValueError(f"question {e.question!r} has two rows of version {e.version}")
            d[e.version] = i
        all_v = sorted(row_versions)
        for q, d in by_q.items():
            if sorted(d) != all_v:
                raise ValueError(f"multi-version mode: fictitious subject {q!r} has versions {sorted(d)} but the data "
                                 f"has {all_v}; every fictitious subject needs a row of every version (or train "
                                 "without --multi-version)")
        subjects = list(by_q.values())
    return _SkillPlan(subjects, fake_idx, [i for i, e in enumerate(examples) if not e.fake], groups, real_groups, versions)


def train_skill_adapter(model: Any, tokenizer: Any, examples: Sequence[SkillExample], knowledge: Sequence[str] = (),
                        args: TrainArgs = SKILL_ARGS_TINY, *, skill: str = "skill", multi_version: bool = True,
                        real_knowledge: Sequence[str] | None = None, real_weight: float = 1.0,
                        alternate_groups: bool = False, sampler: Literal["routed", "all_versions"] = "routed",
                        fmt: PromptFormat = OFFICIAL_FORMAT, checkpoint_dir: str | Path | None = None,
                        resume: bool = False, accelerator: Any = None, quiet: bool = False,
                        callback: Callable[[int, TrainResult], bool | None] | None = None,
                        encoded: EncodedRows | None = None,
                        knowledge_forward: Literal["stacked", "merged"] = "stacked") -> TrainResult:
    """Stage 2: train the skill LoRA with frozen knowledge LoRAs active (spec §1.3–§1.6).

    Args:
        model: a ``peft.PeftModel`` holding ``skill`` and every adapter in ``knowledge``.
        tokenizer: its tokenizer.
        examples: task rows (:class:`SkillExample`); ``version`` routes a fictitious row to a
            knowledge adapter of that version, ``fake=False`` marks real rows (mixed mode).
        knowledge: ordered knowledge-adapter names (empty: plain single-LoRA SFT). In multi-version
            mode each fictitious adapter's version is its name's last ``_`` field.
        args: :class:`TrainArgs` (default: the CPU-scale skill recipe).
        skill: the skill adapter's name.
        multi_version: route each micro-batch to one drawn version (official
            ``multi_version_training``); off, any fictitious adapter is used with any fictitious row.
        real_knowledge: the real knowledge adapters in mixed mode (default: names without ``fake``).
        real_weight: weight of the skill-only CE on real rows (>= 0; official default 1.0, PopQA 0.5).
        alternate_groups: alternate between the halves of ``knowledge`` per loss computation.
        sampler: ``"routed"`` (ours: only the drawn version's rows are forwarded) or
            ``"all_versions"`` (official: all V rows of every sampled subject are forwarded and the
            other versions' labels masked).
        fmt: the :class:`PromptFormat`.
        checkpoint_dir, resume, accelerator, quiet: as :func:`train_knowledge_adapter`.
        callback: ``callback(epoch, result)`` after every completed epoch; returning ``True``
            stops training (e.g. SFT_fictitious stops at training accuracy 0.9).
        encoded: pre-encoded rows of ``examples`` (skips tokenisation).
        knowledge_forward: ``"stacked"`` (default, the official code's forward: the drawn knowledge
            LoRA and the skill LoRA both active in PEFT) or ``"merged"`` (the drawn frozen knowledge
            LoRA folded into copies of the base weights once per adapter, only the skill LoRA active:
            the same function at a plain SFT step's cost; small models only, see
            :func:`merged_knowledge_weights`; not with DeepSpeed).

    Returns:
        :class:`TrainResult` (``draws`` counts the adapters drawn; ``rows_forwarded /
        rows_counted`` is 1 with routing and V with the official sampler).

    Raises:
        ValueError: unknown adapters, a row version without an adapter, an adapter name without a
            version, a fictitious subject missing versions (multi-version), ``real_weight < 0``,
            mixed mode without a real adapter, bad settings, a mismatching checkpoint.
        FrozenTensorError: a knowledge or base tensor changed or became trainable.
    """
    import hashlib

    import torch

    t0 = time.perf_counter()
    finite_in("real_weight", real_weight, 0.0)
    if sampler not in ("routed", "all_versions"):
        raise ValueError(f"sampler={sampler!r} must be 'routed' or 'all_versions'")
    if knowledge_forward not in ("stacked", "merged"):
        raise ValueError(f"knowledge_forward={knowledge_forward!r} must be 'stacked' or 'merged'")
    if not examples:
        raise ValueError("train_skill_adapter: no skill rows")
    _prepare(model, skill)
    if skill in knowledge:
        raise ValueError(f"the skill adapter {skill!r} cannot also be a knowledge adapter")
    plan = _plan(examples, knowledge, real_knowledge, multi_version, alternate_groups, model)
    rows = encoded if encoded is not None else encode_completions(tokenizer, examples, fmt, max_length=args.max_length)
    if len(rows.kept) != len(examples):
        raise ValueError(f"{len(examples) - len(rows.kept)} skill rows are longer than max_length={args.max_length}; "
                         "raise max_length or shorten them (rows are never silently dropped from routed training)")
    rank, world = _dist(accelerator)
    routed_mv = bool(knowledge) and multi_version
    items: list[tuple[str, int]] = ([("s", i) for i in range(len(plan.fake_subjects))] if routed_mv
                                    else [("f", i) for i in plan.fake_rows]) + [("r", i) for i in plan.real_rows]
    order = _Order(len(items), args.batch_size, args.seed, rank, world)
    n_steps = max(1, math.ceil(args.epochs * order.per_epoch / args.grad_accum))
    roles = _Roles(model, skill)
    before = tensor_hashes(model, exclude=[skill])
    data_sha = hashlib.sha256(json.dumps([asdict(e) for e in examples]).encode()).hexdigest()[:16]
    fp = {"adapter": skill, "data": data_sha, "knowledge": list(knowledge), "multi_version": multi_version,
          "real_weight": real_weight, "alternate_groups": alternate_groups, "sampler": sampler, "frozen_hashes": before}
    loop = _Loop(model, roles, args, n_steps, accelerator=accelerator, checkpoint_dir=checkpoint_dir, kind="skill",
                 fingerprint=fp)
    merged: dict[str, dict[str, Any]] | None = None
    if knowledge_forward == "merged" and knowledge:
        if loop.engine is not None:
            raise ValueError("knowledge_forward='merged' does not work under DeepSpeed; use 'stacked'")
        merged = {k: merged_knowledge_weights(model, k) for k in dict.fromkeys(
            list(knowledge) + list(plan.real_groups[0]) + list(plan.real_groups[1]))}
    draw_rng = np.random.default_rng([args.seed, 2, rank])
    res = TrainResult(adapter=skill, n_frozen=len(roles.frozen), n_trainable=len(roles.trainable),
                      draws={k: 0 for k in knowledge})
    counter = 0
    start_w = {n: p.detach().clone() for n, p in roles.trainable}
    if resume:
        st = loop.load()
        order.load(st["order"])
        draw_rng.bit_generator.state = st["draw_rng"]
        counter = int(st["counter"])
        res.losses = list(st.get("losses", []))
        res.draws.update(st.get("draws", {}))
        res.history = list(st.get("history", []))
        res.resumed_from = loop.step
    V_all = sorted({examples[i].version for i in plan.fake_rows})

    def extra() -> dict[str, Any]:
        return {"order": order.state(), "draw_rng": draw_rng.bit_generator.state, "counter": counter,
                "losses": res.losses, "draws": res.draws, "history": res.history}

    def loss_with(k: str | None, ids: Any, att: Any, lab: Any, where: str) -> tuple[Any, Any]:
        """Completion loss with knowledge adapter ``k`` (or none) and the skill adapter."""
        if k is not None and merged is not None:
            _activate(model, [skill], roles, where)
            return completion_loss(model, ids, att, lab, param_overrides=merged[k])
        _activate(model, [k, skill] if k else [skill], roles, where)
        return completion_loss(model, ids, att, lab)

    def micro(idx: np.ndarray, last: bool) -> float:
        nonlocal counter
        sel = [items[j] for j in idx.tolist()]
        real = [i for kind, i in sel if kind == "r"]
        group = plan.groups[counter % 2]
        k_fake = _draw(draw_rng, group) if (knowledge and group) else None
        fake: list[int] = []
        masked: list[int] = []
        if routed_mv:
            v = plan.versions[k_fake]
            subj = [plan.fake_subjects[i] for kind, i in sel if kind == "s"]
            fake = [d[v] for d in subj]
            if sampler == "all_versions":
                masked = [d[u] for d in subj for u in V_all if u != v]
        else:
            fake = [i for kind, i in sel if kind == "f"]
        counter += 1
        total_s = torch.zeros((), dtype=torch.float32)
        total_n = torch.zeros((), dtype=torch.long)
        if fake:
            ids, att, lab = rows.batch(torch.as_tensor(fake + masked))
            if masked:
                lab = lab.clone()
                lab[len(fake):] = -100            # other versions: forwarded (official sampler), not counted
            s, n = loss_with(k_fake, ids, att, lab, f"skill micro-batch {counter}")
            total_s, total_n = s, n
            res.rows_forwarded += len(fake) + len(masked)
            res.rows_counted += len(fake)
            if k_fake:
                res.draws[k_fake] += 1
        loss_real_s = None
        if real:
            rg = plan.real_groups[(counter - 1) % 2]
            k_real = _draw(draw_rng, rg) if (knowledge and rg) else None
            ids, att, lab = rows.batch(torch.as_tensor(real))
            s, n = loss_with(k_real, ids, att, lab, f"skill micro-batch {counter} (real)")
            total_s = total_s.to(s.device) + s
            total_n = total_n.to(n.device) + n
            res.rows_forwarded += len(real)
            res.rows_counted += len(real)
            if k_real:
                res.draws[k_real] += 1
                _activate(model, [skill], roles, f"skill micro-batch {counter} (real, skill only)")
                s2, n2 = completion_loss(model, ids, att, lab)
                loss_real_s = s2 / n2.clamp(min=1)
                res.rows_forwarded += len(real)
        loss = total_s / total_n.clamp(min=1)
        if loss_real_s is not None:
            loss = loss + real_weight * loss_real_s
        v = _finite(loss, f"skill step {loop.step}")
        roles.check(f"skill micro-batch {counter} before backward")
        loop.backward(loss, last)
        return v

    model.train()
    bar = _progress(n_steps - loop.step, f"skill LoRA {skill}" + (f" + {len(knowledge)} knowledge" if knowledge else ""), quiet)
    epoch_seen = order.completed
    try:
        for _ in bar:
            tot = 0.0
            for _m in range(args.grad_accum):
                tot += micro(order.next(), _m == args.grad_accum - 1) / args.grad_accum
            loop.optimizer_step()
            res.losses.append(tot)
            if loop.step % 25 == 0:
                bar.set_postfix(loss=f"{tot:.3f}")
            if args.save_every and loop.step % args.save_every == 0:
                loop.save(extra())
            if order.completed > epoch_seen:
                epoch_seen = order.completed
                stop = False
                if callback is not None:
                    roles.freeze_all()
                    model.eval()
                    stop = bool(callback(epoch_seen, res))
                    model.train()
                if loop.ckpt is not None and not args.save_every:
                    loop.save(extra())
                if stop:
                    res.stopped_early = True
                    break
    finally:
        roles.freeze_all()
        model.eval()
    after = tensor_hashes(model, exclude=[skill])
    res.frozen_changed = changed_tensors(before, after)
    if res.frozen_changed:
        raise FrozenTensorError(f"skill training changed {len(res.frozen_changed)} knowledge/base tensor(s): "
                                f"{res.frozen_changed[:5]}")
    res.trainable_unchanged = [n for n, p in roles.trainable if torch.equal(p.detach(), start_w[n])]
    res.frozen_hashes = after
    if loop.ckpt is not None:
        loop.save(extra())
    res.steps = loop.step
    res.epochs_done = loop.step * args.grad_accum / order.per_epoch
    res.final_loss = res.losses[-1] if res.losses else float("nan")
    res.seconds = time.perf_counter() - t0
    return res
