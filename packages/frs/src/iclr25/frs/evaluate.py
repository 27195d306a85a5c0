"""Evaluate one arm on clean and triggered texts: CA / PA / ASR (plain majority vote, Table 1), hit
rate, and certificates with abstention rates beside the mean radius; per-text records for JSONL."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from .certification import certify, summarize_certificates
from .metrics import (
    attack_success_rate,
    clean_accuracy,
    poisoned_accuracy,
    segment_contains,
    trigger_hit_rate,
)

__all__ = ["evaluate_arm", "text_records", "per_class_metrics"]


def evaluate_arm(clf, clean: Sequence[Sequence[str]], clean_labels: Sequence[int],
                 triggered: Sequence[Sequence[str]] = (), triggered_labels: Sequence[int] = (),
                 spans: Sequence[Sequence[int]] = (), *, target: int = 1, alpha: float = 0.05) -> tuple[dict, list[dict]]:
    """Run an arm (an :class:`~iclr25.frs.smoothing.FRSClassifier`) on both sets.

    Returns:
        ``(metrics, records)``. ``metrics``: ``CA``, ``PA``, ``ASR`` (%), ``hit_rate`` (targeted only),
        ``abstention_clean`` / ``abstention_triggered`` (%), ``mean_radius_*`` and
        ``mean_radius_tokens_*`` (abstained / wrong texts count 0), ``mean_radius_unconditional_*``,
        ``certified_rate_*``, ``short_texts``, ``tie_rate_*``, ``copy_agreement``, ``num_votes``,
        ``warnings`` (few-votes warnings), and the per-class numbers of :func:`per_class_metrics`.
        ``records``: one dict per text (see :func:`text_records`).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vc = clf.predict_many(clean) if len(clean) else []
        vt = clf.predict_many(triggered, indices=range(len(clean), len(clean) + len(triggered))) if len(triggered) else []
        cc = certify(clf, clean, clean_labels, alpha, votes=vc) if len(clean) else []
        ct = certify(clf, triggered, triggered_labels, alpha, votes=vt, offset=len(clean)) if len(triggered) else []
    warn = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)} | set(clf.warnings))
    pc, pt = [v.label for v in vc], [v.label for v in vt]
    sc, st = summarize_certificates(cc), summarize_certificates(ct)
    m = {
        "CA": clean_accuracy(pc, clean_labels) if len(clean) else float("nan"),
        "PA": poisoned_accuracy(pt, triggered_labels, target) if len(triggered) else float("nan"),
        "ASR": attack_success_rate(pt, triggered_labels, target) if len(triggered) else float("nan"),
        "hit_rate": trigger_hit_rate([v.segment for v in vt], spans) if clf.randomization == "targeted" and len(vt)
        else float("nan"),
        "num_votes": clf.num_votes,
        "copy_agreement": float(np.mean([v.copy_agreement for v in (*vc, *vt)])) if (vc or vt) else float("nan"),
        "short_texts": sc["short_texts"] + st["short_texts"],
        "warnings": warn,
    }
    for name, s, votes in (("clean", sc, vc), ("triggered", st, vt)):
        m[f"abstention_{name}"] = s["abstention_rate"]
        m[f"mean_radius_{name}"] = s["mean_radius"]
        m[f"mean_radius_tokens_{name}"] = s["mean_radius_tokens"]
        m[f"mean_radius_unconditional_{name}"] = s["mean_radius_unconditional"]
        m[f"certified_rate_{name}"] = s["certified_rate"]
        m[f"tie_rate_{name}"] = 100.0 * float(np.mean([_tied(v.counts) for v in votes])) if votes else float("nan")
    m.update(per_class_metrics(cc, pc, clean_labels, ct, pt, triggered_labels, target))
    recs = text_records(clean, cc, vc, "clean") + text_records(triggered, ct, vt, "triggered", spans)
    return m, recs


def per_class_metrics(cc, pc, clean_labels, ct, pt, triggered_labels, target: int) -> dict:
    """Per true class c (issue #40): ``CA_c<c>`` (%), ``certified_accuracy_clean_c<c>`` (% of the class's clean
    texts that are correct, not abstained and have a radius > 0), ``wrong_certified_clean_c<c>`` (% certified —
    not abstained, radius > 0 — on a wrong label), ``abstention_clean_c<c>`` (%),
    ``mean_radius_clean_c<c>`` (abstained / wrong count 0), ``n_clean_c<c>``; on triggered texts
    ``ASR_c<c>`` (%) and ``n_triggered_c<c>``. Only classes present in each set appear."""
    out: dict = {}
    y = np.asarray(clean_labels)
    for c in sorted({int(v) for v in clean_labels}):
        idx = np.flatnonzero(y == c)
        sub = [cc[i] for i in idx]
        s = summarize_certificates(sub)
        out[f"n_clean_c{c}"] = int(len(idx))
        out[f"CA_c{c}"] = clean_accuracy([pc[i] for i in idx], [c] * len(idx))
        out[f"certified_accuracy_clean_c{c}"] = s["certified_rate"]
        out[f"wrong_certified_clean_c{c}"] = 100.0 * sum((not x.abstain) and x.radius > 0 and x.label != c
                                                         for x in sub) / len(sub)
        out[f"abstention_clean_c{c}"] = s["abstention_rate"]
        out[f"mean_radius_clean_c{c}"] = s["mean_radius"]
    yt = np.asarray(triggered_labels)
    for c in sorted({int(v) for v in triggered_labels}):
        idx = np.flatnonzero(yt == c)
        out[f"n_triggered_c{c}"] = int(len(idx))
        out[f"ASR_c{c}"] = attack_success_rate([pt[i] for i in idx], [c] * len(idx), target)
    return out


def _tied(counts: np.ndarray) -> bool:
    s = np.sort(counts)[::-1]
    return bool(len(s) > 1 and s[0] == s[1])


def text_records(texts, certs, votes, which: str, spans: Sequence[Sequence[int]] = ()) -> list[dict]:
    """Per-text JSON records: the text, the certificate fields, the MCTS segment and (triggered) the
    trigger span and whether T(x') contains it."""
    out = []
    for i, (t, c, v) in enumerate(zip(texts, certs, votes)):
        r = {"set": which, "text": " ".join(t), **c.to_dict(), "copy_agreement": v.copy_agreement}
        if v.trace is not None:
            r["mcts_evaluations"] = v.trace.evaluations
            r["mcts_mean_reward"] = v.trace.mean_reward
        if spans:
            r["trigger_span"] = [int(spans[i][0]), int(spans[i][1])]
            r["trigger_in_segment"] = segment_contains(v.segment, spans[i]) if v.segment is not None else None
        out.append(r)
    return out
