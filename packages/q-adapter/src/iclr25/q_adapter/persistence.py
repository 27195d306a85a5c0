"""Saving and loading an adapter: peft's ``save_pretrained`` plus ``qadapter_config.json`` (the adapter's kind
and :class:`~iclr25.q_adapter.config.QAdapterConfig`), refusing an adapter of another kind on load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .config import QAdapterConfig
from .lora import check_causal_lm

__all__ = ["QCONFIG_NAME", "SaveLoadMixin"]

QCONFIG_NAME = "qadapter_config.json"


class SaveLoadMixin:
    """``save_pretrained`` / ``from_pretrained`` for a policy holding ``self.peft_model``, ``self.cfg`` and a
    class attribute ``kind``."""

    #: constructor arguments beside the config kept in ``qadapter_config.json`` (LoRAPolicy: its ``score``)
    _SAVED_ATTRS: tuple[str, ...] = ()

    def save_pretrained(self, path: str | Path) -> None:
        """Save the adapter with ``peft``'s ``save_pretrained`` plus ``qadapter_config.json``."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.peft_model.save_pretrained(str(out))
        meta = {"kind": self.kind, **{k: getattr(self, k) for k in self._SAVED_ATTRS}, **self.cfg.to_dict()}
        (out / QCONFIG_NAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_pretrained(cls, base_model: Any, path: str | Path, *, is_trainable: bool = False):
        """Load an adapter saved by :meth:`save_pretrained` onto ``base_model`` (peft ``from_pretrained``).

        Raises:
            FileNotFoundError: ``path`` holds no ``adapter_config.json``.
            ValueError: the folder holds another kind of adapter (e.g. a DPO LoRA for a Q-Adapter).
        """
        from peft import PeftModel

        p = Path(path)
        if not (p / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{p} holds no adapter_config.json (save it with save_pretrained)")
        check_causal_lm(base_model)
        meta: dict[str, Any] = {}
        if (p / QCONFIG_NAME).is_file():
            meta = json.loads((p / QCONFIG_NAME).read_text(encoding="utf-8"))
        kind = meta.pop("kind", cls.kind)
        if kind != cls.kind:
            raise ValueError(f"{p} holds a {kind!r} adapter, not a {cls.kind!r} one; use the matching class")
        extra = {k: meta.pop(k) for k in cls._SAVED_ATTRS if k in meta}
        if meta.get("target_modules") is not None:
            meta["target_modules"] = tuple(meta["target_modules"])
        cfg = QAdapterConfig(**meta) if meta else QAdapterConfig()
        peft_model = PeftModel.from_pretrained(base_model, str(p), is_trainable=is_trainable)
        return cls(base_model, cfg, peft_model=peft_model, **extra)

