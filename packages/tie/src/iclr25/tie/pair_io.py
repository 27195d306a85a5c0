"""Checkpoint I/O of the offline pair: weights as safetensors, :func:`load_offline_pair`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .minilm import MiniLMTextEncoder
from .pair_config import PairConfig, _need_torch
from .pair_model import OfflinePair, _build_modules

__all__ = ['load_offline_pair']

log = logging.getLogger("iclr25.tie")


def _state(image, head, scale) -> dict:
    st = {f"image.{k}": v.detach().cpu().contiguous() for k, v in image.state_dict().items()}
    st.update({f"text_head.{k}": v.detach().cpu().contiguous() for k, v in head.state_dict().items()})
    st["logit_scale"] = scale.detach().cpu().reshape(1).contiguous()
    return st


def _load_state(image, head, scale, state: dict) -> None:
    torch = _need_torch()
    image.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("image.")})
    head.load_state_dict({k[10:]: v for k, v in state.items() if k.startswith("text_head.")})
    with torch.no_grad():
        scale.copy_(state["logit_scale"].reshape(()))


def load_offline_pair(checkpoint: str | Path, *, device: str = "cpu",
                      text_encoder: MiniLMTextEncoder | None = None) -> OfflinePair:
    """Load a pair saved by :func:`train_offline_pair` (``model.safetensors`` + ``config.json``).

    Raises:
        FileNotFoundError: the folder or one of the two files is missing.
    """
    from safetensors.torch import load_file

    ck = Path(checkpoint)
    for f in ("config.json", "model.safetensors"):
        if not (ck / f).is_file():
            raise FileNotFoundError(f"checkpoint: {ck / f} does not exist (train one with "
                                    "'iclr25-tie train-encoder --out DIR')")
    meta = json.loads((ck / "config.json").read_text())
    pc = dict(meta["pair_config"])
    pc["widths"] = tuple(pc["widths"])
    cfg = PairConfig(**pc)
    te = text_encoder
    image, head, scale = _build_modules(cfg, 384)
    try:
        _load_state(image, head, scale, load_file(str(ck / "model.safetensors")))
    except (RuntimeError, KeyError) as e:
        raise ValueError(f"checkpoint {ck}: model.safetensors does not match the offline pair of this version "
                         f"(retrain with 'iclr25-tie train-encoder'): {str(e).splitlines()[0]}") from None
    image.to(device).eval()
    head.to(device)
    return OfflinePair(cfg, image, head, scale, te, device)
