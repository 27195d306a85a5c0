"""Text classifiers behind the one interface FRS needs: ``predict_proba(list[list[str]]) -> [B, C]``.

* :class:`Vocab` and :class:`TinyEncoder` — the CPU-scale stand-in for a pre-trained LM [design]:
  a word vocabulary (count >= 2 plus ``[PAD] [UNK] [MASK]``), a pre-LN Transformer encoder
  (d = 64, 4 heads, FF 128, 2 layers, learned positions, mean pooling) and a linear head. Its
  top layers can be evaluated for K stacked parameter copies at once (lower layers computed
  once), which is what makes BMPS votes cheap (see ``benchmarks/bench_votes.py``).
* :class:`TorchTextClassifier` — the base of torch-backed classifiers: batching, ``predict_proba``,
  the top-H parameter groups BMPS perturbs, and copies applied in place for any model.
* :class:`TinyClassifier` — vocab + TinyEncoder, saved as ``config.json`` + ``vocab.json`` +
  ``model.safetensors``.
* :class:`CallableClassifier` — wraps any user ``predict_proba`` callable (no parameter copies).
* :func:`check_proba` — validates a model's output (shape, NaN, rows summing to 1).

The Hugging Face adapter (``[hf]`` extra) and MiniLM + head (``[minilm]``) live in :mod:`.hf`.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "PAD", "UNK", "MASK",
    "Vocab",
    "TinyEncoderSpec",
    "TinyEncoder",
    "TorchTextClassifier",
    "TinyClassifier",
    "CallableClassifier",
    "check_proba",
]

log = logging.getLogger(__name__)

PAD, UNK, MASK = "[PAD]", "[UNK]", "[MASK]"


def check_proba(out, batch_size: int, num_classes: int | None = None, *, source: str = "predict_proba") -> np.ndarray:
    """Validate and convert a model's class probabilities to ``float64[B, C]``.

    Raises:
        ValueError: wrong shape (not ``[batch_size, C]`` with C >= 2, or C != num_classes), NaN or
            infinite entries, entries outside [0, 1], or rows not summing to 1 (|sum − 1| > 1e-4;
            pass probabilities, not logits).
    """
    if isinstance(out, torch.Tensor):
        out = out.detach().float().cpu().numpy()
    arr = np.asarray(out, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != batch_size or arr.shape[1] < 2:
        raise ValueError(f"{source} must return an array of shape [B={batch_size}, C>=2], got shape {arr.shape}")
    if num_classes is not None and arr.shape[1] != num_classes:
        raise ValueError(f"{source} returned {arr.shape[1]} classes, expected {num_classes}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.argwhere(~np.isfinite(arr))[0][0])
        raise ValueError(f"{source} returned NaN/inf probabilities (first in row {bad})")
    if np.any(arr < -1e-6) or np.any(arr > 1 + 1e-6):
        raise ValueError(f"{source} returned values outside [0, 1]; it must return probabilities (softmax), not logits")
    s = arr.sum(axis=1)
    if np.any(np.abs(s - 1.0) > 1e-4):
        bad = int(np.argmax(np.abs(s - 1.0)))
        raise ValueError(f"{source} rows must sum to 1 (probabilities); row {bad} sums to {s[bad]:.6f}")
    return np.clip(arr, 0.0, 1.0)


# --------------------------------------------------------------------------------------------
# vocabulary
# --------------------------------------------------------------------------------------------


class Vocab:
    """Word vocabulary: ``[PAD]=0, [UNK]=1, [MASK]=2`` then tokens by decreasing count.

    Args:
        tokens: the non-special tokens in id order.
    """

    specials = (PAD, UNK, MASK)

    def __init__(self, tokens: Sequence[str]):
        self.itos = list(self.specials) + [t for t in tokens if t not in self.specials]
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, texts: Iterable[Sequence[str]], min_count: int = 2, extra: Sequence[str] = ()) -> Vocab:
        """Tokens of ``texts`` seen at least ``min_count`` times (ties by first appearance), plus ``extra``."""
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        c = Counter(t for toks in texts for t in toks)
        toks = [t for t, n in sorted(c.items(), key=lambda kv: -kv[1]) if n >= min_count]
        for t in extra:
            if t not in toks:
                toks.append(t)
        return cls(toks)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, batch: Sequence[Sequence[str]], max_len: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Ids ``int64[B, T]`` (T = longest text, <= max_len), mask ``bool[B, T]``, #texts truncated."""
        T = min(max(len(t) for t in batch), max_len)
        ids = torch.zeros((len(batch), T), dtype=torch.long)
        unk = self.stoi[UNK]
        truncated = 0
        for i, toks in enumerate(batch):
            if len(toks) > max_len:
                truncated += 1
            row = [self.stoi.get(t, unk) for t in toks[:max_len]]
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask = torch.zeros((len(batch), T), dtype=torch.bool)
        for i, toks in enumerate(batch):
            mask[i, : min(len(toks), max_len)] = True
        return ids, mask, truncated

    def to_json(self) -> list[str]:
        return self.itos[len(self.specials):]


# --------------------------------------------------------------------------------------------
# tiny encoder
# --------------------------------------------------------------------------------------------


@dataclass
class TinyEncoderSpec:
    """Shape of :class:`TinyEncoder` (CPU-scale PLM stand-in; spec "CPU-scale reproduction")."""

    vocab_size: int
    num_classes: int = 2
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128
    n_layers: int = 2
    max_len: int = 64
    dropout: float = 0.1

    def __post_init__(self) -> None:
        for f in ("vocab_size", "num_classes", "d_model", "n_heads", "d_ff", "n_layers", "max_len"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"TinyEncoderSpec.{f} must be >= 1, got {getattr(self, f)}")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not (math.isfinite(self.dropout) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def _lin(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Linear map; ``w`` is ``[out, in]`` or K-stacked ``[K, out, in]`` (x broadcast over K)."""
    if w.dim() == 2:
        return F.linear(x, w, b)
    y = torch.matmul(x, w.transpose(1, 2).unsqueeze(1))  # [K, B, T, out]
    return y + b[:, None, None, :]


def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if w.dim() == 1:
        return F.layer_norm(x, (x.shape[-1],), w, b)
    y = F.layer_norm(x, (x.shape[-1],))
    return y * w[:, None, None, :] + b[:, None, None, :]


class EncoderLayer(nn.Module):
    """Pre-LN Transformer encoder layer, evaluable with K-stacked parameters (see :func:`_lin`)."""

    def __init__(self, d: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, p: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """x ``[B, T, d]`` or ``[K, B, T, d]``; mask ``bool[B, T]``; p: this layer's params by local name."""
        if p is None:
            p = dict(self.named_parameters())
        drop = self.dropout if self.training else 0.0
        h = _ln(x, p["ln1.weight"], p["ln1.bias"])
        qkv = _lin(h, p["qkv.weight"], p["qkv.bias"])
        *lead, T, three_d = qkv.shape
        d = three_d // 3
        q, k, v = qkv.view(*lead, T, 3, self.heads, d // self.heads).unbind(-3)
        q, k, v = (t.transpose(-2, -3) for t in (q, k, v))  # [..., heads, T, dh]
        am = mask[:, None, None, :]  # [B, 1, 1, T]; broadcast over K
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=am, dropout_p=drop)
        a = a.transpose(-2, -3).reshape(*lead, T, d)
        x = x + F.dropout(_lin(a, p["out.weight"], p["out.bias"]), drop, self.training)
        h = _ln(x, p["ln2.weight"], p["ln2.bias"])
        h = _lin(F.gelu(_lin(h, p["ff1.weight"], p["ff1.bias"])), p["ff2.weight"], p["ff2.bias"])
        return x + F.dropout(h, drop, self.training)


class TinyEncoder(nn.Module):
    """Word embeddings + learned positions -> ``n_layers`` pre-LN layers -> LayerNorm -> mean pool -> head.

    ``forward(ids int64[B, T], mask bool[B, T]) -> logits float[B, C]``. ``lower`` / ``top`` split the
    network below / from the top ``H`` layers; ``top`` accepts K-stacked parameters and returns
    ``[K, B, C]``.
    """

    def __init__(self, spec: TinyEncoderSpec):
        super().__init__()
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model, padding_idx=0)
        self.pos_emb = nn.Embedding(spec.max_len, spec.d_model)
        self.layers = nn.ModuleList(EncoderLayer(spec.d_model, spec.n_heads, spec.d_ff, spec.dropout)
                                    for _ in range(spec.n_layers))
        self.norm = nn.LayerNorm(spec.d_model)
        self.head = nn.Linear(spec.d_model, spec.num_classes)
        nn.init.normal_(self.tok_emb.weight, std=0.1)
        nn.init.normal_(self.pos_emb.weight, std=0.02)

    @property
    def depth(self) -> int:
        return len(self.layers)

    def top_parameter_names(self, top_layers: int) -> list[str]:
        """Names of the parameters of the top ``top_layers`` encoder layers plus final norm and head."""
        _check_top(top_layers, self.depth)
        names = []
        for i in range(self.depth - top_layers, self.depth):
            names += [f"layers.{i}.{n}" for n, _ in self.layers[i].named_parameters()]
        return names + [f"norm.{n}" for n, _ in self.norm.named_parameters()] + \
            [f"head.{n}" for n, _ in self.head.named_parameters()]

    def lower(self, ids: torch.Tensor, mask: torch.Tensor, top_layers: int) -> torch.Tensor:
        """Hidden states ``[B, T, d]`` after embeddings and the lowest ``depth − top_layers`` layers."""
        T = ids.shape[1]
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(T, device=ids.device))[None]
        x = F.dropout(x, self.spec.dropout, self.training)
        for layer in self.layers[: self.depth - top_layers]:
            x = layer(x, mask)
        return x

    def top(self, x: torch.Tensor, mask: torch.Tensor, top_layers: int,
            params: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Logits from the top ``top_layers`` layers, norm and head.

        Args:
            x: ``[B, T, d]`` from :meth:`lower`.
            params: optional full names -> tensors overriding this module's parameters; K-stacked
                (leading dim K) tensors give logits ``[K, B, C]``.
        """
        for i in range(self.depth - top_layers, self.depth):
            pre = f"layers.{i}."
            p = None if params is None else {n: params.get(pre + n, t) for n, t in self.layers[i].named_parameters()}
            x = self.layers[i](x, mask, p)
        g = (lambda n, t: t) if params is None else (lambda n, t: params.get(n, t))
        x = _ln(x, g("norm.weight", self.norm.weight), g("norm.bias", self.norm.bias))
        m = mask.to(x.dtype)[..., None]  # [B, T, 1]
        pooled = (x * m).sum(-2) / m.sum(-2).clamp_min(1.0)  # [B, d] or [K, B, d]
        hw, hb = g("head.weight", self.head.weight), g("head.bias", self.head.bias)
        if hw.dim() == 2:
            return F.linear(pooled, hw, hb)
        return torch.matmul(pooled, hw.transpose(1, 2)) + hb[:, None, :]  # [K, B, C]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.top(self.lower(ids, mask, 0), mask, 0)


def _check_top(top_layers: int, depth: int) -> None:
    if int(top_layers) != top_layers or top_layers < 0:
        raise ValueError(f"top_layers must be an integer >= 0, got {top_layers!r}")
    if top_layers > depth:
        raise ValueError(f"top_layers={top_layers} is above the model's depth ({depth} layers); "
                         f"use top_layers <= {depth}")


# --------------------------------------------------------------------------------------------
# classifiers
# --------------------------------------------------------------------------------------------


class TorchTextClassifier:
    """Base of torch-backed classifiers (token lists in, probabilities out).

    Subclasses implement :meth:`encode` (token lists -> model inputs on ``device``),
    :meth:`logits` and :meth:`top_parameter_names`, and set ``module``, ``depth``,
    ``num_classes``, ``mask_token`` and ``token_unit``.

    Attributes:
        module: the ``nn.Module`` whose parameters BMPS fine-tunes and perturbs.
        batch_size: texts per forward in :meth:`predict_proba`.
        label_names: class names in index order (``["0", "1"]`` for SST-2).
        token_unit: ``"whitespace"`` or ``"model"`` (the model tokenizer's pieces): what a
            token — and hence the radius — counts.
    """

    module: nn.Module
    num_classes: int
    mask_token: str
    token_unit: str = "whitespace"
    batch_size: int = 256
    label_names: list[str]

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @property
    def depth(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self, batch: Sequence[Sequence[str]]) -> dict[str, torch.Tensor]:  # pragma: no cover
        raise NotImplementedError

    def logits(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def top_parameter_names(self, top_layers: int) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def tokenize(self, text: str) -> list[str]:
        """Split a raw string into this model's token units (whitespace by default)."""
        return text.split()

    def unknown_only(self, batch: Sequence[Sequence[str]]) -> list[bool] | None:
        """Per token list, whether every token maps to the model's unknown token (the model sees no word it
        knows); ``None`` when the model cannot tell (no unknown token)."""
        return None

    def predict_proba(self, batch: Sequence[Sequence[str]]) -> np.ndarray:
        """Class probabilities ``float64[B, C]`` for ``B`` token lists (eval mode, no grad)."""
        if len(batch) == 0:
            return np.zeros((0, self.num_classes))
        was = self.module.training
        self.module.eval()
        outs = []
        with torch.inference_mode():
            for i in range(0, len(batch), self.batch_size):
                lg = self.logits(self.encode(batch[i: i + self.batch_size]))
                outs.append(torch.softmax(lg.float(), -1).cpu().numpy())
        self.module.train(was)
        return np.concatenate(outs).astype(np.float64)

    def predict_proba_copies(self, batch: Sequence[Sequence[str]], copies) -> np.ndarray:
        """Probabilities ``float64[K, B, C]`` of the K parameter copies (:class:`ParameterCopies`).

        Generic path: each copy's top-H deltas are written into the model in place (one model in
        memory plus the deltas), the batch is run, and the original values are restored exactly.
        """
        out = np.zeros((copies.k, len(batch), self.num_classes))
        with copies.applied(self) as apply:
            for k in range(copies.k):
                apply(k)
                out[k] = self.predict_proba(batch)
        return out


class TinyClassifier(TorchTextClassifier):
    """:class:`Vocab` + :class:`TinyEncoder`; whitespace tokens; ``[MASK]`` as the mask token.

    Args:
        vocab: the word vocabulary.
        model: the encoder (``spec.vocab_size == len(vocab)``).
        label_names: class names (default ``"0", "1", ...``).
        device: torch device.
    """

    token_unit = "whitespace"

    def __init__(self, vocab: Vocab, model: TinyEncoder, label_names: Sequence[str] | None = None,
                 device: str | torch.device = "cpu", lowercase: bool = False):
        if model.spec.vocab_size != len(vocab):
            raise ValueError(f"vocab has {len(vocab)} tokens but the model expects {model.spec.vocab_size}")
        self.vocab, self.module = vocab, model.to(device)
        self.num_classes = model.spec.num_classes
        self.label_names = [str(x) for x in (label_names or range(self.num_classes))]
        if len(self.label_names) != self.num_classes:
            raise ValueError(f"{len(self.label_names)} label names for {self.num_classes} classes")
        self.mask_token = MASK
        self.lowercase = lowercase
        self.truncated = 0

    @classmethod
    def create(cls, vocab: Vocab, num_classes: int = 2, *, d_model: int = 64, n_heads: int = 4, d_ff: int = 128,
               n_layers: int = 2, max_len: int = 64, dropout: float = 0.1, seed: int = 0,
               label_names: Sequence[str] | None = None, device: str = "cpu", lowercase: bool = False) -> TinyClassifier:
        """A freshly initialised tiny classifier (torch seeded with ``seed``)."""
        spec = TinyEncoderSpec(len(vocab), num_classes, d_model, n_heads, d_ff, n_layers, max_len, dropout)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = TinyEncoder(spec)
        return cls(vocab, model, label_names, device, lowercase)

    @property
    def depth(self) -> int:
        return self.module.depth

    def tokenize(self, text: str) -> list[str]:
        return (text.lower() if self.lowercase else text).split()

    def unknown_only(self, batch):
        unk = self.vocab.stoi[UNK]
        return [bool(toks) and all(self.vocab.stoi.get(t, unk) == unk for t in toks) for toks in batch]

    def encode(self, batch):
        ids, mask, trunc = self.vocab.encode(batch, self.module.spec.max_len)
        if trunc:
            self.truncated += trunc
            log.warning("%d text(s) longer than max_len=%d tokens were truncated", trunc, self.module.spec.max_len)
        return {"ids": ids.to(self.device), "mask": mask.to(self.device)}

    def logits(self, inputs):
        return self.module(inputs["ids"], inputs["mask"])

    def top_parameter_names(self, top_layers: int) -> list[str]:
        return self.module.top_parameter_names(top_layers)

    def predict_proba_copies(self, batch, copies) -> np.ndarray:
        """Batched path: lower layers once for the batch, the top-H layers for all K copies stacked."""
        if copies.top_layers > self.depth:
            _check_top(copies.top_layers, self.depth)
        was = self.module.training
        self.module.eval()
        outs = []
        with torch.inference_mode():
            stacked = copies.stacked_parameters(self)
            for i in range(0, len(batch), self.batch_size):
                inp = self.encode(batch[i: i + self.batch_size])
                h = self.module.lower(inp["ids"], inp["mask"], copies.top_layers)
                lg = self.module.top(h, inp["mask"], copies.top_layers, stacked)
                if lg.dim() == 2:  # no stacked parameter (top_layers = 0 and no head delta): same for all K
                    lg = lg.unsqueeze(0).expand(copies.k, -1, -1)
                outs.append(torch.softmax(lg.float(), -1).cpu().numpy())
        self.module.train(was)
        return np.concatenate(outs, axis=1).astype(np.float64)

    # ---- saving ------------------------------------------------------------------------------

    def save(self, path: str | Path, extra: Mapping | None = None) -> Path:
        """Write ``config.json``, ``vocab.json`` and ``model.safetensors`` into the folder ``path``."""
        from safetensors.torch import save_file

        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        cfg = {"kind": "tiny-encoder", "spec": asdict(self.module.spec), "label_names": self.label_names,
               "token_unit": self.token_unit, "mask_token": self.mask_token, "lowercase": self.lowercase,
               **(dict(extra) if extra else {})}
        (p / "config.json").write_text(json.dumps(cfg, indent=2))
        (p / "vocab.json").write_text(json.dumps(self.vocab.to_json()))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.module.state_dict().items()},
                  str(p / "model.safetensors"))
        return p

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> TinyClassifier:
        """Inverse of :meth:`save`.

        Raises:
            FileNotFoundError: a missing folder or file (named).
            ValueError: a config that is not a tiny-encoder config.
        """
        from safetensors.torch import load_file

        p = Path(path)
        for f in ("config.json", "vocab.json", "model.safetensors"):
            if not (p / f).is_file():
                raise FileNotFoundError(f"{p / f} does not exist (a tiny-encoder folder holds config.json, "
                                        "vocab.json and model.safetensors)")
        cfg = json.loads((p / "config.json").read_text())
        if cfg.get("kind") != "tiny-encoder":
            raise ValueError(f"{p}/config.json is not a tiny-encoder config (kind={cfg.get('kind')!r})")
        vocab = Vocab(json.loads((p / "vocab.json").read_text()))
        spec = TinyEncoderSpec(**cfg["spec"])
        if len(vocab) != spec.vocab_size:
            raise ValueError(f"{p}: vocab.json has {len(vocab)} tokens (with specials) but config.json's model has a "
                             f"vocabulary of {spec.vocab_size}; the files come from different models — use the "
                             "folder written by one attack/finetune run")
        try:
            state = load_file(str(p / "model.safetensors"))
        except Exception as e:  # SafetensorError of a truncated / damaged file: one line, not a traceback
            raise ValueError(f"{p / 'model.safetensors'} cannot be read ({type(e).__name__}: {e}); the file is "
                             "damaged or truncated — copy it again or re-run attack/finetune") from None
        model = TinyEncoder(spec)
        emb = state.get("tok_emb.weight")
        if emb is not None and emb.shape[0] != spec.vocab_size:
            raise ValueError(f"{p}: model.safetensors has an embedding of {emb.shape[0]} tokens but vocab.json / "
                             f"config.json have {spec.vocab_size}; the files come from different models — use the "
                             "folder written by one attack/finetune run")
        try:
            model.load_state_dict(state)
        except RuntimeError as e:
            raise ValueError(f"{p / 'model.safetensors'} does not fit config.json's model "
                             f"({str(e).splitlines()[0]} ...); the files come from different models") from None
        return cls(vocab, model, cfg.get("label_names"), device, bool(cfg.get("lowercase", False)))


class CallableClassifier:
    """Any ``predict_proba(list[list[str]]) -> [B, C]`` callable as an FRS model (no parameter copies).

    Args:
        fn: the callable; its output is validated with :func:`check_proba` on every call.
        num_classes: C.
        mask_token: the string a randomised token becomes.
        label_names: class names (default ``"0", ...``).
        token_unit: what a token is (recorded; the radius counts these units).
    """

    def __init__(self, fn: Callable[[list[list[str]]], object], num_classes: int, mask_token: str = MASK,
                 label_names: Sequence[str] | None = None, token_unit: str = "whitespace"):
        if not callable(fn):
            raise TypeError("fn must be callable: predict_proba(list[list[str]]) -> [B, C]")
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.fn, self.num_classes, self.mask_token = fn, int(num_classes), mask_token
        self.label_names = [str(x) for x in (label_names or range(self.num_classes))]
        self.token_unit = token_unit

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def predict_proba(self, batch: Sequence[Sequence[str]]) -> np.ndarray:
        batch = [list(t) for t in batch]
        return check_proba(self.fn(batch), len(batch), self.num_classes)
