"""Zero-shot vs TIE vs TIE* vs projection on one set of embeddings, per group."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from .tie import TIE, group_metrics, infer_spurious_labels, project_out, zero_shot_predict

__all__ = ["METHODS", "evaluate_methods", "evaluate_embedding_set", "metrics_table", "per_group_table"]

METHODS = ("zero_shot", "tie", "tie_star", "projection")
LABELS = {"zero_shot": "zero-shot", "tie": "TIE", "tie_star": "TIE*", "projection": "projection"}


def evaluate_methods(pool_emb: np.ndarray, test_emb: np.ndarray, test_y: np.ndarray, test_a: np.ndarray | None,
                     text_emb_class: np.ndarray, text_emb_spurious: np.ndarray, *, pool_a: np.ndarray | None = None,
                     methods: Sequence[str] = METHODS, group_a: np.ndarray | None = None,
                     classes: Sequence[Any] | None = None, attributes: Sequence[Any] | None = None,
                     label_map: Callable[[np.ndarray], np.ndarray] | None = None,
                     empty_group: Literal["error", "zero"] = "error",
                     attribute_values: Sequence[Any] | None = None) -> dict[str, Any]:
    """Run the methods on the same pool, test set and prompts.

    Args:
        pool_emb: ``[M, D]`` pool images (λ); pool_a: ``[M]`` attribute indices (needed for ``tie``).
        test_emb: ``[N, D]``; test_y: ``[N]`` class labels; test_a: ``[N]`` attribute indices for
            translation (``-1``: untranslated; needed for ``tie``).
        text_emb_class: ``[C, D]``; text_emb_spurious: ``[A, D]``.
        methods: subset of :data:`METHODS`.
        group_a: ``[N]`` attribute *values* used to form groups (default ``test_a``).
        classes, attributes: the full group grid (empty groups are listed, not NaN).
        label_map: applied to predictions and labels before grouping (e.g. class → superclass).
        empty_group: see :func:`~iclr25.tie.tie.estimate_scales`.
        attribute_values: names of the attribute indices (error messages).

    Returns:
        ``{"methods": {name: group_metrics(...) + {"pred"}}, "lambda": {...}, "a_hat_accuracy": float|None}``.

    Raises:
        ValueError: an unknown method, ``tie`` without attribute labels, and the checks of the steps.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {unknown}; choose from {list(METHODS)}")
    ga = test_a if group_a is None else group_a
    if ga is None:
        raise ValueError("evaluation needs attribute labels of the test images to form groups (a)")
    yt = test_y if label_map is None else label_map(np.asarray(test_y))
    out: dict[str, Any] = {"methods": {}, "lambda": {}, "a_hat_accuracy": None}
    preds: dict[str, np.ndarray] = {}
    for m in methods:
        if m == "zero_shot":
            preds[m] = zero_shot_predict(test_emb, text_emb_class)
        elif m == "tie":
            if pool_a is None or test_a is None:
                raise ValueError("TIE (mode true) needs attribute labels a for the pool and the test images; "
                                 "use --mode inferred (TIE*) when they are unknown")
            t = TIE(text_emb_spurious, "true", empty_group=empty_group, attribute_values=attribute_values).fit(pool_emb, pool_a)
            preds[m] = t.predict(test_emb, text_emb_class, test_a)
            out["lambda"]["tie"] = t.lam_.tolist()
        elif m == "tie_star":
            t = TIE(text_emb_spurious, "inferred", empty_group=empty_group, attribute_values=attribute_values).fit(pool_emb)
            preds[m] = t.predict(test_emb, text_emb_class)
            out["lambda"]["tie_star"] = t.lam_.tolist()
            if test_a is not None:
                ta = np.asarray(test_a)
                ok = ta >= 0
                ahat = infer_spurious_labels(test_emb, text_emb_spurious)
                out["a_hat_accuracy"] = float((ahat[ok] == ta[ok]).mean()) if ok.any() else None
            if pool_a is not None:
                pa = np.asarray(pool_a)
                ok = pa >= 0
                ahat = infer_spurious_labels(pool_emb, text_emb_spurious)
                out["a_hat_accuracy_pool"] = float((ahat[ok] == pa[ok]).mean()) if ok.any() else None
        elif m == "projection":
            preds[m] = zero_shot_predict(project_out(test_emb, text_emb_spurious), text_emb_class)
    for m, p in preds.items():
        pm = p if label_map is None else label_map(p)
        res = group_metrics(pm, yt, ga, classes=classes, attributes=attributes)
        res["pred"] = p
        out["methods"][m] = res
    return out


def evaluate_embedding_set(es, *, pool_split: Literal["train", "val"], methods: Sequence[str] = METHODS,
                           untranslated: Literal["error", "keep"] = "error",
                           empty_group: Literal["error", "zero"] = "error") -> dict[str, Any]:
    """:func:`evaluate_methods` on an :class:`~iclr25.tie.embeddings.EmbeddingSet`: the pool is
    ``pool_split`` (explicit: the official code uses the training split), the test set split 2.

    ``tie`` is skipped (and reported under ``"skipped"``) when the file has no ``a``.

    Raises:
        ValueError: an empty pool or test split, and the checks of :func:`evaluate_methods`.
    """
    if pool_split not in ("train", "val"):
        raise ValueError(f"pool_split must be 'train' or 'val', got {pool_split!r}")
    es.validate(untranslated=untranslated)
    pool, test = es.rows(pool_split), es.rows("test")
    x = np.asarray(es.image_emb)
    skipped = []
    a_idx = es.attribute_index() if es.a is not None else None
    ms = list(methods)
    if a_idx is None and "tie" in ms:
        ms.remove("tie")
        skipped.append("tie (no attribute labels a in the file)")
    if "projection" in ms and np.asarray(es.text_emb_spurious).shape[0] < 2:
        ms.remove("projection")
        skipped.append("projection (needs at least 2 attribute prompts for a difference direction)")
    if es.a is None:
        raise ValueError("the embeddings file has no attribute labels 'a': per-group evaluation needs them "
                         "for the test split (TIE* itself does not)")
    attrs = sorted({*es.attribute_keys, *[v for v in np.unique(np.asarray(es.a)).tolist()]}, key=str)
    res = evaluate_methods(x[pool], x[test], np.asarray(es.y)[test], None if a_idx is None else a_idx[test],
                           es.text_emb_class, es.text_emb_spurious, pool_a=None if a_idx is None else a_idx[pool],
                           methods=ms, group_a=np.asarray(es.a)[test], classes=list(range(len(es.text_emb_class))),
                           attributes=attrs, empty_group=empty_group, attribute_values=es.attribute_keys)
    res["skipped"] = skipped
    res["pool_split"] = pool_split
    res["n_pool"], res["n_test"] = int(pool.size), int(test.size)
    if a_idx is not None:
        res["untranslated_test_images"] = int((a_idx[test] < 0).sum())
    return res


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.2f}"


def metrics_table(res: dict[str, Any]) -> str:
    """Markdown: one row per method, WGA and average accuracy (%)."""
    lines = ["| method | WGA (%) | average (%) | worst group |", "|---|---|---|---|"]
    for m, r in res["methods"].items():
        lines.append(f"| {LABELS.get(m, m)} | {_pct(r['worst_group'])} | {_pct(r['average'])} | {r['worst_group_key']} |")
    return "\n".join(lines)


def per_group_table(res: dict[str, Any]) -> str:
    """Markdown: one row per group (size, accuracy of every method); empty groups are marked."""
    ms = list(res["methods"])
    first = res["methods"][ms[0]]
    lines = ["| group (y, a) | n | " + " | ".join(LABELS.get(m, m) for m in ms) + " |",
             "|---|---|" + "---|" * len(ms)]
    for key, n in first["sizes"].items():
        if n == 0:
            lines.append(f"| {key} | 0 (empty, left out of WGA) | " + " | ".join("—" for _ in ms) + " |")
        else:
            lines.append(f"| {key} | {n} | " + " | ".join(_pct(res["methods"][m]["per_group"][key]) for m in ms) + " |")
    return "\n".join(lines)
