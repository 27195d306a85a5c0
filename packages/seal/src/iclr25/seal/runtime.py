"""Where a training loop runs: one process in plain torch, or under ``accelerate`` (DDP, DeepSpeed ZeRO-3).

Both runtimes give the loops the same operations — prepare, gradient accumulation windows,
``backward``, clipping, a cross-process mean and state saving — so :func:`train_selector` and
:func:`sft` are one code path at every scale. Gradient accumulation follows accelerate's rule: each
micro-step's loss is divided by the number of accumulation steps, gradients of the model are
averaged over processes, and the optimiser steps at the end of each window (``sync``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

__all__ = ["Runtime", "PlainRuntime", "AccelerateRuntime", "make_runtime", "resolve_micro_batch"]

log = logging.getLogger("iclr25.seal")


def resolve_micro_batch(batch_size: int, micro_batch_size: int | None, world: int) -> tuple[int, int]:
    """``(micro_batch_size, gradient_accumulation_steps)`` for a global ``batch_size`` over ``world``
    processes.

    Raises:
        ValueError: ``batch_size`` is not a multiple of ``micro_batch_size × world``.
    """
    micro = micro_batch_size if micro_batch_size is not None else max(1, batch_size // world)
    if batch_size % (micro * world):
        raise ValueError(f"batch_size={batch_size} must be a multiple of micro_batch_size ({micro}) × processes "
                         f"({world}); set --micro-batch-size so that it divides")
    return micro, batch_size // (micro * world)


class Runtime:
    """Interface of the two runtimes (see the module docstring)."""

    world_size: int = 1
    rank: int = 0
    grad_accum: int = 1
    device: torch.device
    sync: bool = True
    distributed_type: str = "NO"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def prepare(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def accumulate(self, model: Any) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def backward(self, loss: torch.Tensor) -> None:
        raise NotImplementedError

    def clip(self, model: Any, max_norm: float) -> None:
        raise NotImplementedError

    def mean(self, t: torch.Tensor) -> torch.Tensor:
        """Mean of ``t`` over processes (identity for one process)."""
        return t

    def unwrap(self, model: Any) -> Any:
        return model

    def barrier(self) -> None:
        pass

    def configure(self, micro_batch_size: int, steps: int) -> None:
        """Use ``steps`` micro-steps of ``micro_batch_size`` samples per optimiser step from now on
        (call before :meth:`prepare`)."""
        raise NotImplementedError

    # state of model + optimiser (the loops save everything else themselves)
    def save_model_state(self, folder: Path, model: Any, optimizer: Any) -> None:
        if self.is_main:
            state = {"model": {k: v.detach().cpu() for k, v in self.unwrap(model).named_parameters()
                               if v.requires_grad},
                     "optimizer": optimizer.state_dict()}
            torch.save(state, folder / "model_state.pt")

    def load_model_state(self, folder: Path, model: Any, optimizer: Any) -> None:
        state = load_checkpoint_file(folder / "model_state.pt")
        m = self.unwrap(model)
        names = {k for k, v in m.named_parameters() if v.requires_grad}
        if set(state["model"]) != names:
            missing, extra = sorted(names - set(state["model"])), sorted(set(state["model"]) - names)
            raise ValueError(f"checkpoint {folder} was written for another model (missing {missing[:5]}, "
                             f"unexpected {extra[:5]}); resume with the same --model and LoRA settings")
        with torch.no_grad():
            params = dict(m.named_parameters())
            for k, v in state["model"].items():
                params[k].copy_(v)
        optimizer.load_state_dict(state["optimizer"])


class PlainRuntime(Runtime):
    """One process, plain torch (the CPU-scale default).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        grad_accum: micro-steps per optimiser step.
    """

    def __init__(self, device: str | torch.device = "cpu", grad_accum: int = 1) -> None:
        self.device = torch.device(device)
        self.grad_accum = grad_accum
        self._micro = 0
        self.sync = True

    def configure(self, micro_batch_size: int, steps: int) -> None:
        self.grad_accum, self._micro = steps, 0

    def prepare(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        return model.to(self.device), optimizer

    @contextlib.contextmanager
    def accumulate(self, model: Any) -> Iterator[None]:
        self._micro += 1
        self.sync = self._micro % self.grad_accum == 0
        yield

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.grad_accum).backward()

    def clip(self, model: Any, max_norm: float) -> None:
        if max_norm > 0:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_norm)


class AccelerateRuntime(Runtime):
    """``accelerate.Accelerator`` (what ``accelerate launch`` sets up: DDP, FSDP or DeepSpeed ZeRO-3).

    The accelerator's ``gradient_accumulation_steps`` is set by :meth:`configure` (DeepSpeed
    reads it from its config, where ``"auto"`` takes the accelerator's value).
    """

    def __init__(self, accelerator: Any) -> None:
        self.acc = accelerator
        self.world_size = accelerator.num_processes
        self.rank = accelerator.process_index
        self.device = accelerator.device
        self.distributed_type = str(getattr(accelerator.distributed_type, "value", accelerator.distributed_type))
        self.grad_accum = accelerator.gradient_accumulation_steps

    def configure(self, micro_batch_size: int, steps: int) -> None:
        if self.distributed_type == "DEEPSPEED":
            ds = self.acc.state.deepspeed_plugin.deepspeed_config
            for key, want in (("gradient_accumulation_steps", steps), ("train_micro_batch_size_per_gpu",
                                                                      micro_batch_size)):
                have = ds.get(key, "auto")
                if have not in ("auto", want):
                    raise ValueError(f"the DeepSpeed config sets {key}={have}, but the batch settings give {want}; "
                                     f"set it to 'auto' (or {want})")
                ds[key] = want
            ds["train_batch_size"] = micro_batch_size * steps * self.world_size
        self.acc.gradient_accumulation_steps = steps
        self.acc.step = 0
        self.grad_accum = steps

    def prepare(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        return self.acc.prepare(model, optimizer)

    @contextlib.contextmanager
    def accumulate(self, model: Any) -> Iterator[None]:
        with self.acc.accumulate(model):
            self.sync = bool(self.acc.sync_gradients)
            yield

    def backward(self, loss: torch.Tensor) -> None:
        self.acc.backward(loss)

    def clip(self, model: Any, max_norm: float) -> None:
        if max_norm > 0 and self.distributed_type != "DEEPSPEED":  # DeepSpeed clips by its config
            self.acc.clip_grad_norm_(model.parameters(), max_norm)

    def mean(self, t: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return t
        return self.acc.reduce(t.to(self.device), reduction="mean").to(t.device)

    def unwrap(self, model: Any) -> Any:
        return self.acc.unwrap_model(model)

    def barrier(self) -> None:
        self.acc.wait_for_everyone()

    def save_model_state(self, folder: Path, model: Any, optimizer: Any) -> None:
        if self.distributed_type == "DEEPSPEED":  # sharded weights and optimiser: DeepSpeed's own format
            self.acc.save_state(str(folder / "accelerate_state"))
            return
        super().save_model_state(folder, model, optimizer)

    def load_model_state(self, folder: Path, model: Any, optimizer: Any) -> None:
        if self.distributed_type == "DEEPSPEED":
            self.acc.load_state(str(folder / "accelerate_state"))
            return
        super().load_model_state(folder, model, optimizer)


def make_runtime(device: str = "auto", *, accelerate: bool | None = None) -> Runtime:
    """The runtime for a command: accelerate when launched by ``accelerate launch`` (or asked for),
    else :class:`PlainRuntime` on ``device``.

    Args:
        device: ``auto|cpu|cuda|cuda:N|mps`` (plain runtime).
        accelerate: force (True) or forbid (False) accelerate; ``None``: use it when the
            environment shows a launcher (``ACCELERATE_*`` / ``WORLD_SIZE`` > 1).
    """
    import os

    from iclr25.core.seed import choose_device

    if accelerate is None:
        accelerate = any(k.startswith("ACCELERATE_") for k in os.environ) or int(os.environ.get("WORLD_SIZE", "1")) > 1
    if accelerate:
        from accelerate import Accelerator

        dev = choose_device(device)
        acc = Accelerator(cpu=dev == "cpu")
        log.info("accelerate: %d process(es), %s, device %s", acc.num_processes, acc.distributed_type, acc.device)
        return AccelerateRuntime(acc)
    return PlainRuntime(choose_device(device))


def load_checkpoint_file(path: Path) -> Any:
    """``torch.load(path, weights_only=True)`` with a clean error for a corrupt or truncated file.

    Raises:
        ValueError: the file cannot be read (named, with the reason and the fix).
    """
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for a damaged file
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(f"checkpoint file {path} is corrupt or truncated ({type(e).__name__}: {msg[:120]}); "
                         "delete the checkpoint folder and run without --resume") from None
