"""Image/text encoders for ``embed``: open_clip and Hugging Face CLIP from **local** weights, and the
offline pair. Nothing here downloads: the hub is switched off (``HF_HUB_OFFLINE=1``) before open_clip
or transformers is imported, names and paths are checked first, and every error says that no
download was attempted.

Extra ``[clip]`` (torch, open_clip_torch, transformers, pillow); the offline pair needs ``[offline]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["ImageTextEncoder", "load_open_clip", "load_hf_clip", "OfflinePairEncoder", "load_image"]

NO_DOWNLOAD = "no download was attempted"


class ImageTextEncoder(Protocol):
    """What ``embed`` needs: ``encode_images(list[Path]) -> [n, D]`` and ``encode_text(list[str]) -> [m, D]``."""

    name: str

    def encode_images(self, paths: Sequence[Path]) -> np.ndarray: ...

    def encode_text(self, texts: Sequence[str]) -> np.ndarray: ...


def _offline_hub() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _import(name: str, extra: str = "clip"):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"this encoder needs {name!r}: pip install 'iclr25-tie[{extra}]'") from e


def load_image(path: Path):
    """Open an image as RGB (PIL). Raises FileNotFoundError naming the path."""
    Image = _import("PIL.Image")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"image {p} does not exist")
    with Image.open(p) as im:
        return im.convert("RGB")


@dataclass
class _TorchEncoder:
    name: str
    model: Any
    preprocess: Any
    tokenize: Any
    device: str
    batch_size: int = 256

    def encode_images(self, paths: Sequence[Path]) -> np.ndarray:
        torch = _import("torch")
        out = []
        with torch.inference_mode():
            for i in range(0, len(paths), self.batch_size):
                x = torch.stack([self.preprocess(load_image(p)) for p in paths[i:i + self.batch_size]]).to(self.device)
                out.append(self._image(x).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        torch = _import("torch")
        with torch.inference_mode():
            return self._text(list(texts)).float().cpu().numpy()


class _OpenCLIP(_TorchEncoder):
    def _image(self, x):
        return self.model.encode_image(x)

    def _text(self, texts):
        return self.model.encode_text(self.tokenize(texts).to(self.device))


class _HFCLIP(_TorchEncoder):
    def _image(self, x):
        return _features(self.model.get_image_features(pixel_values=x))

    def _text(self, texts):
        enc = self.tokenize(texts, padding=True, truncation=True, return_tensors="pt").to(self.device)
        return _features(self.model.get_text_features(**enc))


def _features(out):
    # transformers >= 5 may return a model output object instead of a tensor
    if hasattr(out, "pooler_output") and not hasattr(out, "shape"):
        return out.pooler_output
    return out


def load_open_clip(model: str | None = None, pretrained: str | Path | None = None, *, model_dir: str | Path | None = None,
                   device: str = "cpu", batch_size: int = 256) -> _OpenCLIP:
    """An open_clip model from local weights (the official notebooks' backbone: ``ViT-L-14`` with the
    ``laion2b_s32b_b82k`` weights file; also ``ViT-B-32`` openai, ``RN50``), or a local folder holding
    ``open_clip_config.json`` and the weights (``model_dir``, e.g. a copy of BiomedCLIP).

    Args:
        model: open_clip architecture name (``open_clip.list_models()``).
        pretrained: path of the weights file (``open_clip_pytorch_model.bin`` / ``.safetensors``);
            loaded with ``weights_only=True``.
        model_dir: instead of ``model``/``pretrained``: a local open_clip folder (``local-dir:`` schema).
        device: torch device; batch_size: images per forward pass.

    Raises:
        ValueError: an unknown model name, neither/both of (model, pretrained) and model_dir.
        FileNotFoundError: ``pretrained`` is not a file, ``model_dir`` lacks ``open_clip_config.json`` or a
            weights file (``*.safetensors`` / ``*.bin`` / ``*.pth``; open_clip itself would fall back to
            random weights with only a warning).
        Every message says that no download was attempted.
    """
    _offline_hub()
    if model_dir is not None:
        d = Path(model_dir)
        if not (d / "open_clip_config.json").is_file():
            raise FileNotFoundError(f"--model-dir {d}: no open_clip_config.json there ({NO_DOWNLOAD}); give a local "
                                    "open_clip folder (open_clip_config.json + open_clip_pytorch_model.bin)")
        weights = sorted(f.name for ext in ("safetensors", "bin", "pth") for f in d.glob(f"*.{ext}"))
        if not weights:
            # open_clip would only log a warning and embed with randomly initialised weights
            raise FileNotFoundError(f"--model-dir {d}: open_clip_config.json but no weights file (*.safetensors, "
                                    f"*.bin, *.pth) there ({NO_DOWNLOAD}); copy open_clip_pytorch_model.bin next to it")
        open_clip = _import("open_clip")
        if not hasattr(getattr(open_clip, "factory", None), "LOCAL_DIR_PREFIX"):
            raise ValueError(f"--model-dir needs open_clip_torch >= 3.0 (the local-dir: schema); installed: "
                             f"{getattr(open_clip, '__version__', '?')}. Or give --model NAME --pretrained FILE")
        text_cfg = json.loads((d / "open_clip_config.json").read_text(encoding="utf-8")).get("model_cfg", {}).get(
            "text_cfg", {})
        hf_text = text_cfg.get("hf_model_name")
        try:
            m, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{d}", device=device, weights_only=True)
        except OSError as e:
            if hf_text and not Path(hf_text).is_dir():
                # e.g. BiomedCLIP: its text tower is a Hugging Face model named by hub id in the config
                raise FileNotFoundError(
                    f"--model-dir {d}: text_cfg.hf_model_name {hf_text!r} is a hub id that is not in the local Hugging "
                    f"Face cache ({NO_DOWNLOAD}); set it in open_clip_config.json to a local folder holding that "
                    f"model's config.json") from e
            raise
        tok = open_clip.get_tokenizer(f"local-dir:{d}")
        return _OpenCLIP(f"open_clip local-dir:{d}", m.eval(), preprocess, tok, device, batch_size)
    if not model:
        raise ValueError(f"open_clip: give --model (e.g. ViT-L-14) and --pretrained FILE, or --model-dir ({NO_DOWNLOAD})")
    if pretrained is None:
        raise ValueError(f"open_clip: give --pretrained, the local weights file of {model} ({NO_DOWNLOAD}; pretrained "
                         "tags such as laion2b_s32b_b82k would need the hub)")
    p = Path(pretrained)
    if not p.is_file():
        raise FileNotFoundError(f"open_clip: --pretrained {p} is not a file ({NO_DOWNLOAD}); give the local "
                                "weights file, e.g. open_clip_pytorch_model.bin")
    open_clip = _import("open_clip")
    known = open_clip.list_models()
    if model not in known:
        raise ValueError(f"open_clip: unknown model {model!r} ({NO_DOWNLOAD}); known models include "
                         f"{[k for k in known if k.startswith(('ViT-B', 'ViT-L', 'RN'))][:12]} ...")
    m, _, preprocess = open_clip.create_model_and_transforms(model, pretrained=str(p), device=device,
                                                             weights_only=True)
    tok = open_clip.get_tokenizer(model)
    return _OpenCLIP(f"open_clip {model} {p}", m.eval(), preprocess, tok, device, batch_size)


def load_hf_clip(model_dir: str | Path, *, device: str = "cpu", batch_size: int = 256) -> _HFCLIP:
    """A Hugging Face ``CLIPModel`` + processor from a local folder (``local_files_only=True``), e.g.
    ``/models/clip-vit-large-patch14``.

    Raises:
        FileNotFoundError: the folder or its ``config.json`` is missing (no download was attempted).
    """
    _offline_hub()
    d = Path(model_dir)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"hf: --model-dir {d} has no config.json ({NO_DOWNLOAD}); save the model with "
                                "save_pretrained or copy the hub folder there")
    transformers = _import("transformers")
    torch = _import("torch")
    model = transformers.AutoModel.from_pretrained(str(d), local_files_only=True).to(device).eval()
    image_proc = transformers.AutoImageProcessor.from_pretrained(str(d), local_files_only=True)
    tok = transformers.AutoTokenizer.from_pretrained(str(d), local_files_only=True)

    def preprocess(im):
        return torch.as_tensor(np.asarray(image_proc(images=im, return_tensors="np")["pixel_values"][0]))

    return _HFCLIP(f"hf {d}", model, preprocess, tok, device, batch_size)


class OfflinePairEncoder:
    """The offline pair as an :class:`ImageTextEncoder`: images are resized to 32×32 (bilinear)."""

    def __init__(self, checkpoint: str | Path, device: str = "cpu", batch_size: int = 256) -> None:
        from .offline_pair import load_offline_pair

        self.pair = load_offline_pair(checkpoint, device=device)
        self.name = f"offline-pair {checkpoint}"
        self.batch_size = batch_size

    def encode_images(self, paths: Sequence[Path]) -> np.ndarray:
        Image = _import("PIL.Image")
        arr = np.stack([np.asarray(load_image(p).resize((32, 32), Image.BILINEAR), dtype=np.uint8) for p in paths])
        return self.pair.encode_images(arr, self.batch_size)

    def encode_arrays(self, images: np.ndarray) -> np.ndarray:
        return self.pair.encode_images(images, self.batch_size)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        return self.pair.encode_text(texts)
