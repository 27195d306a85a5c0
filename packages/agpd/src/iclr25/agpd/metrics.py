"""Detection metrics (BackdoorBench's CSV columns: TN, FP, FN, TP, TPR, FPR, F1, AUC)."""

from __future__ import annotations

import numpy as np

__all__ = ["detection_metrics"]


def detection_metrics(true_mask, pred_mask) -> dict[str, float]:
    """Confusion counts and rates of a binary poisoned-sample detection.

    Args:
        true_mask: ``(N,)`` bool, True = poisoned. pred_mask: ``(N,)`` bool, True = flagged.

    Returns:
        ``{"tp", "fp", "fn", "tn", "TPR", "FPR", "precision", "F1", "AUC"}``; rates in [0, 1]
        (``AUC`` of the 0/1 decision = ``(TPR + 1 - FPR) / 2``). A rate whose denominator is 0
        is 0 (no poisoned sample -> TPR 0; nothing flagged -> precision 0).

    Raises:
        ValueError: if the masks differ in length.
    """
    t = np.asarray(true_mask, dtype=bool).ravel()
    p = np.asarray(pred_mask, dtype=bool).ravel()
    if t.shape != p.shape:
        raise ValueError(f"true_mask has {t.size} entries but pred_mask {p.size}")
    tp = int(np.sum(t & p))
    fp = int(np.sum(~t & p))
    fn = int(np.sum(t & ~p))
    tn = int(np.sum(~t & ~p))

    def div(a: float, b: float) -> float:
        return a / b if b else 0.0

    tpr, fpr, prec = div(tp, tp + fn), div(fp, fp + tn), div(tp, tp + fp)
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "TPR": tpr, "FPR": fpr, "precision": prec,
            "F1": div(2 * prec * tpr, prec + tpr), "AUC": (tpr + 1.0 - fpr) / 2.0}
