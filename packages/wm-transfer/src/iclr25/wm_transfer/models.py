"""HiDDeN-style watermarking models (Zhu et al. 2018; spec "Surrogate / target watermarking models").

Images are ``[B, 3, H, W]`` float tensors in ``[-1, 1]``; messages ``[B, n]`` in ``{0, 1}`` (float).
A :class:`WatermarkModel` pairs an encoder ``E(x, w) -> x_w`` with a decoder ``D(x) -> [B, n]``
(real-valued; rounded and clipped to bits by :func:`iclr25.wm_transfer.detect.decode_bits`).

Module names follow ``ando-khachatryan/HiDDeN`` (``conv_layers``, ``after_concat_layer``,
``final_layer``, ``layers``, ``linear``; every block a ``ConvBNRelu`` holding ``layers``), so a state
dict of that code loads into :class:`HiddenEncoder` / :class:`HiddenDecoder` with
``message_embed="broadcast"``, ``decoder_head="pool"``, ``residual=False``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "HiddenConfig",
    "ConvBNRelu",
    "HiddenEncoder",
    "HiddenDecoder",
    "ResNetDecoder",
    "Discriminator",
    "WatermarkModel",
    "CallableDecoder",
    "build_decoder",
    "check_images",
    "check_messages",
]


@dataclass(frozen=True)
class HiddenConfig:
    """Architecture of a HiDDeN-style watermarking model.

    Defaults are the spec's tiny CPU-scale model (32×32, 20 bits) with the two [design] changes the
    issue's probe measured as necessary at this scale (message through a dense layer into a spatial map;
    decoder keeps its spatial layout into the linear layer) and the residual encoder.
    :meth:`official` gives the paper code's 128×128 configuration.

    Attributes:
        H, W: image height and width in pixels.
        n_bits: message length n (bits).
        enc_blocks: ConvBNReLU blocks before the concatenation (official: 4; 7 for a ResNet target).
        enc_ch: encoder channels (official: 64).
        dec_blocks: ConvBNReLU blocks of the CNN decoder before the ``ch → n`` block (official: 7).
        dec_ch: decoder channels (official: 64).
        dec_strides: how many of the first decoder blocks use stride 2 (spec tiny model: 2; official: 0).
        decoder: ``"cnn"`` (HiDDeN) or ``"resnet"`` (ResNet-18-style, :class:`ResNetDecoder`).
        message_embed: ``"broadcast"`` (official: the message as n constant channels concatenated to
            the features) or ``"spatial"`` ([design]: ``Linear(n → msg_ch·8·8)`` reshaped to an 8×8 map,
            upsampled to H×W, StegaStamp-style).
        msg_ch: channels of the spatial message map.
        msg_grid: side of the spatial message map before upsampling (8).
        decoder_head: ``"pool"`` (official: global average pool, ``Linear(n → n)``) or ``"flatten"``
            ([design]: the last ``n×h×w`` features flattened into ``Linear(n·h·w → n)``).
        residual: [design, allowed simplification] ``x_w = clamp(x + s·E(x, w), −1, 1)`` instead of the
            official "encoder output is the image".
        residual_scale: the scale ``s`` of the residual encoder (fixed).
        use_discriminator: train with the adversarial term (official: on, weight 1e-3; CPU: off).
        disc_blocks, disc_ch: discriminator blocks and channels (official: 3, 64).
    """

    H: int = 32
    W: int = 32
    n_bits: int = 20
    enc_blocks: int = 3
    enc_ch: int = 32
    dec_blocks: int = 4
    dec_ch: int = 32
    dec_strides: int = 2
    decoder: Literal["cnn", "resnet"] = "cnn"
    message_embed: Literal["broadcast", "spatial"] = "spatial"
    msg_ch: int = 4
    msg_grid: int = 8
    decoder_head: Literal["pool", "flatten"] = "flatten"
    residual: bool = True
    residual_scale: float = 0.1
    use_discriminator: bool = False
    disc_blocks: int = 3
    disc_ch: int = 32

    def __post_init__(self) -> None:
        for f in ("H", "W", "n_bits", "enc_blocks", "enc_ch", "dec_blocks", "dec_ch", "msg_ch", "msg_grid",
                  "disc_blocks", "disc_ch"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"HiddenConfig.{f} must be a positive integer, got {v!r}")
        if not isinstance(self.dec_strides, int) or not 0 <= self.dec_strides <= self.dec_blocks:
            raise ValueError(f"HiddenConfig.dec_strides must be in [0, dec_blocks={self.dec_blocks}], "
                             f"got {self.dec_strides!r}")
        if self.decoder not in ("cnn", "resnet"):
            raise ValueError(f"HiddenConfig.decoder must be 'cnn' or 'resnet', got {self.decoder!r}")
        if self.message_embed not in ("broadcast", "spatial"):
            raise ValueError(f"HiddenConfig.message_embed must be 'broadcast' or 'spatial', got {self.message_embed!r}")
        if self.decoder_head not in ("pool", "flatten"):
            raise ValueError(f"HiddenConfig.decoder_head must be 'pool' or 'flatten', got {self.decoder_head!r}")
        if not (math.isfinite(self.residual_scale) and self.residual_scale > 0):
            raise ValueError(f"HiddenConfig.residual_scale must be finite and > 0, got {self.residual_scale}")
        if self.decoder_head == "flatten":
            h, w = self.decoder_grid
            if h < 1 or w < 1:
                raise ValueError(f"HiddenConfig: {self.dec_strides} stride-2 blocks leave no pixels of a "
                                 f"{self.H}x{self.W} image; lower dec_strides")

    @property
    def decoder_grid(self) -> tuple[int, int]:
        """Spatial size of the CNN decoder's last feature map (each stride-2 block halves, rounding up)."""
        h, w = self.H, self.W
        for _ in range(self.dec_strides):
            h, w = (h + 1) // 2, (w + 1) // 2
        return h, w

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HiddenConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError`` naming them."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"HiddenConfig: unknown key(s) {unknown}; valid: {sorted(names)}")
        return cls(**d)

    @classmethod
    def official(cls, n_bits: int = 30, decoder: Literal["cnn", "resnet"] = "cnn") -> HiddenConfig:
        """The paper code's configuration: 128×128, 64 channels, 4 encoder blocks (7 with a ResNet
        decoder), 7 decoder blocks, broadcast message, pooled decoder, no residual, discriminator on."""
        return cls(H=128, W=128, n_bits=n_bits, enc_blocks=7 if decoder == "resnet" else 4, enc_ch=64,
                   dec_blocks=7, dec_ch=64, dec_strides=0, decoder=decoder, message_embed="broadcast",
                   decoder_head="pool", residual=False, use_discriminator=True, disc_blocks=3, disc_ch=64)


class ConvBNRelu(nn.Module):
    """``Conv3×3(c_in → c_out, stride, padding 1) → BatchNorm2d → ReLU`` (HiDDeN's block)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, padding=1), nn.BatchNorm2d(c_out),
                                    nn.ReLU(inplace=True))

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


def check_images(x: Any, cfg: HiddenConfig | None = None, *, name: str = "images") -> Tensor:
    """Validate a batch of images in ``[-1, 1]``.

    Args:
        x: ``[B, 3, H, W]`` float tensor in ``[-1, 1]``.
        cfg: when given, ``H×W`` must equal ``cfg.H×cfg.W``.

    Raises:
        ValueError: not a tensor, not 4-D, not 3 channels, wrong size (both sizes named), non-finite
            values, or values outside ``[-1, 1]`` (uint8 ``0..255`` data get a hint).

    Warns:
        UserWarning: no negative value at all (``[0, 1]``-scaled images; the fix ``2 * x - 1`` is named).
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor [B,3,H,W] in [-1,1], got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"{name} must be 4-D [B,3,H,W], got shape {tuple(x.shape)}")
    if x.shape[1] != 3:
        raise ValueError(f"{name} must have 3 channels (RGB) in dim 1, got shape {tuple(x.shape)}")
    if cfg is not None and (x.shape[2], x.shape[3]) != (cfg.H, cfg.W):
        raise ValueError(f"{name} are {x.shape[2]}x{x.shape[3]} but the model's HiddenConfig expects "
                         f"{cfg.H}x{cfg.W}; resize the images (e.g. --image-size {cfg.H})")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 images)")
    if not x.is_floating_point():
        raise ValueError(f"{name} have dtype {x.dtype}; expected float in [-1,1] (uint8 images: x/127.5 - 1)")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contain NaN or inf values")
    lo, hi = float(x.min()), float(x.max())
    if lo < -1.0 - 1e-4 or hi > 1.0 + 1e-4:
        hint = " (they look like uint8 0..255 values: use x/127.5 - 1)" if hi > 2 else ""
        raise ValueError(f"{name} have values in [{lo:.3g}, {hi:.3g}], outside [-1, 1]{hint}")
    if lo >= 0.0 and x[0].numel() >= 3 * 8 * 8:
        warnings.warn(f"{name} have no negative value (range [{lo:.3g}, {hi:.3g}]): they look like [0, 1]-scaled "
                      "images, but the package expects [-1, 1]; convert with 2 * x - 1", UserWarning, stacklevel=2)
    return x


def check_messages(w: Any, n_bits: int, batch: int | None = None, *, name: str = "messages") -> Tensor:
    """Validate messages ``[B, n_bits]`` with entries in ``{0, 1}``; returns them as float.

    Raises:
        ValueError: wrong shape or length (naming n_bits), or entries outside {0, 1}.
    """
    if not isinstance(w, Tensor):
        w = torch.as_tensor(w)
    if w.dim() == 1:
        w = w[None]
    if w.dim() != 2 or w.shape[1] != n_bits:
        raise ValueError(f"{name} must be [B, n_bits={n_bits}], got shape {tuple(w.shape)}")
    if batch is not None and w.shape[0] not in (1, batch):
        raise ValueError(f"{name} has {w.shape[0]} rows for {batch} images (give one row or one per image)")
    wf = w.float()
    if not bool(((wf == 0) | (wf == 1)).all()):
        raise ValueError(f"{name} entries must be 0 or 1")
    if batch is not None and wf.shape[0] == 1:
        wf = wf.expand(batch, -1)
    return wf


class HiddenEncoder(nn.Module):
    """HiDDeN encoder ``E(x, w)``.

    ``enc_blocks`` ConvBNReLU blocks on the image, concatenation ``[message, features, image]``
    (message broadcast to ``n`` constant channels, or a learned spatial map of ``msg_ch`` channels),
    one ConvBNReLU, a 1×1 conv to 3 channels. Official: the output is the watermarked image; with
    ``residual`` it is ``clamp(x + s·E(x, w), −1, 1)``.

    Shapes: ``x [B,3,H,W]`` in ``[-1,1]``, ``w [B,n]`` in ``{0,1}`` → ``x_w [B,3,H,W]``.
    """

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layers = [ConvBNRelu(3, cfg.enc_ch)] + [ConvBNRelu(cfg.enc_ch, cfg.enc_ch) for _ in range(cfg.enc_blocks - 1)]
        self.conv_layers = nn.Sequential(*layers)
        m_ch = cfg.n_bits if cfg.message_embed == "broadcast" else cfg.msg_ch
        if cfg.message_embed == "spatial":
            self.message_layer = nn.Linear(cfg.n_bits, cfg.msg_ch * cfg.msg_grid * cfg.msg_grid)
        self.after_concat_layer = ConvBNRelu(cfg.enc_ch + 3 + m_ch, cfg.enc_ch)
        self.final_layer = nn.Conv2d(cfg.enc_ch, 3, kernel_size=1)

    def message_map(self, w: Tensor) -> Tensor:
        """``[B, n]`` → ``[B, C_m, H, W]``: broadcast (official) or dense → 8×8 → bilinear upsampling."""
        cfg = self.cfg
        if cfg.message_embed == "broadcast":
            return w[:, :, None, None].expand(-1, -1, cfg.H, cfg.W)
        m = self.message_layer(2 * w - 1).view(w.shape[0], cfg.msg_ch, cfg.msg_grid, cfg.msg_grid)
        return F.interpolate(m, size=(cfg.H, cfg.W), mode="bilinear", align_corners=False)

    def forward(self, x: Tensor, w: Tensor) -> Tensor:
        feats = self.conv_layers(x)
        h = self.after_concat_layer(torch.cat([self.message_map(w), feats, x], dim=1))
        out = self.final_layer(h)
        if self.cfg.residual:
            return (x + self.cfg.residual_scale * out).clamp(-1.0, 1.0)
        return out


class HiddenDecoder(nn.Module):
    """HiDDeN CNN decoder ``D(x) → [B, n]`` (real-valued).

    ``dec_blocks`` ConvBNReLU blocks (the first ``dec_strides`` with stride 2), ``ConvBNReLU(ch → n)``,
    then global average pooling + ``Linear(n → n)`` (official) or flattening + ``Linear(n·h·w → n)``.
    """

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layers: list[nn.Module] = []
        for i in range(cfg.dec_blocks):
            layers.append(ConvBNRelu(3 if i == 0 else cfg.dec_ch, cfg.dec_ch, stride=2 if i < cfg.dec_strides else 1))
        layers.append(ConvBNRelu(cfg.dec_ch, cfg.n_bits))
        if cfg.decoder_head == "pool":
            layers.append(nn.AdaptiveAvgPool2d((1, 1)))
            self.layers = nn.Sequential(*layers)
            self.linear = nn.Linear(cfg.n_bits, cfg.n_bits)
        else:
            self.layers = nn.Sequential(*layers)
            h, w = cfg.decoder_grid
            self.linear = nn.Linear(cfg.n_bits * h * w, cfg.n_bits)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.layers(x).flatten(1))


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetDecoder(nn.Module):
    """ResNet-18-style decoder (spec: the target's "resnet" decoder): 3×3 stem, four stages of two basic
    blocks (widths ``c, 2c, 4c, 8c`` with ``c = dec_ch``, strides 1, 2, 2, 2), global average pool,
    ``Linear(8c → n)``. Shapes: ``[B,3,H,W] → [B,n]``."""

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.dec_ch
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        blocks: list[nn.Module] = []
        c_in = c
        for i, width in enumerate((c, 2 * c, 4 * c, 8 * c)):
            for j in range(2):
                blocks.append(_BasicBlock(c_in, width, 2 if (i > 0 and j == 0) else 1))
                c_in = width
        self.blocks = nn.Sequential(*blocks)
        self.linear = nn.Linear(c_in, cfg.n_bits)

    def forward(self, x: Tensor) -> Tensor:
        h = self.blocks(self.stem(x))
        return self.linear(F.adaptive_avg_pool2d(h, 1).flatten(1))


class Discriminator(nn.Module):
    """HiDDeN discriminator: ``disc_blocks`` stride-2 ConvBNReLU blocks, global average pool,
    ``Linear(ch → 1)``; returns logits ``[B, 1]`` (cover vs. watermarked)."""

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        layers = [ConvBNRelu(3, cfg.disc_ch, stride=2)]
        layers += [ConvBNRelu(cfg.disc_ch, cfg.disc_ch, stride=2) for _ in range(cfg.disc_blocks - 1)]
        layers.append(nn.AdaptiveAvgPool2d((1, 1)))
        self.before_linear = nn.Sequential(*layers)
        self.linear = nn.Linear(cfg.disc_ch, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.before_linear(x).flatten(1))


def build_decoder(cfg: HiddenConfig) -> nn.Module:
    """:class:`HiddenDecoder` or :class:`ResNetDecoder` per ``cfg.decoder``."""
    return ResNetDecoder(cfg) if cfg.decoder == "resnet" else HiddenDecoder(cfg)


class WatermarkModel(nn.Module):
    """An encoder/decoder pair with the owner's message.

    Args:
        cfg: the architecture.
        encoder: an encoder module (default: built from ``cfg``); may be ``None`` for decode-only models.
        decoder: a decoder module (default: built from ``cfg``).
        message: the owner's watermark ``w`` ``[n]`` in {0,1} (optional; set by training).
        clean_bit_acc: held-out clean bit accuracy measured after training (optional).
    """

    def __init__(self, cfg: HiddenConfig, encoder: nn.Module | None = None, decoder: nn.Module | None = None,
                 message: Tensor | None = None, clean_bit_acc: float | None = None, *,
                 build_encoder: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = encoder if encoder is not None else (HiddenEncoder(cfg) if build_encoder else None)
        self.decoder = decoder if decoder is not None else build_decoder(cfg)
        self.register_buffer("message", None if message is None else check_messages(message, cfg.n_bits)[0].clone())
        self.clean_bit_acc = clean_bit_acc
        self.source = ""

    @property
    def n_bits(self) -> int:
        return self.cfg.n_bits

    def embed(self, x: Tensor, w: Tensor | None = None) -> Tensor:
        """Watermark images: ``x [B,3,H,W]`` in ``[-1,1]``, ``w [B,n]`` or ``[n]`` in {0,1}
        (default: the owner's message) → ``x_w [B,3,H,W]``.

        Raises:
            ValueError: bad images/messages (see :func:`check_images`, :func:`check_messages`), or no
                encoder / no message.
        """
        if self.encoder is None:
            raise ValueError(f"model {self.source or ''} has no encoder (decode-only); it cannot embed")
        check_images(x, self.cfg)
        if w is None:
            if self.message is None:
                raise ValueError("embed: no message given and the model has no owner's message")
            w = self.message
        w = check_messages(w, self.cfg.n_bits, x.shape[0]).to(x.device)
        return self.encoder(x, w)

    def decode(self, x: Tensor) -> Tensor:
        """Decoder outputs ``D(x)``: ``x [B,3,H,W]`` in ``[-1,1]`` → ``[B, n]`` float (not rounded)."""
        return self.decoder(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.decode(x)


class CallableDecoder(nn.Module):
    """Wrap any callable ``decode(x in [-1,1]) -> [B, n]`` (a user's own decoder) as a model for the
    attack and evaluation.

    The package reads bits as ``round(clip(D(x), 0, 1))`` (threshold 0.5 on ``[0, 1]`` outputs). A decoder
    with another output convention declares it, and :meth:`decode` maps its outputs onto that scale
    (monotone, so gradients keep their direction and bit ``= 1`` exactly when ``out > threshold``):

    * ``output_range=(0, 1)`` (default): probabilities / the package's own HiDDeN outputs;
    * ``output_range=(-inf, inf)``: logits, threshold 0 by default, mapped with ``sigmoid(out - threshold)``;
    * any finite ``(lo, hi)`` (e.g. ``(-1, 1)`` for a tanh/sign decoder), threshold ``(lo + hi) / 2`` by
      default, mapped piecewise-linearly so that ``lo -> 0``, ``threshold -> 0.5``, ``hi -> 1``;
    * a half-open range needs an explicit ``threshold`` and is mapped with ``sigmoid(out - threshold)``.

    On the first call the raw outputs are checked against the declared range (with a tolerance of
    ``range_tolerance`` times its width for a finite range); outside it a ``UserWarning`` names the observed
    range and the fix (e.g. ``output_range=(-inf, inf)`` for logits).

    Raises:
        ValueError: a range with ``lo >= hi`` or NaN bounds, a threshold outside the open range, a half-open
            range without a threshold; (in :meth:`decode`) images of another size than ``H x W`` or an output
            of the wrong shape.
    """

    def __init__(self, fn: Callable[[Tensor], Tensor], n_bits: int, H: int, W: int,
                 message: Tensor | None = None, name: str = "callable", *,
                 output_range: tuple[float, float] = (0.0, 1.0), threshold: float | None = None,
                 range_tolerance: float = 0.25) -> None:
        super().__init__()
        self.fn = fn
        self.cfg = HiddenConfig(H=H, W=W, n_bits=n_bits, decoder_head="pool", dec_strides=0)
        self.register_buffer("message", None if message is None else check_messages(message, n_bits)[0].clone())
        self.clean_bit_acc: float | None = None
        self.source = name
        self.encoder = None
        if isinstance(fn, nn.Module):
            self.inner = fn
        try:
            lo, hi = (float(v) for v in output_range)
        except (TypeError, ValueError):
            raise ValueError(f"output_range must be a pair (lo, hi), got {output_range!r}") from None
        if math.isnan(lo) or math.isnan(hi) or not lo < hi:
            raise ValueError(f"output_range must be (lo, hi) with lo < hi, got {output_range!r}")
        finite = math.isfinite(lo) and math.isfinite(hi)
        if threshold is None:
            if finite:
                threshold = (lo + hi) / 2
            elif lo == -math.inf and hi == math.inf:
                threshold = 0.0
            else:
                raise ValueError(f"output_range {output_range!r} is half-open: give the decision threshold "
                                 "(threshold=...)")
        threshold = float(threshold)
        if not (math.isfinite(threshold) and lo < threshold < hi):
            raise ValueError(f"threshold must be finite and inside output_range {output_range!r}, got {threshold!r}")
        if not (math.isfinite(range_tolerance) and range_tolerance >= 0):
            raise ValueError(f"range_tolerance must be finite and >= 0, got {range_tolerance!r}")
        self.output_range = (lo, hi)
        self.threshold = threshold
        self.range_tolerance = float(range_tolerance)
        self._finite = finite
        self._checked = False

    @property
    def n_bits(self) -> int:
        return self.cfg.n_bits

    def _check_range(self, out: Tensor) -> None:
        self._checked = True
        lo, hi = self.output_range
        o = out.detach()
        if not bool(torch.isfinite(o).all()):
            warnings.warn(f"decoder {self.source} returned NaN/inf outputs on its first call", UserWarning,
                          stacklevel=3)
            return
        tol = self.range_tolerance * (hi - lo) if self._finite else 0.0
        omin, omax = float(o.min()), float(o.max())
        if omin < lo - tol or omax > hi + tol:
            hint = (" (they look like logits: pass output_range=(-inf, inf))"
                    if (lo, hi) == (0.0, 1.0) and omin < 0 < omax else "")
            warnings.warn(f"decoder {self.source} returned values in [{omin:.3g}, {omax:.3g}], outside its declared "
                          f"output_range ({lo:g}, {hi:g}){hint}; bits are read as out > {self.threshold:g}, so they "
                          "may be wrong: declare the decoder's output_range/threshold", UserWarning, stacklevel=3)

    def _to_unit(self, out: Tensor) -> Tensor:
        lo, hi = self.output_range
        t = self.threshold
        if (lo, hi, t) == (0.0, 1.0, 0.5):
            return out
        if not self._finite:
            return torch.sigmoid(out - t)
        below = 0.5 * (out - lo) / (t - lo)
        above = 0.5 + 0.5 * (out - t) / (hi - t)
        return torch.where(out <= t, below, above)

    def decode(self, x: Tensor) -> Tensor:
        """Decoder outputs on the package's ``[0, 1]`` scale (bit = 1 where ``> 0.5``, i.e. where the raw
        output ``> threshold``); ``x [B,3,H,W]`` in ``[-1,1]`` -> ``[B, n]``."""
        if x.dim() == 4 and (x.shape[2], x.shape[3]) != (self.cfg.H, self.cfg.W):
            raise ValueError(f"decoder {self.source} takes {self.cfg.H}x{self.cfg.W} images, got "
                             f"{x.shape[2]}x{x.shape[3]}; resize the images or wrap it with H, W of the images")
        out = self.fn(x)
        if not isinstance(out, Tensor) or out.dim() != 2 or out.shape != (x.shape[0], self.n_bits):
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(f"decoder {self.source} returned {shape}; expected [B={x.shape[0]}, n={self.n_bits}]")
        if not self._checked:
            self._check_range(out)
        return self._to_unit(out)

    def forward(self, x: Tensor) -> Tensor:
        return self.decode(x)
