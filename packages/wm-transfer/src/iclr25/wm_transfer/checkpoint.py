"""Model checkpoints: the package format, ``ando-khachatryan/HiDDeN`` checkpoints, and the decoder
check that runs before any attack.

Package format (``.pt``, written with ``torch.save``, read with ``torch.load(weights_only=True)``;
only tensors, numbers, strings, lists and dicts, no pickled objects)::

    {"format": "iclr25-wm-transfer", "format_version": 1,
     "config": HiddenConfig.to_dict(),          # architecture
     "encoder": state_dict | None, "decoder": state_dict, "discriminator": state_dict (optional),
     "message": Tensor[n] float in {0,1},       # the owner's watermark
     "clean_bit_acc": float,                    # held-out clean bitwise accuracy after training
     "role": "target" | "surrogate", "seed": int, "robust": bool, "train_info": dict}

HiDDeN checkpoints (``torch.save({"enc-dec-model": ..., "discrim-model": ..., "epoch": ...})``) are
read with ``weights_only=True`` too; their architecture is inferred from the state dict shapes (the
image size is not stored there: pass ``image_size``; the message is not stored either: pass it to
evaluate detection).
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .models import Discriminator, HiddenConfig, WatermarkModel, check_messages

__all__ = ["FORMAT", "FORMAT_VERSION", "save_watermark_model", "load_watermark_model", "file_sha256",
           "model_fingerprint", "DecoderCheckError", "check_decoders", "decoder_check_job"]

log = logging.getLogger(__name__)

FORMAT = "iclr25-wm-transfer"
FORMAT_VERSION = 1
_REQUIRED = ("format_version", "config", "decoder", "message", "clean_bit_acc")


def save_watermark_model(model: WatermarkModel, path: str | Path, *, role: str = "", seed: int | None = None,
                         robust: bool | None = None) -> Path:
    """Write ``model`` in the package format (atomically: a temporary file, then a rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = dict(getattr(model, "train_info", {}) or {})
    st: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "config": model.cfg.to_dict(),
        "encoder": None if model.encoder is None else model.encoder.state_dict(),
        "decoder": model.decoder.state_dict(),
        "message": None if model.message is None else model.message.detach().cpu().float(),
        "clean_bit_acc": None if model.clean_bit_acc is None else float(model.clean_bit_acc),
        "role": role, "seed": info.get("seed", seed) if seed is None else seed,
        "robust": info.get("robust", robust) if robust is None else robust, "train_info": info,
    }
    disc = getattr(model, "discriminator", None)
    if disc is not None:
        st["discriminator"] = disc.state_dict()
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(st, tmp)
    tmp.replace(path)
    return path


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the decoder's parameters and buffers (names, shapes, bytes): identifies a model that
    did not come from a file (e.g. a callable wrapped with :class:`~.models.CallableDecoder` hashes its
    module's state, or its name when it has none)."""
    h = hashlib.sha256()
    dec = getattr(model, "decoder", model)
    sd = dec.state_dict() if isinstance(dec, torch.nn.Module) else {}
    if not sd:
        h.update(str(getattr(model, "source", type(model).__name__)).encode())
    for k, v in sorted(sd.items()):
        h.update(k.encode())
        h.update(str(tuple(v.shape)).encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _hidden_config_from_state(sd: dict[str, Tensor], image_size: int) -> HiddenConfig:
    """Infer a HiDDeN ``Encoder``/``Decoder`` configuration from an ``enc-dec-model`` state dict."""
    def blocks(prefix: str) -> list[int]:
        pat = re.compile(re.escape(prefix) + r"\.(\d+)\.layers\.0\.weight$")
        return sorted(int(m.group(1)) for k in sd if (m := pat.match(k)))

    try:
        n_bits = int(sd["decoder.linear.weight"].shape[0])
        enc = blocks("encoder.conv_layers")
        dec = blocks("decoder.layers")
        enc_ch = int(sd["encoder.conv_layers.0.layers.0.weight"].shape[0])
        dec_ch = int(sd["decoder.layers.0.layers.0.weight"].shape[0])
    except KeyError as e:
        raise ValueError(f"HiDDeN checkpoint: state dict 'enc-dec-model' is missing key {e.args[0]!r}") from None
    if not enc or not dec:
        raise ValueError("HiDDeN checkpoint: no encoder.conv_layers / decoder.layers blocks found")
    return HiddenConfig(H=image_size, W=image_size, n_bits=n_bits, enc_blocks=len(enc), enc_ch=enc_ch,
                        dec_blocks=len(dec) - 1, dec_ch=dec_ch, dec_strides=0, decoder="cnn",
                        message_embed="broadcast", decoder_head="pool", residual=False, use_discriminator=False)


def load_watermark_model(path: str | Path, device: str | torch.device = "cpu", *, image_size: int | None = None,
                         message: Tensor | None = None) -> WatermarkModel:
    """Load a watermarking model in eval mode from a package checkpoint or a HiDDeN checkpoint.

    Args:
        path: the ``.pt`` / ``.pth`` / ``.pyt`` file.
        image_size: image side for HiDDeN checkpoints (default 128, the paper's); for package
            checkpoints it must match the stored config when given.
        message: the owner's message for a HiDDeN checkpoint (it stores none), or to override.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a dict checkpoint, a missing key (named), an unknown format version, or state
            dicts that do not fit the stored configuration.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        st = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling errors have many types
        raise ValueError(f"{path}: cannot be read as a weights-only torch checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(st, dict):
        raise ValueError(f"{path}: expected a dict checkpoint, got {type(st).__name__}")
    if "enc-dec-model" in st:
        sd = st["enc-dec-model"]
        cfg = _hidden_config_from_state(sd, image_size or 128)
        model = WatermarkModel(cfg, message=message)
        enc = {k[len("encoder."):]: v for k, v in sd.items() if k.startswith("encoder.")}
        dec = {k[len("decoder."):]: v for k, v in sd.items() if k.startswith("decoder.")}
        try:
            model.encoder.load_state_dict(enc)
            model.decoder.load_state_dict(dec)
        except RuntimeError as e:
            raise ValueError(f"{path}: HiDDeN state dict does not fit the inferred architecture: {e}") from None
        model.source = str(path)
        model.clean_bit_acc = None
        return model.to(device).eval()
    missing = [k for k in _REQUIRED if k not in st]
    if missing:
        raise ValueError(f"{path}: not a {FORMAT} checkpoint: missing key(s) {missing} (train one with "
                         "`iclr25-wm-transfer train`, or pass a HiDDeN checkpoint with 'enc-dec-model')")
    if st["format_version"] != FORMAT_VERSION:
        raise ValueError(f"{path}: unknown format_version {st['format_version']!r}; this version reads "
                         f"{FORMAT_VERSION} (upgrade iclr25-wm-transfer)")
    cfg = HiddenConfig.from_dict(dict(st["config"]))
    if image_size is not None and (cfg.H, cfg.W) != (image_size, image_size):
        raise ValueError(f"{path}: the model was trained on {cfg.H}x{cfg.W} images, not {image_size}x{image_size}")
    msg = message if message is not None else st["message"]
    if msg is not None:
        msg = check_messages(msg, cfg.n_bits, name=f"{path}: message")[0]
    model = WatermarkModel(cfg, message=msg, build_encoder=st.get("encoder") is not None)
    try:
        if st.get("encoder") is not None:
            model.encoder.load_state_dict(st["encoder"])
        model.decoder.load_state_dict(st["decoder"])
        if st.get("discriminator") is not None:
            disc = Discriminator(cfg)
            disc.load_state_dict(st["discriminator"])
            model.discriminator = disc.eval()
    except RuntimeError as e:
        raise ValueError(f"{path}: state dict does not fit the stored HiddenConfig: {e}") from None
    model.clean_bit_acc = None if st["clean_bit_acc"] is None else float(st["clean_bit_acc"])
    model.train_info = dict(st.get("train_info") or {})
    model.role = st.get("role", "")
    model.source = str(path)
    return model.to(device).eval()


class DecoderCheckError(ValueError):
    """A target or surrogate decoder reads its own watermark too poorly to attack (voids evasion numbers)."""

    def __init__(self, message: str, accuracies: dict[str, float]) -> None:
        super().__init__(message)
        self.accuracies = accuracies


@torch.no_grad()
def check_decoders(models: dict[str, WatermarkModel], covers: Tensor, min_bit_acc: float = 0.9,
                   batch_size: int = 256) -> dict[str, float]:
    """Measure each model's clean bit accuracy again before any attack step.

    Every model with an encoder embeds its own message into ``covers`` (``[N,3,H,W]`` in ``[-1,1]``,
    resized per model when sizes differ is *not* done: sizes must match) and decodes it; a
    decode-only model falls back to its stored ``clean_bit_acc``.

    Returns:
        ``{name: accuracy}``.

    Raises:
        DecoderCheckError: some model is below ``min_bit_acc`` (the message names each failing
            file, its accuracy and the threshold); its ``accuracies`` attribute holds all values.
        ValueError: ``min_bit_acc`` outside [0, 1], or a model with neither an encoder nor a stored value.
    """
    from .train import measure_clean_bit_accuracy

    if not (0.0 <= min_bit_acc <= 1.0):
        raise ValueError(f"min_bit_acc must be in [0, 1], got {min_bit_acc}")
    accs: dict[str, float] = {}
    for name, m in models.items():
        if getattr(m, "encoder", None) is not None and m.message is not None:
            accs[name] = measure_clean_bit_accuracy(m, covers, batch_size=batch_size)
        elif getattr(m, "clean_bit_acc", None) is not None:
            accs[name] = float(m.clean_bit_acc)
        else:
            raise ValueError(f"model {name}: cannot check its decoder (no encoder+message and no stored "
                             "clean_bit_acc); pass watermarked images with known messages or a package checkpoint")
    bad = {k: v for k, v in accs.items() if not v >= min_bit_acc}
    if bad:
        lines = "; ".join(f"{k}: clean bit accuracy {v:.3f} < {min_bit_acc}" for k, v in bad.items())
        raise DecoderCheckError(f"decoder check failed before any attack step ({lines}). A decoder that cannot "
                                "read its own watermark voids every evasion number; retrain it (more epochs) "
                                "or lower --min-bit-acc knowingly", accs)
    return accs


def decoder_check_job(settings: dict[str, Any], seed: int | None, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job of the reproduction: :func:`check_decoders` on the first ``settings["n_images"]`` test
    images for every trained model (``deps``: the training records, each with its ``path``).

    Returns:
        ``{"passed": bool, "accuracies": {name: accuracy}, "min_bit_acc", "error": message or None,
        "sha256": {name: file hash}}``. A failed check is recorded, not raised, so the reproduction can
        write ``results.json`` with every accuracy before it raises :class:`DecoderCheckError`.
    """
    from .data import load_cifar_role

    dev = torch.device(settings.get("device", "cpu"))
    models = {rec["name"]: load_watermark_model(rec["path"], dev) for rec in deps.values()}
    test = load_cifar_role("test", settings["n_images"], seed=0).images.to(dev)
    sha = {rec["name"]: file_sha256(rec["path"]) for rec in deps.values()}
    try:
        accs = check_decoders(models, test, settings["min_bit_acc"])
    except DecoderCheckError as e:
        return {"passed": False, "accuracies": e.accuracies, "min_bit_acc": settings["min_bit_acc"], "error": str(e),
                "sha256": sha}
    return {"passed": True, "accuracies": accs, "min_bit_acc": settings["min_bit_acc"], "error": None, "sha256": sha}

