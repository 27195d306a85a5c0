"""Full scale: loading any causal LM (core ``load_causal_lm``: dtype, device_map, quantisation), LoRA
through ``peft`` (the released code: r 16, α 16 on ``q_proj``/``v_proj``), saving under accelerate /
DeepSpeed ZeRO-3, and the shipped launcher configs.

``accelerate launch --config_file $(python -m iclr25.seal.scale accelerate_zero3.yaml) -m iclr25.seal
train-selector --model meta-llama/Meta-Llama-3-8B-Instruct --lora-r 16 --bf16 ...`` runs the selector
training sharded with ZeRO-3 (``ds_zero3.json``, next to the accelerate config).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["apply_lora", "load_model", "save_trained", "config_path", "CONFIG_FILES"]

log = logging.getLogger("iclr25.seal")

CONFIG_FILES = ("accelerate_zero3.yaml", "ds_zero3.json", "llama3_selector.yaml", "llama3_sft.yaml", "quick.yaml")


def config_path(name: str) -> Path:
    """Path of a config file shipped with the package (``CONFIG_FILES``).

    Raises:
        FileNotFoundError: an unknown name (the message lists the shipped ones).
    """
    p = Path(__file__).parent / "configs" / name
    if not p.is_file():
        raise FileNotFoundError(f"no shipped config {name!r}; choose from {list(CONFIG_FILES)}")
    return p


def _linear_names(model: Any) -> set[str]:
    import torch

    try:
        from transformers.pytorch_utils import Conv1D
        kinds: tuple[type, ...] = (torch.nn.Linear, Conv1D)
    except ImportError:  # pragma: no cover
        kinds = (torch.nn.Linear,)
    return {name.rsplit(".", 1)[-1] for name, mod in model.named_modules() if isinstance(mod, kinds)}


def apply_lora(model: Any, r: int, *, alpha: int = 16, dropout: float = 0.0,
               target_modules: Sequence[str] = ("q_proj", "v_proj")) -> Any:
    """Wrap ``model`` with fresh LoRA adapters (``peft.get_peft_model``); only they train.

    Args:
        model: a ``*ForCausalLM``.
        r, alpha, dropout: LoRA rank, α and dropout (released code: 16, 16, 0).
        target_modules: module names that get adapters (Llama: ``q_proj``, ``v_proj``; GPT-2: ``c_attn``).

    Returns:
        A ``peft.PeftModel``.

    Raises:
        ValueError: a target module the model does not have (the message lists its linear layers).
    """
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers.pytorch_utils import Conv1D

    have = _linear_names(model)
    missing = [t for t in target_modules if t not in have]
    if missing:
        raise ValueError(f"--lora-target-modules {missing} not found in {type(model).__name__}; its linear layers are "
                         f"{sorted(have)} (Llama-style models: q_proj v_proj; GPT-2: c_attn)")
    conv = any(isinstance(m, Conv1D) and n.rsplit(".", 1)[-1] in target_modules for n, m in model.named_modules())
    cfg = LoraConfig(task_type=TaskType.CAUSAL_LM, r=r, lora_alpha=alpha, lora_dropout=dropout,
                     target_modules=list(target_modules), bias="none", fan_in_fan_out=conv)
    ckpt = getattr(model, "is_activation_checkpointing", None)
    if ckpt is None:
        ckpt = getattr(model, "is_gradient_checkpointing", False)
    if ckpt:
        model.enable_input_require_grads()
    pm = get_peft_model(model, cfg)
    n_train = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in pm.parameters())
    log.info("LoRA r=%d alpha=%d on %s: %d of %d parameters train (%.3f%%)", r, alpha, list(target_modules), n_train,
             n_all, 100 * n_train / max(1, n_all))
    return pm


def load_model(name_or_path: str, options: Any, runtime: Any, *, adapter: str | Path | None = None,
               trainable: bool = True) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a command: core ``load_causal_lm`` with the command's ``ModelLoadOptions``,
    then LoRA when ``options.lora_r > 0`` (or a saved PEFT ``adapter``), in train mode when ``trainable``.

    Under accelerate the model is loaded on the CPU (DeepSpeed) or the process's device and
    ``device_map`` must stay unset (the launcher places the weights).

    Raises:
        ModelNotFoundError: a missing local folder or hub id (no download is attempted offline).
        ValueError: ``device_map`` together with a multi-process launch; unknown LoRA targets.
    """
    from iclr25.core.lm import load_causal_lm

    kw = options.load_kwargs()
    distributed = getattr(runtime, "world_size", 1) > 1 or getattr(runtime, "distributed_type", "NO") == "DEEPSPEED"
    if distributed and kw.get("device_map"):
        raise ValueError("--device-map cannot be combined with accelerate launch (data parallel / ZeRO-3); drop it")
    device = "cpu" if getattr(runtime, "distributed_type", "NO") == "DEEPSPEED" else str(runtime.device)
    model, tok = load_causal_lm(name_or_path, device=device, **kw)
    if adapter is not None:
        from peft import PeftModel

        if not (Path(adapter) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"--adapter {adapter} has no adapter_config.json (write one with 'iclr25-seal sft "
                                    "--lora-r R')")
        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=trainable)
    elif getattr(options, "lora_r", 0) and trainable:
        model = apply_lora(model, options.lora_r, alpha=options.lora_alpha, dropout=options.lora_dropout,
                           target_modules=options.lora_target_modules)
    if trainable:
        model.train()
    return model, tok


def save_trained(model: Any, tokenizer: Any, folder: str | Path, runtime: Any) -> Path:
    """Save a trained model with ``save_pretrained`` (a PEFT adapter for a peft model; the full
    weights otherwise, gathered from ZeRO-3 shards under DeepSpeed) and its tokenizer."""
    out = Path(folder)
    acc = getattr(runtime, "acc", None)
    unwrapped = runtime.unwrap(model)
    if acc is not None:
        state = acc.get_state_dict(model)
        if runtime.is_main:
            out.mkdir(parents=True, exist_ok=True)
            unwrapped.save_pretrained(str(out), state_dict=state, save_function=acc.save, is_main_process=True)
            tokenizer.save_pretrained(str(out))
        runtime.barrier()
        return out
    out.mkdir(parents=True, exist_ok=True)
    unwrapped.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


if __name__ == "__main__":  # python -m iclr25.seal.scale accelerate_zero3.yaml -> prints its path
    print(config_path(sys.argv[1] if len(sys.argv) > 1 else "accelerate_zero3.yaml"))
