"""Biphased model parameter smoothing (BMPS, Sec. 4.2; Eq. 4–5).

Classical smoothing against training-time attacks trains K models on K randomised data sets (Eq. 3):
too expensive for PLMs and impossible without the poisoned pre-training data. BMPS instead puts
Gaussian noise on the parameters of the **top H layers** (plus the classification head), in two
phases:

1. *Fine-tuning phase* (Eq. 4, reconstructed) — :func:`bmps_finetune`: ordinary fine-tuning on the
   clean downstream set with the gradient norm clipped to ρ (``clip_norm``) and, at every step, the
   top-H parameters perturbed by ε ~ N(0, σ²I). Default ``noise="weights"``: the loss and gradient of
   the step are taken at θ + ε and the update is applied to θ (the model learns to be accurate under
   the same noise its inference copies get). Variant ``noise="gradient"``: DP-SGD-like, the clipped
   gradient of the top-H parameters gets N(0, σ²I) added before the optimiser step.
2. *Inference phase* (Eq. 5) — :func:`sample_parameter_copies`: K copies θ̃_k = θ_F + ε_k, ε_k ~ N(0, σ²I)
   on the top-H parameters only (lower layers shared). Copies are stored as top-H deltas; a model
   plus K deltas is all that is kept in memory, and for very large models the deltas can be
   regenerated from per-copy seeds instead of stored (``materialize=False``).

σ is the **standard deviation** (the sources say "noise variance 0.01"; see README deviations).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

__all__ = ["BMPSConfig", "ParameterCopies", "sample_parameter_copies", "bmps_finetune", "train_classifier"]

log = logging.getLogger(__name__)


def _finite(name: str, v: float, *, lo: float | None = None, hi: float | None = None,
            lo_open: bool = False, hi_open: bool = False) -> None:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise ValueError(f"{name} must be {'<' if hi_open else '<='} {hi}, got {v!r}")


@dataclass
class BMPSConfig:
    """BMPS fine-tuning (phase 1) and copy sampling (phase 2) settings.

    Defaults are the paper's where it gives them (K = 20, H = 10, σ = 0.01) and ours otherwise
    [reconstructed]: ρ = 1.0, AdamW with lr 2e-5 (a BERT-scale rate; the CPU presets use 1e-3).
    """

    top_layers: int = 10
    """H: number of top encoder layers perturbed (plus the head). Paper: 10; tiny encoder: 1."""
    sigma: float = 0.01
    """σ: standard deviation of the Gaussian parameter noise (paper "0.01"). 0 disables BMPS."""
    clip_norm: float = 1.0
    """ρ: gradient-norm bound of the clipped updates (reconstructed default)."""
    lr: float = 2e-5
    """AdamW learning rate of the clean fine-tuning."""
    epochs: int = 1
    """Epochs over the clean fine-tuning set."""
    batch_size: int = 32
    """Mini-batch size."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    noise: Literal["weights", "gradient"] = "weights"
    """Where the phase-1 noise goes: ``weights`` (loss at θ + ε, default) or ``gradient`` (DP-SGD-like)."""
    num_copies: int = 20
    """K: parameter copies drawn at inference (paper: 20)."""
    mask_rate: float = 0.0
    """Probability of replacing a training token by the mask token (0 = plain fine-tuning)."""
    seed: int = 0
    """Seed of data order and noise."""

    def __post_init__(self) -> None:
        if int(self.top_layers) != self.top_layers or self.top_layers < 0:
            raise ValueError(f"top_layers (H) must be an integer >= 0, got {self.top_layers!r}")
        _finite("sigma", self.sigma, lo=0.0)
        _finite("clip_norm", self.clip_norm, lo=0.0, lo_open=True)
        _finite("lr", self.lr, lo=0.0, lo_open=True)
        _finite("weight_decay", self.weight_decay, lo=0.0)
        _finite("mask_rate", self.mask_rate, lo=0.0, hi=1.0, hi_open=True)
        for f in ("epochs", "batch_size", "num_copies"):
            if int(getattr(self, f)) != getattr(self, f) or getattr(self, f) < 1:
                raise ValueError(f"{f} must be an integer >= 1, got {getattr(self, f)!r}")
        if self.noise not in ("weights", "gradient"):
            raise ValueError(f"noise must be 'weights' or 'gradient', got {self.noise!r}")


# --------------------------------------------------------------------------------------------
# phase 2: parameter copies
# --------------------------------------------------------------------------------------------


class ParameterCopies:
    """K noisy copies of a model's top-H parameters, stored as deltas (Eq. 5).

    Attributes:
        k: number of copies K.
        sigma: noise std σ.
        top_layers: H.
        names: the perturbed parameter names (top-H layers, final norm, head).
        deltas: ``{name: float[K, *shape]}`` when materialised, else ``None`` (regenerated from
            ``seed`` on demand: memory O(1) in K).
    """

    def __init__(self, names: Sequence[str], k: int, sigma: float, top_layers: int, seed: int,
                 deltas: dict[str, torch.Tensor] | None, shapes: dict[str, tuple[int, ...]]):
        self.names, self.k, self.sigma, self.top_layers, self.seed = list(names), int(k), float(sigma), \
            int(top_layers), int(seed)
        self.deltas, self.shapes = deltas, shapes
        self._stacked_cache: tuple[int, dict[str, torch.Tensor]] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored deltas (0 when they are regenerated from seeds)."""
        if self.deltas is None:
            return 0
        return sum(t.numel() * t.element_size() for t in self.deltas.values())

    @property
    def num_parameters(self) -> int:
        """Number of perturbed scalars per copy."""
        return int(sum(math.prod(s) for s in self.shapes.values()))

    def delta(self, k: int, name: str, like: torch.Tensor) -> torch.Tensor:
        """ε_k for parameter ``name`` (shape and dtype of ``like``)."""
        if self.deltas is not None:
            return self.deltas[name][k].to(like.device, like.dtype)
        if self.sigma == 0:
            return torch.zeros_like(like)
        g = torch.Generator(device=like.device)
        g.manual_seed((self.seed * 1_000_003 + k * 7_919 + self.names.index(name) * 104_729) % (2**63))
        return (torch.randn(like.shape, generator=g, device=like.device, dtype=torch.float32) * self.sigma).to(like.dtype)

    def stacked_parameters(self, clf) -> dict[str, torch.Tensor]:
        """``{name: θ_F[name] + ε_k for k in 0..K−1}`` as ``[K, *shape]`` tensors (cached per model state)."""
        params = dict(clf.module.named_parameters())
        key = hash(tuple((n, params[n].data_ptr(), params[n]._version) for n in self.names))
        if self._stacked_cache is not None and self._stacked_cache[0] == key:
            return self._stacked_cache[1]
        out = {}
        for n in self.names:
            p = params[n].detach()
            if self.deltas is not None:
                out[n] = p.unsqueeze(0) + self.deltas[n].to(p.device, p.dtype)
            else:
                out[n] = torch.stack([p + self.delta(k, n, p) for k in range(self.k)])
        self._stacked_cache = (key, out)
        return out

    @contextlib.contextmanager
    def applied(self, clf) -> Iterator:
        """Context manager yielding ``apply(k)``, which writes θ_F + ε_k into ``clf.module`` in place.

        The original top-H values are kept (one extra copy of the top-H parameters only) and
        restored bit-exactly on exit.
        """
        params = dict(clf.module.named_parameters())
        missing = [n for n in self.names if n not in params]
        if missing:
            raise ValueError(f"the model has no parameter(s) {missing[:3]} of these copies")
        orig = {n: params[n].detach().clone() for n in self.names}

        def apply(k: int) -> None:
            if not 0 <= k < self.k:
                raise IndexError(f"copy index {k} outside [0, {self.k})")
            with torch.no_grad():
                for n in self.names:
                    params[n].copy_(orig[n] + self.delta(k, n, orig[n]))

        try:
            yield apply
        finally:
            with torch.no_grad():
                for n in self.names:
                    params[n].copy_(orig[n])

    def describe(self) -> dict:
        return {"k": self.k, "sigma": self.sigma, "top_layers": self.top_layers, "seed": self.seed,
                "num_parameters_per_copy": self.num_parameters, "delta_bytes": self.nbytes,
                "materialized": self.deltas is not None}


def sample_parameter_copies(model, k: int = 20, sigma: float = 0.01, top_layers: int = 10, seed: int = 0,
                            materialize: bool | None = None) -> ParameterCopies:
    """Draw K copies θ̃_k = θ_F + ε_k, ε_k ~ N(0, σ²I) on the top-H layers and head (Eq. 5).

    Args:
        model: a :class:`~iclr25.frs.models.TorchTextClassifier` (tiny encoder, HF adapter, MiniLM).
        k: number of copies K >= 1 (paper: 20).
        sigma: noise std σ >= 0 (paper: 0.01). σ = 0 gives K copies bit-identical to θ_F.
        top_layers: H, 0 <= H <= model depth (0 = head only).
        seed: seed of the noise (torch generator; independent of the global RNG).
        materialize: store the deltas (``[K, *shape]`` per parameter); ``None`` = store them when they
            take at most 256 MiB, else regenerate them from per-copy seeds on demand.

    Returns:
        :class:`ParameterCopies`. Parameters below the top-H layers are never touched.

    Raises:
        ValueError: k < 1, σ < 0 or not finite, or ``top_layers`` above the model's depth (both given).
    """
    if int(k) != k or k < 1:
        raise ValueError(f"k (number of parameter copies K) must be an integer >= 1, got {k!r}")
    _finite("sigma", sigma, lo=0.0)
    names = model.top_parameter_names(int(top_layers))  # raises on top_layers > depth
    params = dict(model.module.named_parameters())
    shapes = {n: tuple(params[n].shape) for n in names}
    total = sum(math.prod(s) for s in shapes.values()) * k * 4
    if materialize is None:
        materialize = total <= 256 * 2**20
    deltas = None
    if materialize:
        g = torch.Generator().manual_seed(int(seed))
        deltas = {}
        for n in names:
            p = params[n]
            d = torch.randn((k, *p.shape), generator=g, dtype=torch.float32) * float(sigma)
            deltas[n] = d.to(p.device)
    return ParameterCopies(names, k, sigma, top_layers, seed, deltas, shapes)


# --------------------------------------------------------------------------------------------
# phase 1: (noisy, clipped) fine-tuning
# --------------------------------------------------------------------------------------------


def _mask_tokens(batch: list[list[str]], rate: float, mask_token: str, rng: np.random.Generator) -> list[list[str]]:
    if rate <= 0:
        return batch
    out = []
    for toks in batch:
        m = rng.random(len(toks)) < rate
        out.append([mask_token if mi else t for t, mi in zip(toks, m)])
    return out


def _data_digest(texts: Sequence[Sequence[str]], labels: Sequence[int]) -> str:
    import hashlib

    h = hashlib.sha256()
    for t, y in zip(texts, labels):
        h.update(("\x1f".join(t) + "\x1e" + str(int(y)) + "\n").encode("utf-8"))
    return h.hexdigest()


def train_classifier(clf, texts: Sequence[Sequence[str]], labels: Sequence[int], *, epochs: int = 1,
                     lr: float = 1e-3, batch_size: int = 32, clip_norm: float | None = 1.0,
                     weight_decay: float = 0.0, sigma: float = 0.0, top_layers: int = 0,
                     noise: str = "weights", mask_rate: float = 0.0, seed: int = 0,
                     out: str | Path | None = None, resume: bool = False, quiet: bool = False,
                     desc: str = "train") -> list[dict]:
    """Train ``clf.module`` with cross-entropy (AdamW), optionally with BMPS noise; in place.

    Args:
        clf: a :class:`~iclr25.frs.models.TorchTextClassifier`.
        texts: token lists; labels: class indices (same length, each in [0, C)).
        epochs, lr, batch_size, weight_decay: optimiser settings.
        clip_norm: ρ, the global gradient-norm bound (``None`` = no clipping).
        sigma, top_layers, noise: BMPS phase-1 noise (σ = 0: ordinary fine-tuning).
        mask_rate: token-masking augmentation probability.
        seed: data order (a fresh permutation per epoch) and noise.
        out: folder for ``checkpoint/`` (after every epoch) and ``metrics.jsonl``; with ``resume`` the
            run continues after the last finished epoch.

    Returns:
        Per-epoch records ``{"epoch", "loss", "train_acc", "steps"}``.

    Raises:
        ValueError: mismatched lengths, labels outside [0, C), an empty text; with ``resume``: no
            checkpoint in ``out``, an unreadable (corrupt) checkpoint, one of another model, or settings
            (lr, batch size, clip, σ, H, noise, masking, seed, the data's digest) that differ from the
            checkpoint's — only ``epochs`` may change.
    """
    from iclr25.core.progress import progress

    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    if len(texts) == 0:
        raise ValueError("no training texts")
    y_all = np.asarray(labels, dtype=np.int64)
    if y_all.min() < 0 or y_all.max() >= clf.num_classes:
        raise ValueError(f"labels must be in [0, {clf.num_classes}), got range [{y_all.min()}, {y_all.max()}]")
    empty = [i for i, t in enumerate(texts) if len(t) == 0]
    if empty:
        raise ValueError(f"text {empty[0]} is empty after tokenisation")
    module = clf.module
    params = dict(module.named_parameters())
    top = clf.top_parameter_names(top_layers) if sigma > 0 else []
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)
    history: list[dict] = []
    start_epoch = 0
    ckpt = Path(out) / "checkpoint" if out is not None else None
    # everything but the number of epochs must match for --resume to continue the same run
    settings = {"lr": lr, "batch_size": batch_size, "clip_norm": clip_norm, "weight_decay": weight_decay,
                "sigma": sigma, "top_layers": top_layers if sigma > 0 else None, "noise": noise if sigma > 0 else None,
                "mask_rate": mask_rate, "seed": seed, "n_texts": len(texts),
                "data_sha256": _data_digest(texts, labels)}
    if resume:
        if ckpt is None or not (ckpt / "state.json").is_file():
            raise ValueError(f"--resume: no checkpoint in {ckpt} (run without --resume first)")
        from safetensors.torch import load_file

        try:
            st = json.loads((ckpt / "state.json").read_text())
            start_epoch, history = int(st["epoch"]), list(st["history"])
            state = load_file(str(ckpt / "model.safetensors"))
            opt_state = torch.load(ckpt / "optimizer.pt", weights_only=True)
        except Exception as e:  # corrupt / truncated files: a clear error, not a traceback
            raise ValueError(f"--resume: the checkpoint in {ckpt} cannot be read ({type(e).__name__}: {e}); "
                             "delete the folder or choose another --out (a run without --resume is refused while it is there)") from e
        old = st.get("settings")
        if old is not None:
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            if diff:
                raise ValueError("--resume: the settings differ from the checkpoint's in "
                                 + ", ".join(f"{k} (checkpoint {old.get(k)!r}, now {settings.get(k)!r})" for k in diff)
                                 + "; only --epochs may change when resuming (use another --out for a new run)")
        if start_epoch > epochs:
            raise ValueError(f"--resume: the checkpoint already has {start_epoch} epochs but --epochs is {epochs}")
        try:
            module.load_state_dict(state)
            opt.load_state_dict(opt_state)
        except (RuntimeError, ValueError, KeyError) as e:
            raise ValueError(f"--resume: the checkpoint in {ckpt} does not fit this model ({e}); "
                             "use the same --model as the first run") from e
        log.info("resumed %s after epoch %d", desc, start_epoch)
    n = len(texts)
    steps_per_epoch = math.ceil(n / batch_size)
    device = clf.device
    module.train()
    bar = progress(range(start_epoch * steps_per_epoch, epochs * steps_per_epoch), desc=desc, unit="step",
                   total=(epochs - start_epoch) * steps_per_epoch) if not quiet else None
    it = iter(bar) if bar is not None else None
    for epoch in range(start_epoch, epochs):
        rng = np.random.default_rng([seed, epoch])
        gen = torch.Generator(device=device).manual_seed(seed * 7_919 + epoch)
        torch.manual_seed(seed * 104_729 + epoch)  # dropout: the run is reproducible (and resumable)
        order = rng.permutation(n)
        tot_loss, correct = 0.0, 0
        for s in range(steps_per_epoch):
            idx = order[s * batch_size:(s + 1) * batch_size]
            batch = _mask_tokens([list(texts[i]) for i in idx], mask_rate, clf.mask_token, rng)
            y = torch.as_tensor(y_all[idx], device=device)
            inputs = clf.encode(batch)
            saved = {}
            if top and noise == "weights":
                with torch.no_grad():
                    for nme in top:
                        p = params[nme]
                        saved[nme] = p.detach().clone()
                        p.add_(torch.randn(p.shape, generator=gen, device=device, dtype=p.dtype) * sigma)
            logits = clf.logits(inputs)
            loss = torch.nn.functional.cross_entropy(logits.float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if saved:
                with torch.no_grad():
                    for nme, v in saved.items():
                        params[nme].copy_(v)
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(module.parameters(), clip_norm)
            if top and noise == "gradient":
                with torch.no_grad():
                    for nme in top:
                        p = params[nme]
                        if p.grad is not None:
                            p.grad.add_(torch.randn(p.shape, generator=gen, device=device, dtype=p.dtype) * sigma)
            opt.step()
            tot_loss += float(loss.detach()) * len(idx)
            correct += int((logits.argmax(-1) == y).sum())
            if it is not None:
                next(it, None)
        rec = {"epoch": epoch + 1, "loss": tot_loss / n, "train_acc": 100.0 * correct / n, "steps": steps_per_epoch}
        if not math.isfinite(rec["loss"]):
            raise FloatingPointError(f"{desc}: the training loss became {rec['loss']} in epoch {epoch + 1} "
                                     "(lower lr or sigma)")
        history.append(rec)
        log.info("%s epoch %d: loss %.4f, train acc %.1f%%", desc, epoch + 1, rec["loss"], rec["train_acc"])
        if ckpt is not None:
            from safetensors.torch import save_file

            ckpt.mkdir(parents=True, exist_ok=True)
            save_file({k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()},
                      str(ckpt / "model.safetensors"))
            torch.save(opt.state_dict(), ckpt / "optimizer.pt")
            (ckpt / "state.json").write_text(json.dumps({"epoch": epoch + 1, "history": history,
                                                         "settings": settings}))
            with open(Path(out) / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
    if bar is not None:
        bar.close()
    module.eval()
    return history


def bmps_finetune(model, texts: Sequence[Sequence[str]], labels: Sequence[int], config: BMPSConfig | None = None,
                  *, out: str | Path | None = None, resume: bool = False, quiet: bool = False) -> list[dict]:
    """BMPS phase 1 (Eq. 4): clean fine-tuning with clipped updates and top-H parameter noise; in place.

    Args:
        model: a :class:`~iclr25.frs.models.TorchTextClassifier` (possibly backdoored in pre-training).
        texts, labels: the clean downstream set D_F (token lists, class indices).
        config: :class:`BMPSConfig` (σ = 0 gives the "−BMPS" ablation: ordinary clipped fine-tuning).
        out, resume: checkpoint folder and resumption (see :func:`train_classifier`); ``out/bmps.json``
            records the config.

    Returns:
        Per-epoch training records.

    Raises:
        ValueError: ``top_layers`` above the model's depth (both given), bad data (see
            :func:`train_classifier`).
    """
    cfg = config or BMPSConfig()
    model.top_parameter_names(cfg.top_layers)  # validates H against the depth
    hist = train_classifier(model, texts, labels, epochs=cfg.epochs, lr=cfg.lr, batch_size=cfg.batch_size,
                            clip_norm=cfg.clip_norm, weight_decay=cfg.weight_decay, sigma=cfg.sigma,
                            top_layers=cfg.top_layers, noise=cfg.noise, mask_rate=cfg.mask_rate, seed=cfg.seed,
                            out=out, resume=resume, quiet=quiet, desc="bmps fine-tune")
    if out is not None:  # after training: a refused --resume leaves the first run's record intact
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "bmps.json").write_text(json.dumps(asdict(cfg), indent=2))
    return hist
