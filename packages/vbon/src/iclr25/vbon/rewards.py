"""Reward functions: ``reward_fn(prompts, continuations) -> (B,) float``.

* :class:`TfidfSentimentReward` — TF-IDF (1–2-grams, ``min_df=2``, sublinear tf) + logistic
  regression (``C=4``) trained on the mirrored polarity data; the reward is the decision-function
  logit of "positive" (CPU stand-in for ``lvwerra/distilbert-imdb``).
* :class:`HFRewardModel` — any Hugging Face sequence-classification model by id, reward = the logit
  of one label (the paper's ``lvwerra/distilbert-imdb`` with ``function_to_apply="none"``).

Both score the full text ``prompt + continuation``, as the official code does.
:func:`call_reward` validates what a reward function returns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = ["RewardFn", "call_reward", "TfidfSentimentReward", "HFRewardModel"]

RewardFn = Callable[[Sequence[str], Sequence[str]], object]


def call_reward(reward_fn: RewardFn, prompts: Sequence[str], continuations: Sequence[str]) -> torch.Tensor:
    """Call ``reward_fn`` and check its output: ``(B,)`` finite floats.

    Returns:
        ``(B,)`` float64 tensor.

    Raises:
        ValueError: wrong shape or NaN/inf values (naming the first bad index and its text).
    """
    out = reward_fn(list(prompts), list(continuations))
    if isinstance(out, torch.Tensor):
        r = out.detach().to("cpu", torch.float64)
    else:
        r = torch.as_tensor(np.asarray(out, dtype=np.float64))
    b = len(prompts)
    if r.shape != (b,):
        raise ValueError(f"reward function {getattr(reward_fn, '__name__', type(reward_fn).__name__)} returned "
                         f"shape {tuple(r.shape)}; expected ({b},) — one float per (prompt, continuation)")
    bad = (~torch.isfinite(r)).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(f"reward function returned {float(r[i])} at index {i} "
                         f"(prompt {prompts[i]!r}, continuation {continuations[i]!r}); rewards must be finite")
    return r


class TfidfSentimentReward:
    """Sentiment reward: scikit-learn TF-IDF + logistic regression, ``r`` = logit of "positive".

    Args:
        ngram_range, min_df, sublinear_tf: ``TfidfVectorizer`` settings (spec §4.2).
        C: inverse L2 strength of ``LogisticRegression``.
    """

    def __init__(self, ngram_range: tuple[int, int] = (1, 2), min_df: int = 2, sublinear_tf: bool = True,
                 C: float = 4.0) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        self.params = {"ngram_range": list(ngram_range), "min_df": min_df, "sublinear_tf": sublinear_tf, "C": C}
        self.pipeline = make_pipeline(
            TfidfVectorizer(ngram_range=tuple(ngram_range), min_df=min_df, sublinear_tf=sublinear_tf),
            LogisticRegression(C=C, max_iter=2000),
        )
        self.fitted = False

    def fit(self, texts: Sequence[str], labels: Sequence[int]) -> TfidfSentimentReward:
        """Fit on texts with labels 1 = positive, 0 = negative."""
        self.pipeline.fit(list(texts), list(labels))
        self.fitted = True
        return self

    def score_texts(self, texts: Sequence[str]) -> np.ndarray:
        """``(B,)`` float64 logits of "positive" for full texts."""
        if not self.fitted:
            raise RuntimeError("TfidfSentimentReward is not fitted; call fit() or load()")
        if len(texts) == 0:
            return np.zeros(0)
        return self.pipeline.decision_function(list(texts)).astype(np.float64)

    def __call__(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        return self.score_texts([p + c for p, c in zip(prompts, continuations)])

    def accuracy(self, texts: Sequence[str], labels: Sequence[int]) -> float:
        """Held-out accuracy."""
        return float((self.pipeline.predict(list(texts)) == np.asarray(labels)).mean())

    # Saved without pickle: vocabulary + idf + coefficients as JSON / .npz.
    def save(self, path: str | Path) -> Path:
        vec, lr = self.pipeline[0], self.pipeline[1]
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        (d / "tfidf.json").write_text(json.dumps({"params": self.params,
                                                   "vocabulary": {k: int(v) for k, v in vec.vocabulary_.items()}}))
        np.savez(d / "tfidf.npz", idf=vec.idf_, coef=lr.coef_, intercept=lr.intercept_, classes=lr.classes_)
        return d

    @classmethod
    def load(cls, path: str | Path) -> TfidfSentimentReward:
        d = Path(path)
        meta = json.loads((d / "tfidf.json").read_text())
        arr = np.load(d / "tfidf.npz")
        obj = cls(tuple(meta["params"]["ngram_range"]), meta["params"]["min_df"], meta["params"]["sublinear_tf"],
                  meta["params"]["C"])
        vec, lr = obj.pipeline[0], obj.pipeline[1]
        vec.set_params(vocabulary=meta["vocabulary"])
        vec.fit(["x"])  # initialise internals with the fixed vocabulary, then restore idf
        vec.idf_ = arr["idf"]
        lr.coef_, lr.intercept_, lr.classes_ = arr["coef"], arr["intercept"], arr["classes"]
        obj.fitted = True
        return obj

    @classmethod
    def cached(cls, data=None, cache: str | Path | None = None) -> TfidfSentimentReward:
        """Train on the mirrored polarity train split, or load it from the cache when already trained."""
        from .data import load_polarity
        from .reflm import vbon_cache_dir

        data = data or load_polarity()
        tmp = cls()
        key = hashlib.sha256(json.dumps([tmp.params, data.sha, len(data.train_texts)]).encode()).hexdigest()[:12]
        d = Path(cache) if cache else vbon_cache_dir() / f"reward-tfidf-{key}"
        if (d / "tfidf.npz").is_file():
            return cls.load(d)
        tmp.fit(data.train_texts, data.train_labels)
        tmp.save(d)
        return tmp


class HFRewardModel:
    """A Hugging Face sequence classifier as a reward: the logit of ``label`` (no softmax).

    Args:
        model_id: hub id or local path, e.g. ``"lvwerra/distilbert-imdb"``.
        label: the label whose logit is the reward (name in ``config.label2id``, or an int index).
        batch_size: texts per forward pass.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``...
        max_length: truncation length.
    """

    def __init__(self, model_id: str, label: str | int = "POSITIVE", batch_size: int = 32, device: str = "auto",
                 max_length: int = 512) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from iclr25.core.seed import choose_device

        self.device = choose_device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_id)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_id).to(self.device).eval()
        if isinstance(label, int):
            self.index = label
        else:
            l2i = {k.lower(): v for k, v in (self.model.config.label2id or {}).items()}
            if label.lower() not in l2i:
                raise ValueError(f"label {label!r} not in the model's labels {list(l2i)}; pass --reward-label")
            self.index = int(l2i[label.lower()])
        self.batch_size = batch_size
        self.max_length = max_length
        self.__name__ = model_id

    @torch.no_grad()
    def __call__(self, prompts: Sequence[str], continuations: Sequence[str]) -> np.ndarray:
        texts = [p + c for p, c in zip(prompts, continuations)]
        out = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[i:i + self.batch_size], return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_length).to(self.device)
            out.append(self.model(**enc).logits[:, self.index].float().cpu())
        return torch.cat(out).double().numpy() if out else np.zeros(0)
