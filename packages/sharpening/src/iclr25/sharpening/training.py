"""A small policy trainer shared by SFT- and RLHF-Sharpening: AdamW, linear decay to 0, gradient clipping
(paper Appendix A: lr 3e-4, clip 0.1), optional LoRA (peft) and ``accelerate`` for multi-process runs, and
checkpoints that ``--resume`` exactly (weights or adapter, optimiser, scheduler, step, RNG, data order).

Data order is a pure function of ``(seed, epoch)`` (a seeded permutation per epoch), so a checkpoint stores
``(epoch, position)`` and the permutation is recomputed; under ``accelerate`` every process draws the same
permutation and takes its own slice of each global batch (data sharded, gradients averaged by DDP).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["TrainConfig", "PolicyTrainer", "apply_lora", "save_policy", "load_policy_weights",
           "set_trainable_state", "check_positive", "check_nonneg"]

log = logging.getLogger(__name__)


def check_positive(value: float, name: str) -> float:
    """``value`` as float; ``ValueError`` unless finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def check_nonneg(value: float, name: str) -> float:
    """``value`` as float; ``ValueError`` unless finite and >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass
class TrainConfig:
    """Optimisation settings (paper Appendix A for SFT-Sharpening; the trap presets override them).

    Args:
        epochs: passes over the training set (paper: 30 for Phi-3.5-mini, 10 for Mistral-7B).
        lr: peak AdamW learning rate (paper: 3e-4), decayed linearly to 0 (paper).
        batch_size: examples per optimiser step, over all processes (paper: 4; Mistral 1).
        weight_decay: AdamW weight decay (paper: 0.1 MATH, 0.5 GSM8K, 0.0 ProntoQA, 1.0 Mistral MATH).
        max_grad_norm: gradient-norm clip (paper: 0.1).
        warmup_steps: linear warm-up steps before the decay (paper: none stated; 0).
        lora_r: LoRA rank (paper: 16 Phi-3.5-mini, 8 Mistral-7B); 0 = full fine-tuning (the tiny trap model).
        lora_alpha: LoRA scaling numerator (not stated in the paper; 2 x rank here).
        lora_dropout: LoRA dropout (not stated; 0.05).
        lora_target_modules: peft target modules (not stated; ``"all-linear"``).
        seed: data order and sampling seed.
        save_every: write a checkpoint every this many steps (0: at the end of each epoch only).
    """

    epochs: int = 30
    lr: float = 3e-4
    batch_size: int = 4
    weight_decay: float = 0.0
    max_grad_norm: float = 0.1
    warmup_steps: int = 0
    lora_r: int = 0
    lora_alpha: int | None = None
    lora_dropout: float = 0.05
    lora_target_modules: str = "all-linear"
    seed: int = 0
    save_every: int = 0

    def __post_init__(self) -> None:
        for f in ("epochs", "batch_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{f} must be an integer >= 1, got {v!r}")
        for f in ("warmup_steps", "lora_r", "save_every", "seed"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{f} must be an integer >= 0, got {v!r}")
        check_positive(self.lr, "lr")
        check_positive(self.max_grad_norm, "max_grad_norm")
        check_nonneg(self.weight_decay, "weight_decay")
        if self.lora_alpha is not None and (isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, int)
                                            or self.lora_alpha < 1):
            raise ValueError(f"lora_alpha must be an integer >= 1 or None (2 x rank), got {self.lora_alpha!r}")
        if not (0.0 <= self.lora_dropout < 1.0):
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")


def apply_lora(model, cfg: TrainConfig):
    """Wrap ``model`` with a LoRA adapter (peft) when ``cfg.lora_r > 0``; return it unchanged otherwise.

    Raises:
        ImportError: peft is missing (install ``iclr25-sharpening[full]``).
    """
    if cfg.lora_r <= 0:
        return model
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("LoRA needs peft: pip install 'iclr25-sharpening[full]'") from e
    lc = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_r, lora_dropout=cfg.lora_dropout,
                    target_modules=cfg.lora_target_modules, task_type="CAUSAL_LM")
    return get_peft_model(model, lc)


def _trainable_state(model) -> dict:
    return {k: v.detach().cpu().contiguous() for k, v in model.named_parameters() if v.requires_grad}


def save_policy(model, tokenizer, path: str | Path) -> Path:
    """Save a trained policy in Hugging Face format: the full model (``save_pretrained``, safetensors), or for
    a peft model the adapter only (PEFT format, load with ``PeftModel.from_pretrained(base, path)``)."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(p, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(p)
    return p


RESUME_FIX = "run without --resume (it starts over in the same --out) or start a new --out"


def damaged_file(path: str | Path, err: BaseException) -> ValueError:
    """The ``ValueError`` for a saved run file that cannot be read back (truncated, torn, not what it claims)."""
    msg = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
    return ValueError(f"--resume: {path} is damaged or truncated ({type(err).__name__}: {msg}); {RESUME_FIX}")


def load_safetensors(path: str | Path) -> dict:
    """``safetensors.torch.load_file`` with a damaged/truncated file reported as ``ValueError`` naming it."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as e:          # SafetensorError (bad header, short file), OSError
        raise damaged_file(path, e) from None


def read_saved_jsonl(path: str | Path, required: tuple[str, ...]) -> list[dict]:
    """A run's own JSONL (``corpus.jsonl``, ``pairs.jsonl``) for ``--resume``: missing -> ``FileNotFoundError``,
    a torn or malformed line -> ``ValueError`` naming ``FILE:LINE`` and the fix."""
    from iclr25.core.jsonl import JsonlError, read_jsonl

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--resume: no {p.name} in {p.parent}; run without --resume first")
    try:
        rows = read_jsonl(p, required=required)
    except JsonlError as e:
        raise ValueError(f"--resume: {e}; the saved file is damaged or truncated: {RESUME_FIX}") from None
    if not rows:
        raise ValueError(f"--resume: {p} is empty (damaged or truncated); {RESUME_FIX}")
    return rows


def load_policy_weights(model, path: str | Path) -> None:
    """Load trainable weights saved by :meth:`PolicyTrainer.save_checkpoint` into ``model`` (safetensors).

    Raises:
        ValueError: the file is damaged/truncated, or its tensors do not fit ``model``.
    """
    set_trainable_state(model, load_safetensors(path), source=str(path))


def set_trainable_state(model, sd: dict, source: str = "state") -> None:
    """Copy a ``{name: tensor}`` dict of trainable weights into ``model`` (names must match exactly)."""
    own = dict(model.named_parameters())
    missing = [k for k, v in own.items() if v.requires_grad and k not in sd]
    unknown = [k for k in sd if k not in own]
    if missing or unknown:
        raise ValueError(f"checkpoint {source} does not fit this model: missing {missing[:3]}, unknown {unknown[:3]} "
                         "(was it written with another --lora-r or model?)")
    import torch

    with torch.no_grad():
        for k, v in sd.items():
            own[k].copy_(v.to(own[k].device, own[k].dtype))


def _use_accelerate(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


class PolicyTrainer:
    """Minimises ``loss_fn(model, index) -> (loss, metrics)`` over examples ``0..n_examples-1``.

    Args:
        model: the policy (a ``*ForCausalLM``, possibly peft-wrapped); trained in place.
        loss_fn: given the (possibly DDP-wrapped) model and a ``(b,)`` long tensor of example indices,
            returns a scalar loss (mean over the given examples) and a dict of floats to log.
        n_examples: training-set size.
        cfg: :class:`TrainConfig`.
        accelerate: run under ``accelerate`` (``None``: when ``WORLD_SIZE > 1``, i.e. ``accelerate launch``).
        total_steps: length of the LR schedule (default ``epochs * ceil(n_examples / batch_size)``).
    """

    def __init__(self, model, loss_fn: Callable, n_examples: int, cfg: TrainConfig, *,
                 accelerate: bool | None = None, total_steps: int | None = None) -> None:
        import torch

        if n_examples < 1:
            raise ValueError("no training examples")
        self.cfg = cfg
        self.loss_fn = loss_fn
        self.n_examples = n_examples
        self.per_epoch = math.ceil(n_examples / cfg.batch_size)
        self.total_steps = total_steps or cfg.epochs * self.per_epoch
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm, total = cfg.warmup_steps, self.total_steps

        def lam(s: int) -> float:
            if s < warm:
                return (s + 1) / warm
            return max(0.0, (total - s) / max(1, total - warm))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lam)
        self.step = 0
        self.accelerator = None
        self.rank, self.world = 0, 1
        if _use_accelerate(accelerate):
            try:
                from accelerate import Accelerator
            except ImportError as e:  # pragma: no cover
                raise ImportError("multi-process training needs accelerate: pip install 'iclr25-sharpening[full]'") from e
            # on a machine without CUDA, cpu=True makes Accelerator join the gloo process group (MULTI_CPU)
            self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
            model, self.optimizer = self.accelerator.prepare(model, self.optimizer)
            self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        self.model = model

    @property
    def unwrapped(self):
        """The policy without the DDP wrapper."""
        return self.accelerator.unwrap_model(self.model) if self.accelerator is not None else self.model

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def epoch_order(self, epoch: int):
        """The permutation of examples in ``epoch`` (a function of ``cfg.seed`` and ``epoch`` only)."""
        import torch

        g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + epoch)
        return torch.randperm(self.n_examples, generator=g)

    def train_step(self, index) -> dict:
        """One optimiser step on the global batch ``index`` (each process takes its slice)."""
        import torch

        local = index[self.rank::self.world]
        self.model.train()
        loss, metrics = self.loss_fn(self.model, local)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {float(loss)} at step {self.step}; lower lr or check the data")
        self.optimizer.zero_grad(set_to_none=True)
        if self.accelerator is not None:
            self.accelerator.backward(loss)
            gnorm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        else:
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        out = {"step": self.step, "loss": float(loss.detach()), "grad_norm": float(gnorm),
               "lr": float(self.scheduler.get_last_lr()[0])}
        out.update({k: float(v) for k, v in metrics.items()})
        return out

    def fit(self, *, checkpoint_dir: str | Path | None = None, metrics_path: str | Path | None = None,
            progress: bool = True, max_steps: int | None = None) -> list[dict]:
        """Train for ``cfg.epochs`` epochs from the current step (``max_steps``: stop early, for tests).

        Writes a checkpoint at the end of each epoch (and every ``cfg.save_every`` steps) when
        ``checkpoint_dir`` is given, and one JSON line per step to ``metrics_path``.
        """
        from iclr25.core.progress import progress as progress_bar

        hist: list[dict] = []
        end = self.cfg.epochs * self.per_epoch
        if max_steps is not None:
            end = min(end, self.step + max_steps)
        bar = progress_bar(range(self.step, end), desc="train", total=end - self.step, unit="step",
                           quiet=None if (progress and self.is_main) else True)
        if metrics_path and self.is_main:
            from iclr25.core.checkpoint import trim_jsonl

            # a resumed run continues after the checkpointed step: drop what a killed run logged beyond it
            trim_jsonl(metrics_path, self.step)
        fh = open(metrics_path, "a", encoding="utf-8") if (metrics_path and self.is_main) else None
        try:
            for s in bar:
                epoch, pos = divmod(s, self.per_epoch)
                order = self.epoch_order(epoch)
                idx = order[pos * self.cfg.batch_size:(pos + 1) * self.cfg.batch_size]
                rec = self.train_step(idx)
                rec["epoch"] = epoch
                hist.append(rec)
                if fh is not None:
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                if checkpoint_dir is not None and (
                        (self.cfg.save_every and self.step % self.cfg.save_every == 0)
                        or self.step % self.per_epoch == 0):
                    self.save_checkpoint(checkpoint_dir)
        finally:
            if fh is not None:
                fh.close()
        return hist

    # ----- checkpoints -----
    def save_checkpoint(self, path: str | Path, extra: dict | None = None, tensors: dict | None = None) -> None:
        """``path/policy.safetensors`` (trainable weights: the full model, or the LoRA adapter),
        ``path/trainer_state.pt`` (optimiser, scheduler, step; tensors and plain types only) and
        ``path/rng_state.json`` (every RNG state of every process: the core's ``capture_rng_state``), written
        together through the core's ``atomic_folder`` (a kill mid-save keeps the previous checkpoint whole), with
        ``tensors`` (``{file name: {tensor name: tensor}}``, e.g. XPO's best iterate) as safetensors files beside them."""
        import torch
        from safetensors.torch import save_file

        from iclr25.core.checkpoint import atomic_folder, capture_rng_state

        rngs = [capture_rng_state(torch_state=True)]
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()
            if self.world > 1:
                from accelerate.utils import gather_object

                rngs = gather_object(rngs)  # collective: every rank
        if not self.is_main:
            return
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "step": self.step, "n_examples": self.n_examples, "config": json.dumps(asdict(self.cfg)),
                 "extra": json.dumps(extra or {})}
        with atomic_folder(path) as tmp:
            save_file(_trainable_state(self.unwrapped), str(tmp / "policy.safetensors"))
            torch.save(state, tmp / "trainer_state.pt")
            (tmp / "rng_state.json").write_text(json.dumps({"processes": rngs}), encoding="utf-8")
            for name, tens in (tensors or {}).items():
                save_file({k: v.detach().cpu().contiguous() for k, v in tens.items()}, str(tmp / name))

    def load_checkpoint(self, path: str | Path, data_file: str | Path | None = None) -> dict:
        """Restore what :meth:`save_checkpoint` wrote; returns its ``extra`` dict. ``data_file`` (the saved
        corpus/pairs the examples came from) is named when their number differs from the checkpoint's.

        Raises:
            FileNotFoundError: no checkpoint in ``path``.
            ValueError: it was written with a different training configuration, or a file in it is damaged or
                truncated (named in the message, with the fix).
        """
        import torch

        from iclr25.core.checkpoint import recover_folder, restore_rng_state

        p = Path(path)
        recover_folder(p)  # a kill between the two renames of a save: the previous checkpoint is put back
        if not (p / "trainer_state.pt").is_file() or not (p / "policy.safetensors").is_file():
            raise FileNotFoundError(f"no checkpoint in {p} (expected policy.safetensors and trainer_state.pt); "
                                    "run without --resume first")
        f = p / "trainer_state.pt"
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise TypeError(f"expected a dict, got {type(state).__name__}")
            missing = [k for k in ("optimizer", "scheduler", "step", "config", "extra") if k not in state]
            if missing:
                raise KeyError(f"missing entries {missing}")
            saved, extra = json.loads(state["config"]), json.loads(state["extra"])
        except Exception as e:        # truncated zip / unpickling error / wrong content
            raise damaged_file(f, e) from None
        if "n_examples" in state and int(state["n_examples"]) != self.n_examples:
            raise ValueError(f"--resume: checkpoint {p} was trained on {int(state['n_examples'])} examples but the "
                             f"{data_file or 'saved data'} now has {self.n_examples}: it is truncated or was "
                             f"replaced; {RESUME_FIX}")
        mine = asdict(self.cfg)
        diff = {k: (saved.get(k), v) for k, v in mine.items() if k not in ("save_every",) and saved.get(k) != v}
        if diff:
            raise ValueError(f"checkpoint {p} was written with other settings {diff} (saved, now); resume with "
                             "the same config or start a new --out")
        g = p / "rng_state.json"
        if not g.is_file():
            raise ValueError(f"--resume: {g} is missing (a checkpoint of an older version, without the NumPy/Python "
                             f"RNG states an exact resume needs); {RESUME_FIX}")
        try:
            rngs = json.loads(g.read_text(encoding="utf-8"))["processes"]
            if not isinstance(rngs, list):
                raise TypeError(f"expected a list of states, got {type(rngs).__name__}")
        except Exception as e:        # missing (an older checkpoint), truncated or foreign
            raise damaged_file(g, e) from None
        if len(rngs) != self.world:
            raise ValueError(f"--resume: checkpoint {p} holds the RNG states of {len(rngs)} process(es), this run has "
                             f"{self.world}; resume with the same number of processes or start a new --out")
        load_policy_weights(self.unwrapped, p / "policy.safetensors")
        try:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.step = int(state["step"])
        except Exception as e:        # a state that does not fit this optimiser/model
            raise damaged_file(f, e) from None
        restore_rng_state(rngs[self.rank])
        return extra
