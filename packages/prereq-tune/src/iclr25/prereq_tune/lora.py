"""LoRA adapters through ``peft``: knowledge and skill LoRAs in one model, and the frozen invariant.

An adapter stack θ₀ + Δθ_a + Δθ_b adds the LoRA deltas of every active adapter (spec §1.2):
``W x + (α_a/r_a) B_a A_a x + (α_b/r_b) B_b A_b x``. :func:`active_adapters` activates a list of
adapters and makes *only* the named ones trainable. PEFT's ``set_adapter([...])`` marks every
activated adapter trainable again (PEFT issue 1374; still so in 0.2x), which would let a frozen
knowledge LoRA drift while the skill LoRA trains; so after every activation ``requires_grad`` is
re-applied to every parameter, and :func:`assert_frozen` checks it before every optimiser step.
:func:`tensor_hashes` fingerprints tensors bit-exactly (sha256 of the bytes) so training can prove
afterwards (and across ``--resume``) that knowledge adapters and base weights did not change.

Adapters are saved as PEFT adapters (``adapter_config.json`` + ``adapter_model.safetensors``) with
a ``prereq_tune.json`` sidecar (role, version, base-model fingerprint), so an adapter trained on
another base model is refused when loaded (:func:`load_adapter`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._version import __version__
from .data import finite_in

__all__ = [
    "LoraSpec",
    "GPT2_TARGETS",
    "LLAMA_TARGETS",
    "KNOWLEDGE_TINY",
    "SKILL_TINY",
    "KNOWLEDGE_LLAMA3",
    "SKILL_BIO_LLAMA3",
    "SKILL_POPQA_LLAMA3",
    "add_knowledge_adapter",
    "add_skill_adapter",
    "adapter_names",
    "adapter_parameters",
    "active_adapters",
    "set_trainable",
    "assert_frozen",
    "tensor_hashes",
    "changed_tensors",
    "base_fingerprint",
    "save_adapter",
    "load_adapter",
    "read_adapter_meta",
    "FrozenTensorError",
]

log = logging.getLogger(__name__)

GPT2_TARGETS: tuple[str, ...] = ("c_attn", "c_proj", "c_fc")
LLAMA_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
META_FILE = "prereq_tune.json"


class FrozenTensorError(RuntimeError):
    """A knowledge-adapter or base tensor changed (or became trainable) during skill training."""


@dataclass(frozen=True)
class LoraSpec:
    """A LoRA configuration (``peft.LoraConfig``), α = 2r as in the paper.

    Args:
        r: rank (> 0).
        alpha: scaling numerator; the delta is scaled by ``alpha / r`` (> 0).
        dropout: LoRA dropout on the adapter input, in [0, 1) (paper 0.05; CPU scale 0).
        target_modules: module names to adapt (GPT-2: ``c_attn``, ``c_proj``, ``c_fc``; Llama: q/k/v/o,
            gate/up/down projections).
        fan_in_fan_out: ``True`` for GPT-2 ``Conv1D`` (weights stored ``(in, out)``); ``None`` detects
            it from the model.

    Raises:
        ValueError: ``r <= 0``, ``alpha <= 0`` or non-finite, dropout outside [0, 1), no targets.
    """

    r: int = 32
    alpha: float = 64.0
    dropout: float = 0.05
    target_modules: tuple[str, ...] = LLAMA_TARGETS
    fan_in_fan_out: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r <= 0:
            raise ValueError(f"LoRA r={self.r!r} must be an integer > 0")
        finite_in("LoRA alpha", self.alpha, 0.0, lo_open=True)
        finite_in("LoRA dropout", self.dropout, 0.0, 0.999999)
        if not self.target_modules or any(not isinstance(t, str) or not t for t in self.target_modules):
            raise ValueError(f"LoRA target_modules={self.target_modules!r} must be a non-empty list of module names")
        object.__setattr__(self, "target_modules", tuple(self.target_modules))

    @property
    def scaling(self) -> float:
        """``alpha / r``, the factor of the LoRA delta."""
        return float(self.alpha) / self.r

    def to_peft(self, model: Any = None):
        """The ``peft.LoraConfig`` (``fan_in_fan_out`` detected from ``model`` when ``None``)."""
        from peft import LoraConfig

        fifo = self.fan_in_fan_out
        if fifo is None:
            fifo = _uses_conv1d(model, self.target_modules) if model is not None else False
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=list(self.target_modules), fan_in_fan_out=fifo, bias="none",
                          task_type="CAUSAL_LM")


#: CPU-scale recipes (spec §4.1): knowledge r 32 / α 64, skill r 16 / α 32, no dropout.
KNOWLEDGE_TINY = LoraSpec(32, 64.0, 0.0, GPT2_TARGETS, True)
SKILL_TINY = LoraSpec(16, 32.0, 0.0, GPT2_TARGETS, True)
#: The official Llama-3-8B recipes (spec §1.7).
KNOWLEDGE_LLAMA3 = LoraSpec(32, 64.0, 0.05, LLAMA_TARGETS, False)
SKILL_BIO_LLAMA3 = LoraSpec(64, 128.0, 0.05, LLAMA_TARGETS, False)
SKILL_POPQA_LLAMA3 = LoraSpec(32, 64.0, 0.05, LLAMA_TARGETS, False)


def _uses_conv1d(model: Any, targets: Sequence[str]) -> bool:
    from transformers.pytorch_utils import Conv1D

    for name, m in model.named_modules():      # also under a PEFT wrapper (``c_attn.base_layer``)
        if isinstance(m, Conv1D) and any(t in name.split(".") for t in targets):
            return True
    return False


def _is_peft(model: Any) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _add(model: Any, name: str, spec: LoraSpec):
    from peft import get_peft_model

    if not isinstance(name, str) or not name or "." in name:
        raise ValueError(f"adapter name {name!r} must be a non-empty string without '.'")
    if _is_peft(model):
        if name in model.peft_config:
            raise ValueError(f"the model already has an adapter named {name!r}")
        model.add_adapter(name, spec.to_peft(model.get_base_model()))
    else:
        model = get_peft_model(model, spec.to_peft(model), adapter_name=name)
    _zero_check(model, name)
    set_trainable(model, ())
    return model


def _zero_check(model: Any, name: str) -> None:
    """A fresh LoRA must start at zero (B = 0), so the stack starts equal to the base."""
    for pname, p in adapter_parameters(model, name).items():
        if ".lora_B." in pname and bool(p.detach().abs().sum() != 0):
            raise RuntimeError(f"adapter {name!r}: {pname} is not zero-initialised")


def add_knowledge_adapter(model: Any, name: str, spec: LoraSpec = KNOWLEDGE_TINY):
    """Add a zero-initialised knowledge LoRA Δθ_know named ``name`` (spec §1.2, §1.6 line 2).

    Args:
        model: a ``transformers`` causal LM, or a ``peft.PeftModel`` that already holds adapters.
        name: the adapter name; for multi-version training end it with the version
            (``know_v2``, ``lora_fake_statement_2``).
        spec: the :class:`LoraSpec` (default: the CPU-scale knowledge recipe, r 32 / α 64).

    Returns:
        The ``peft.PeftModel`` holding the adapter (the input itself when it already was one).
        Every parameter is left with ``requires_grad=False``; training functions activate what
        they train.

    Raises:
        ValueError: a duplicate or malformed name.
    """
    return _add(model, name, spec)


def add_skill_adapter(model: Any, name: str = "skill", spec: LoraSpec = SKILL_TINY):
    """Add the zero-initialised skill LoRA Δθ_skill (spec §1.6 line 3); see :func:`add_knowledge_adapter`."""
    return _add(model, name, spec)


def adapter_names(model: Any) -> list[str]:
    """Names of the LoRA adapters the model holds."""
    return list(model.peft_config) if _is_peft(model) else []


def adapter_parameters(model: Any, name: str) -> dict[str, Any]:
    """``{parameter name: parameter}`` of one adapter, found by module structure (exact adapter
    key, so ``know_v1`` never matches ``know_v10``).

    Raises:
        ValueError: the model has no adapter ``name``.
    """
    from peft.tuners.lora import LoraLayer

    if name not in adapter_names(model):
        raise ValueError(f"the model has no adapter {name!r}; it has {adapter_names(model)}")
    out: dict[str, Any] = {}
    for mname, m in model.named_modules():
        if isinstance(m, LoraLayer):
            for attr in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector"):
                d = getattr(m, attr, None)
                if d is not None and name in d:
                    sub = d[name]
                    if hasattr(sub, "named_parameters"):
                        for pn, p in sub.named_parameters():
                            out[f"{mname}.{attr}.{name}.{pn}"] = p
                    else:
                        out[f"{mname}.{attr}.{name}"] = sub
    return out


def _param_roles(model: Any) -> dict[int, str]:
    """id(parameter) -> adapter name, for every adapter parameter."""
    roles: dict[int, str] = {}
    for a in adapter_names(model):
        for p in adapter_parameters(model, a).values():
            roles[id(p)] = a
    return roles


def set_trainable(model: Any, trainable: Sequence[str]) -> list[Any]:
    """Set ``requires_grad`` on every parameter: ``True`` exactly for the adapters in ``trainable``,
    ``False`` for all others and for the base weights.

    Returns:
        The trainable parameters (in ``named_parameters`` order).

    Raises:
        ValueError: an unknown adapter name.
    """
    names = set(trainable)
    unknown = names - set(adapter_names(model))
    if unknown:
        raise ValueError(f"unknown adapter(s) {sorted(unknown)}; the model has {adapter_names(model)}")
    roles = _param_roles(model)
    out = []
    for _, p in model.named_parameters():
        on = roles.get(id(p)) in names
        p.requires_grad_(on)
        if on:
            out.append(p)
    return out


def _set_active(model: Any, names: Sequence[str]) -> None:
    # the tuner (LoraModel) accepts a list; PeftModel.set_adapter takes one name only
    model.base_model.set_adapter(list(names))


@contextlib.contextmanager
def active_adapters(model: Any, names: Sequence[str], trainable: Sequence[str] = ()) -> Iterator[Any]:
    """Activate the adapters ``names`` (their LoRA deltas add) and make only ``trainable`` trainable.

    ``requires_grad`` is re-applied to every parameter after the activation (PEFT's
    ``set_adapter`` re-enables gradients of every activated adapter). On exit the previously
    active adapters are restored and every parameter is frozen again.

    Args:
        model: a ``peft.PeftModel``.
        names: adapters to activate (at least one).
        trainable: the subset of ``names`` to train.

    Yields:
        The model.

    Raises:
        ValueError: unknown adapters, an empty list, or ``trainable`` not a subset of ``names``.
    """
    names = list(names)
    if not names:
        raise ValueError("active_adapters: name at least one adapter")
    unknown = [n for n in names if n not in adapter_names(model)]
    if unknown:
        raise ValueError(f"active_adapters: unknown adapter(s) {unknown}; the model has {adapter_names(model)}")
    if not set(trainable) <= set(names):
        raise ValueError(f"active_adapters: trainable {list(trainable)} must be among the active {names}")
    prev = list(model.active_adapters)
    _set_active(model, names)
    set_trainable(model, trainable)
    try:
        yield model
    finally:
        prev = [p for p in prev if p in adapter_names(model)]
        if prev:
            _set_active(model, prev)
        set_trainable(model, ())


def assert_frozen(frozen: Sequence[tuple[str, Any]], *, where: str = "") -> None:
    """Raise unless every parameter in ``frozen`` has ``requires_grad=False`` and no gradient.

    Raises:
        FrozenTensorError: naming the first offending parameter.
    """
    for n, p in frozen:
        if p.requires_grad or p.grad is not None:
            raise FrozenTensorError(f"{where}: {n} is trainable or has a gradient although it must stay frozen "
                                    "(PEFT's set_adapter re-enabled gradients?)")


def tensor_hashes(model: Any, *, exclude: Sequence[str] = (), include_only: Sequence[str] | None = None) -> dict[str, str]:
    """sha256 of the bytes of every parameter, by name (bit-exact fingerprints).

    Args:
        model: any ``torch.nn.Module``.
        exclude: adapter names whose parameters are skipped (e.g. the skill adapter).
        include_only: when given, only these adapters' parameters (no base weights).

    Returns:
        ``{parameter name: hex digest}``.
    """
    import torch

    roles = _param_roles(model) if _is_peft(model) else {}
    out = {}
    for n, p in model.named_parameters():
        role = roles.get(id(p))
        if role in exclude:
            continue
        if include_only is not None and role not in include_only:
            continue
        t = p.detach()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        out[n] = hashlib.sha256(t.contiguous().cpu().numpy().tobytes()).hexdigest()
    return out


def changed_tensors(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Names whose hash differs (or that appeared or vanished)."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def _base_name(n: str) -> str:
    n = n.removeprefix("base_model.model.")
    return n.replace(".base_layer.", ".")


def base_fingerprint(model: Any, *, samples: int = 512) -> str:
    """A cheap fingerprint of the base weights (names, shapes and a strided sample of values of
    every non-adapter parameter, rounded to bfloat16 so a checkpoint loaded in float32 or bfloat16
    matches). Identifies the base model an adapter was trained on at any scale.

    Returns:
        A 16-hex-digit string.
    """
    import torch

    roles = _param_roles(model) if _is_peft(model) else {}
    h = hashlib.sha256()
    for n, p in model.named_parameters():
        if id(p) in roles:
            continue
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // samples)
        s = flat[::step][:samples].to(torch.float32).to(torch.bfloat16).view(torch.int16).cpu().numpy()
        h.update(f"{_base_name(n)}:{tuple(p.shape)}:".encode())
        h.update(s.tobytes())
    return h.hexdigest()[:16]


def save_adapter(model: Any, name: str, out_dir: str | Path, *, role: str, extra: dict[str, Any] | None = None) -> Path:
    """Save one adapter as a PEFT adapter folder (``save_pretrained`` with ``selected_adapters``)
    at exactly ``out_dir``, plus ``prereq_tune.json`` (role, name, version, base fingerprint).

    Returns:
        ``out_dir``.
    """
    from iclr25.core.checkpoint import atomic_folder

    out = Path(out_dir)
    meta = {"role": role, "name": name, "base_fingerprint": base_fingerprint(model),
            "base_model": getattr(model.get_base_model().config, "_name_or_path", ""),
            "package": f"iclr25-prereq-tune {__version__}", **(extra or {})}
    with atomic_folder(out) as tmp:  # a kill mid-save keeps the previous adapter folder whole
        stage = tmp / ".peft"
        model.save_pretrained(str(stage), selected_adapters=[name])
        src = stage / name if (stage / name).is_dir() else stage
        for f in src.iterdir():
            shutil.move(str(f), str(tmp / f.name))
        shutil.rmtree(stage)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def read_adapter_meta(path: str | Path) -> dict[str, Any]:
    """The ``prereq_tune.json`` of an adapter folder (``{}`` for a PEFT adapter from elsewhere).

    Raises:
        FileNotFoundError: not a folder, or no ``adapter_config.json``.
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"adapter folder {p} does not exist")
    if not (p / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{p} is not a PEFT adapter folder (no adapter_config.json); pass a folder "
                                "written by train-knowledge / train-skill or save_pretrained")
    f = p / META_FILE
    return json.loads(f.read_text()) if f.is_file() else {}


def load_adapter(model: Any, path: str | Path, name: str | None = None, *, role: str | None = None,
                 check_base: bool = True):
    """Load a saved PEFT adapter into ``model`` under ``name`` (default: the name it was saved with),
    frozen.

    Args:
        model: a ``transformers`` model or a ``peft.PeftModel``.
        path: the adapter folder.
        name: adapter name in the model.
        role: when given, the sidecar's role must match (``"knowledge"`` / ``"skill"``).
        check_base: refuse an adapter whose recorded base fingerprint differs from ``model``'s.

    Returns:
        The ``peft.PeftModel``.

    Raises:
        FileNotFoundError: a missing folder or a folder that is no PEFT adapter.
        ValueError: the adapter was trained on another base model, a role mismatch, or a duplicate name.
    """
    from peft import PeftModel

    p = Path(path)
    meta = read_adapter_meta(p)
    name = name or meta.get("name") or p.name
    if role is not None and meta.get("role") not in (None, role):
        raise ValueError(f"{p} is a {meta.get('role')} adapter, not a {role} adapter")
    if check_base and meta.get("base_fingerprint"):
        fp = base_fingerprint(model)
        if fp != meta["base_fingerprint"]:
            raise ValueError(f"adapter {p} was trained on another base model (base fingerprint "
                             f"{meta['base_fingerprint']}, this model {fp}; recorded base "
                             f"{meta.get('base_model')!r}); train it on this base model or load the base it was "
                             "trained on")
    if _is_peft(model):
        if name in model.peft_config:
            raise ValueError(f"the model already has an adapter named {name!r}")
        model.load_adapter(str(p), adapter_name=name, is_trainable=False)
    else:
        model = PeftModel.from_pretrained(model, str(p), adapter_name=name, is_trainable=False)
    set_trainable(model, ())
    return model


def lora_spec_dict(spec: LoraSpec) -> dict[str, Any]:
    return asdict(spec)
