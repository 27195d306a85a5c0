"""Pluggable translation (MultiTP §3.1-3.2): vignettes and system prompts forward, answers back to English.

The paper uses Google Translate both ways. Here a *translator* is any object with a ``name`` and
``__call__(text, tgt_lang, src_lang="en") -> str`` (an optional ``translate_batch(texts, tgt_lang,
src_lang)`` is used when present); a plain function ``(text, tgt_lang) -> str`` is wrapped by
:func:`as_translator`. Built in:

- :class:`IdentityTranslator` — returns the text (English; also the CPU stand-in for translations);
- :class:`TagTranslator` — a pseudo-translation that prefixes ``"[xx] "`` and strips it back (tests);
- :class:`CsvTranslator` — the user's ``dataset_{lang}+google.csv`` files (forward only);
- :class:`NLLBTranslator` — ``facebook/nllb-200-distilled-600M`` through transformers (extra ``[hf]``),
  the 107 codes mapped to NLLB/FLORES-200 codes (five are not covered: a clear error).

:class:`CachedTranslator` stores every translation in a JSON-lines file keyed by (translator, source
language, target language, text), so nothing is translated twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .spec import SYSTEM_PROMPTS, check_lang

__all__ = ["Translator", "IdentityTranslator", "TagTranslator", "CsvTranslator", "NLLBTranslator",
           "CachedTranslator", "FunctionTranslator", "as_translator", "translate", "translate_system_prompt",
           "back_translate", "NLLB_CODES", "make_translator"]

log = logging.getLogger(__name__)


@runtime_checkable
class Translator(Protocol):
    name: str

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str: ...


def _batch(tr: Any, texts: Sequence[str], tgt: str, src: str) -> list[str]:
    if hasattr(tr, "translate_batch"):
        out = list(tr.translate_batch(list(texts), tgt, src))
    else:
        out = [tr(t, tgt, src) for t in texts]
    if len(out) != len(texts) or not all(isinstance(o, str) for o in out):
        raise RuntimeError(f"translator {getattr(tr, 'name', tr)!r} returned {len(out)} outputs for {len(texts)} texts")
    return out


class IdentityTranslator:
    """No translation (English; the CPU stand-in: English text for every language, stated in reports)."""

    name = "identity"

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str:
        return text


class TagTranslator:
    """A pseudo-translation for tests: ``"[de] " + text`` to language ``de``; back to English strips the tag.

    It lets a language-blind server tell languages apart; it is not a translation.
    """

    name = "tag"

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str:
        if tgt_lang == "en":
            tag = f"[{src_lang}] "
            return text[len(tag):] if text.startswith(tag) else text
        return f"[{tgt_lang}] {text}"


class FunctionTranslator:
    """Wrap a callable ``(text, tgt_lang) -> str`` (or ``(text, tgt_lang, src_lang)``)."""

    def __init__(self, fn: Callable[..., str], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "custom")

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str:
        try:
            return self.fn(text, tgt_lang, src_lang)
        except TypeError:
            return self.fn(text, tgt_lang)


def as_translator(t: Any) -> Any:
    """A translator object from a translator, a name (``identity``/``tag``) or a callable."""
    if isinstance(t, str):
        return make_translator(t)
    if hasattr(t, "name") and callable(t):
        return t
    if callable(t):
        return FunctionTranslator(t)
    raise TypeError(f"not a translator: {t!r}")


class CsvTranslator:
    """Forward translations read from the user's ``dataset_{lang}+google.csv`` files (official layout).

    Args:
        folder: the folder holding ``dataset_{lang}+google.csv`` (or ``dataset_{lang}.csv``).
        system_prompts: optional ``{lang: translated system prompt}`` (or a JSON file with that mapping);
            a dataset file may instead carry a ``system_prompt`` column.

    Looking up a text that the files do not hold raises ``KeyError`` naming the language and file.
    """

    name = "csv"

    def __init__(self, folder: str | Path, system_prompts: dict[str, str] | str | Path | None = None) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"translation folder {self.folder} does not exist")
        if isinstance(system_prompts, (str, Path)):
            system_prompts = json.loads(Path(system_prompts).read_text(encoding="utf-8"))
        self.system_prompts = dict(system_prompts or {})
        self._tables: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def file_for(self, lang: str) -> Path:
        for name in (f"dataset_{lang}+google.csv", f"dataset_{lang}.csv"):
            if (self.folder / name).is_file():
                return self.folder / name
        raise FileNotFoundError(f"no dataset_{lang}+google.csv in {self.folder}")

    def _table(self, lang: str) -> dict[str, str]:
        with self._lock:
            if lang not in self._tables:
                import csv

                from .vignettes import read_dataset_csv

                path = self.file_for(lang)
                tab = {v.prompt_en: v.prompt for v in read_dataset_csv(path, lang)}
                with open(path, newline="", encoding="utf-8-sig") as fh:
                    rows = list(csv.DictReader(fh))
                sp = {r.get("system_prompt", "").strip() for r in rows} - {""}
                if len(sp) == 1 and lang not in self.system_prompts:
                    self.system_prompts[lang] = sp.pop()
                self._tables[lang] = tab
            return self._tables[lang]

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str:
        if tgt_lang == src_lang:
            return text
        if src_lang != "en":
            raise KeyError("the csv translator only translates English vignettes forward; use --back-translator "
                           "identity|nllb for answers")
        tab = self._table(tgt_lang)
        if text in tab:
            return tab[text]
        if text in SYSTEM_PROMPTS.values():
            if tgt_lang in self.system_prompts:
                return self.system_prompts[tgt_lang]
            raise KeyError(f"no translated system prompt for {tgt_lang!r}: add a 'system_prompt' column to "
                           f"{self.file_for(tgt_lang).name} or pass system_prompts={{'{tgt_lang}': ...}}")
        raise KeyError(f"{self.file_for(tgt_lang).name} has no translation of {text[:60]!r}")


#: MultiTP code -> NLLB-200 (FLORES-200) code; ``None``: not covered by NLLB-200.
NLLB_CODES: dict[str, str | None] = {
    "af": "afr_Latn", "am": "amh_Ethi", "ar": "arb_Arab", "az": "azj_Latn", "be": "bel_Cyrl", "bg": "bul_Cyrl",
    "bn": "ben_Beng", "bs": "bos_Latn", "ca": "cat_Latn", "ceb": "ceb_Latn", "co": None, "cs": "ces_Latn",
    "cy": "cym_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek", "en": "eng_Latn", "eo": "epo_Latn",
    "es": "spa_Latn", "et": "est_Latn", "eu": "eus_Latn", "fa": "pes_Arab", "fi": "fin_Latn", "fr": "fra_Latn",
    "fy": None, "ga": "gle_Latn", "gd": "gla_Latn", "gl": "glg_Latn", "gu": "guj_Gujr", "ha": "hau_Latn",
    "haw": None, "he": "heb_Hebr", "hi": "hin_Deva", "hmn": None, "hr": "hrv_Latn", "ht": "hat_Latn",
    "hu": "hun_Latn", "hy": "hye_Armn", "id": "ind_Latn", "ig": "ibo_Latn", "is": "isl_Latn", "it": "ita_Latn",
    "iw": "heb_Hebr", "ja": "jpn_Jpan", "jw": "jav_Latn", "ka": "kat_Geor", "kk": "kaz_Cyrl", "km": "khm_Khmr",
    "kn": "kan_Knda", "ko": "kor_Hang", "ku": "kmr_Latn", "ky": "kir_Cyrl", "la": None, "lb": "ltz_Latn",
    "lo": "lao_Laoo", "lt": "lit_Latn", "lv": "lvs_Latn", "mg": "plt_Latn", "mi": "mri_Latn", "mk": "mkd_Cyrl",
    "ml": "mal_Mlym", "mn": "khk_Cyrl", "mr": "mar_Deva", "ms": "zsm_Latn", "mt": "mlt_Latn", "my": "mya_Mymr",
    "ne": "npi_Deva", "nl": "nld_Latn", "no": "nob_Latn", "ny": "nya_Latn", "or": "ory_Orya", "pa": "pan_Guru",
    "pl": "pol_Latn", "ps": "pbt_Arab", "pt": "por_Latn", "ro": "ron_Latn", "ru": "rus_Cyrl", "sd": "snd_Arab",
    "si": "sin_Sinh", "sk": "slk_Latn", "sl": "slv_Latn", "sm": "smo_Latn", "sn": "sna_Latn", "so": "som_Latn",
    "sq": "als_Latn", "sr": "srp_Cyrl", "st": "sot_Latn", "su": "sun_Latn", "sv": "swe_Latn", "sw": "swh_Latn",
    "ta": "tam_Taml", "te": "tel_Telu", "tg": "tgk_Cyrl", "th": "tha_Thai", "tl": "tgl_Latn", "tr": "tur_Latn",
    "ug": "uig_Arab", "uk": "ukr_Cyrl", "ur": "urd_Arab", "uz": "uzn_Latn", "vi": "vie_Latn", "xh": "xho_Latn",
    "yi": "ydd_Hebr", "yo": "yor_Latn", "zh-cn": "zho_Hans", "zh-tw": "zho_Hant", "zu": "zul_Latn",
}


def nllb_code(lang: str) -> str:
    """The NLLB-200 code of a MultiTP language.

    Raises:
        ValueError: an unknown language, or one NLLB-200 does not cover (co, fy, haw, hmn, la).
    """
    check_lang(lang)
    code = NLLB_CODES[lang]
    if code is None:
        raise ValueError(f"NLLB-200 does not cover {lang!r} (uncovered: "
                         f"{sorted(k for k, v in NLLB_CODES.items() if v is None)}); use --translator csv with "
                         "your own translations for it")
    return code


class NLLBTranslator:
    """Translation with an NLLB-200 model through ``transformers`` (extra ``[hf]``).

    Args:
        model: hub id or local folder (default ``facebook/nllb-200-distilled-600M``).
        device: ``auto``/``cpu``/``cuda``/``cuda:N``.
        batch_size: texts per forward pass.
        max_new_tokens: output length cap.
        dtype: ``auto``, ``float16``, ``bfloat16`` or ``float32``.
    """

    def __init__(self, model: str = "facebook/nllb-200-distilled-600M", *, device: str = "auto",
                 batch_size: int = 16, max_new_tokens: int = 512, dtype: str = "auto") -> None:
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        except ImportError as e:
            raise ImportError(f"the nllb translator needs torch + transformers: pip install 'iclr25-multitp[hf]' ({e})") from None
        import torch

        from iclr25.core import choose_device

        if not (Path(model).is_dir() or os.environ.get("HF_HUB_OFFLINE") != "1"):
            raise FileNotFoundError(f"NLLB model {model!r} is not a local folder and HF_HUB_OFFLINE=1; no download "
                                    "was attempted")
        self.name = f"nllb:{model}"
        self.device = choose_device(device)
        self.tok = AutoTokenizer.from_pretrained(model)
        td = {"auto": None, "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
        kw = {"torch_dtype": td} if td is not None else {}
        self.model = AutoModelForSeq2SeqLM.from_pretrained(model, **kw).to(self.device).eval()
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens

    def translate_batch(self, texts: Sequence[str], tgt_lang: str, src_lang: str = "en") -> list[str]:
        import torch

        src, tgt = nllb_code(src_lang), nllb_code(tgt_lang)
        if src == tgt:
            return list(texts)
        self.tok.src_lang = src
        bos = self.tok.convert_tokens_to_ids(tgt)
        out: list[str] = []
        for i in range(0, len(texts), self.batch_size):
            # translate line by line so the bullet layout of a vignette survives
            chunk = list(texts[i:i + self.batch_size])
            lines = [ln for t in chunk for ln in t.split("\n")]
            keep = [j for j, ln in enumerate(lines) if ln.strip()]
            todo = [lines[j].lstrip("- ") if lines[j].startswith("- ") else lines[j] for j in keep]
            enc = self.tok(todo, return_tensors="pt", padding=True, truncation=True).to(self.device)
            with torch.no_grad():
                gen = self.model.generate(**enc, forced_bos_token_id=bos, max_new_tokens=self.max_new_tokens)
            dec = self.tok.batch_decode(gen, skip_special_tokens=True)
            for j, d in zip(keep, dec):
                lines[j] = ("- " + d) if lines[j].startswith("- ") else d
            k = 0
            for t in chunk:
                n = len(t.split("\n"))
                out.append("\n".join(lines[k:k + n]))
                k += n
        return out

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str:
        return self.translate_batch([text], tgt_lang, src_lang)[0]


class CachedTranslator:
    """Disk cache around a translator: ``cache_dir/translations.jsonl`` keyed by (translator, src, tgt, text).

    Concurrent use from threads is safe; every new translation is appended and flushed at once.
    """

    def __init__(self, translator: Any, cache_dir: str | Path) -> None:
        self.inner = as_translator(translator)
        self.name = self.inner.name
        self.path = Path(cache_dir) / "translations.jsonl"
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}
        if self.path.exists():
            from ._jsonl import read_jsonl, repair_torn_tail

            repair_torn_tail(self.path)
            for r in read_jsonl(self.path):
                self._data[r["key"]] = r["out"]

    def _key(self, text: str, tgt: str, src: str) -> str:
        h = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
        return f"{self.name}|{src}|{tgt}|{h}"

    def translate_batch(self, texts: Sequence[str], tgt_lang: str, src_lang: str = "en") -> list[str]:
        keys = [self._key(t, tgt_lang, src_lang) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self._data]
        if todo:
            outs = _batch(self.inner, [texts[i] for i in todo], tgt_lang, src_lang)
            from ._jsonl import append_jsonl

            with self._lock:
                recs = []
                for i, o in zip(todo, outs):
                    if keys[i] not in self._data:
                        self._data[keys[i]] = o
                        recs.append({"key": keys[i], "src": src_lang, "tgt": tgt_lang, "out": o})
                append_jsonl(self.path, recs)
        return [self._data[k] for k in keys]

    def __call__(self, text: str, tgt_lang: str, src_lang: str = "en") -> str:
        return self.translate_batch([text], tgt_lang, src_lang)[0]


def make_translator(kind: str, *, csv_folder: str | Path | None = None, nllb_model: str | None = None,
                    device: str = "auto") -> Any:
    """Build a translator by name: ``identity``, ``tag``, ``csv`` (needs ``csv_folder``) or ``nllb``.

    Raises:
        ValueError: an unknown name, or ``csv`` without a folder.
    """
    if kind == "identity":
        return IdentityTranslator()
    if kind == "tag":
        return TagTranslator()
    if kind == "csv":
        if csv_folder is None:
            raise ValueError("--translator csv needs --translations-dir (a folder of dataset_{lang}+google.csv)")
        return CsvTranslator(csv_folder)
    if kind == "nllb":
        return NLLBTranslator(nllb_model or "facebook/nllb-200-distilled-600M", device=device)
    raise ValueError(f"unknown translator {kind!r}; choose identity, nllb, csv or tag")


_WARNED_IDENTITY: set[str] = set()


def translate(vignettes: Sequence[Any], lang: str, translator: Any = None, *, cache_dir: str | Path | None = None) -> list[Any]:
    """Translate English vignettes into ``lang`` (MultiTP §3.1; the paper: Google Translate).

    Args:
        vignettes: English :class:`~iclr25.multitp.vignettes.Vignette` records.
        lang: target language (one of the 107).
        translator: a translator, a name, a callable ``(text, tgt_lang) -> str``; default identity.
        cache_dir: wrap the translator in a :class:`CachedTranslator` there.

    Returns:
        Copies with ``lang`` set and ``prompt`` translated (``prompt_en`` and the bullet texts stay English).

    Raises:
        ValueError: an unknown language, or a translator returning an empty text.
    """
    check_lang(lang)
    tr = as_translator(translator or IdentityTranslator())
    if isinstance(tr, IdentityTranslator) and lang != "en" and lang not in _WARNED_IDENTITY:
        _WARNED_IDENTITY.add(lang)
        log.warning("translate(..., %r) with the identity translator keeps the English text: a stand-in, not a "
                    "translation (pass translator='csv'/'nllb' or a callable for real %s vignettes)", lang, lang)
    if cache_dir is not None and not isinstance(tr, (IdentityTranslator, CachedTranslator)):
        tr = CachedTranslator(tr, cache_dir)
    texts = [v.prompt_en for v in vignettes]
    outs = texts if lang == "en" else _batch(tr, texts, lang, "en")
    bad = [v.id for v, o in zip(vignettes, outs) if not o.strip()]
    if bad:
        raise ValueError(f"translator {tr.name!r} returned empty text for {len(bad)} vignettes into {lang} (e.g. {bad[0]})")
    return [replace(v, lang=lang, prompt=o) for v, o in zip(vignettes, outs)]


def translate_system_prompt(lang: str, translator: Any = None, *, role: str = "normal",
                            cache_dir: str | Path | None = None) -> str:
    """The system prompt of ``role`` (paper: ``"normal"``) in ``lang``.

    Raises:
        ValueError: an unknown role or language.
    """
    if role not in SYSTEM_PROMPTS:
        raise ValueError(f"role={role!r}; choose one of {list(SYSTEM_PROMPTS)}")
    check_lang(lang)
    text = SYSTEM_PROMPTS[role]
    if lang == "en":
        return text
    tr = as_translator(translator or IdentityTranslator())
    if cache_dir is not None and not isinstance(tr, (IdentityTranslator, CachedTranslator)):
        tr = CachedTranslator(tr, cache_dir)
    return _batch(tr, [text], lang, "en")[0]


def back_translate(texts: Sequence[str], src_lang: str, translator: Any = None, *,
                   cache_dir: str | Path | None = None) -> list[str]:
    """Translate answers from ``src_lang`` back to English (MultiTP §3.2 step 2).

    Empty answers stay empty; English answers are returned as they are.
    """
    check_lang(src_lang)
    if src_lang == "en":
        return list(texts)
    tr = as_translator(translator or IdentityTranslator())
    if cache_dir is not None and not isinstance(tr, (IdentityTranslator, CachedTranslator)):
        tr = CachedTranslator(tr, cache_dir)
    idx = [i for i, t in enumerate(texts) if t and t.strip()]
    out = list(texts)
    for i, o in zip(idx, _batch(tr, [texts[i] for i in idx], "en", src_lang)):
        out[i] = o
    return out
