"""Evaluation of attacked images against the target detector (spec "Evaluation metrics").

Per image: bitwise accuracy and matching-bit count ``M`` before/after, double-tail detection
before/after, lower-tail hit, SSIM, PSNR, ℓ∞ and ℓ2 of ``x_adv − x_w`` (on ``[0, 1]``). Summary:
means, detection rates, the evasion rate over images detected before the attack (undefined, with
the reason, when there are none), and the stop reasons of the attack when given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .detect import double_tail_threshold, evasion_summary, matching_bits
from .quality import image_quality

__all__ = ["evaluate_images", "summarize_records", "decode_batched", "summary_table"]


@torch.no_grad()
def decode_batched(model, x: Tensor, batch_size: int = 256) -> Tensor:
    """``model.decode`` (or ``model(x)``) over ``x`` in batches; ``[N, n]``."""
    dec = model.decode if hasattr(model, "decode") else model
    dev = x.device
    try:
        dev = next(model.parameters()).device
    except (AttributeError, StopIteration):
        pass
    return torch.cat([dec(x[i:i + batch_size].to(dev)).cpu() for i in range(0, x.shape[0], batch_size)])


@torch.no_grad()
def evaluate_images(target, x_w: Tensor, x_adv: Tensor, messages: Tensor, *, fpr: float = 1e-4,
                    names: Sequence[str] | None = None, iterations: Tensor | None = None,
                    stop_reason: Sequence[str] | None = None, surrogate_bit_acc: Tensor | None = None,
                    ssim_stop: float = 0.9) -> list[dict[str, Any]]:
    """Per-image records for released images ``x_adv`` of watermarked images ``x_w``.

    Args:
        target: the target model (``.decode``) whose detector is evaluated.
        x_w, x_adv: ``[N,3,H,W]`` in ``[-1,1]``.
        messages: ``[N, n]`` or ``[n]`` owner's messages in {0,1}.
        fpr: detector false-positive rate (sets the double-tail counts).
        iterations, stop_reason, surrogate_bit_acc: attack diagnostics to copy into the records.

    Returns:
        one dict per image (JSON-ready numbers).
    """
    n = x_w.shape[0]
    d0 = decode_batched(target, x_w)
    d1 = decode_batched(target, x_adv)
    w = messages.float().cpu()
    if w.dim() == 1:
        w = w[None].expand(n, -1)
    hi, lo = double_tail_threshold(d0.shape[1], fpr)
    m0, m1 = matching_bits(d0, w), matching_bits(d1, w)
    q = image_quality(x_w.cpu(), x_adv.cpu())
    nb = d0.shape[1]
    recs = []
    for i in range(n):
        r: dict[str, Any] = {
            "name": names[i] if names is not None else str(i),
            "bit_acc_before": float(m0[i]) / nb, "bit_acc_after": float(m1[i]) / nb,
            "M_before": int(m0[i]), "M_after": int(m1[i]),
            "detected_before": bool(m0[i] >= hi or m0[i] <= lo), "detected_after": bool(m1[i] >= hi or m1[i] <= lo),
            "lower_tail_after": bool(m1[i] <= lo),
            "ssim": float(q["ssim"][i]), "psnr": float(q["psnr"][i]), "linf": float(q["linf"][i]),
            "l2": float(q["l2"][i]), "ssim_below_stop": bool(q["ssim"][i] < ssim_stop),
        }
        if iterations is not None:
            r["iterations"] = int(iterations[i])
        if stop_reason is not None:
            r["stop_reason"] = stop_reason[i]
        if surrogate_bit_acc is not None:
            r["surrogate_bit_acc"] = float(surrogate_bit_acc[i])
        recs.append(r)
    return recs


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def summarize_records(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Summary of :func:`evaluate_images` records: mean bit accuracy before/after, detection rates,
    the evasion rate (``None`` with ``evasion_note`` when nothing was detected before), lower-tail
    rate, mean SSIM/PSNR/ℓ∞/ℓ2, count of SSIM below the stop value, stop reasons, mean iterations.

    Raises:
        ValueError: no records.
    """
    if not recs:
        raise ValueError("no per-image records to summarise")
    before = torch.tensor([r["detected_before"] for r in recs])
    after = torch.tensor([r["detected_after"] for r in recs])
    out: dict[str, Any] = {
        "n_images": len(recs),
        "bit_acc_before": _mean([r["bit_acc_before"] for r in recs]),
        "bit_acc_after": _mean([r["bit_acc_after"] for r in recs]),
        "detection_rate_before": float(before.float().mean()),
        "detection_rate_after": float(after.float().mean()),
        "lower_tail_rate_after": float(torch.tensor([r["lower_tail_after"] for r in recs]).float().mean()),
        "ssim": _mean([r["ssim"] for r in recs]),
        "psnr": _mean([r["psnr"] for r in recs]),
        "linf": _mean([r["linf"] for r in recs]),
        "l2": _mean([r["l2"] for r in recs]),
        "n_ssim_below_stop": sum(bool(r["ssim_below_stop"]) for r in recs),
    }
    out.update(evasion_summary(before, after))
    if "stop_reason" in recs[0]:
        reasons = [r["stop_reason"] for r in recs]
        out["stop_reasons"] = {k: reasons.count(k) for k in ("bit_acc", "ssim", "max_iters")}
    if "iterations" in recs[0]:
        out["iterations"] = _mean([float(r["iterations"]) for r in recs])
    if "surrogate_bit_acc" in recs[0]:
        out["surrogate_bit_acc"] = _mean([r["surrogate_bit_acc"] for r in recs])
    return out


def _f(x: Any, nd: int = 3) -> str:
    if x is None:
        return "undefined"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def summary_table(summary: dict[str, Any]) -> str:
    """Markdown table of a summary (one metric per row)."""
    rows = [("images", summary["n_images"]), ("bit accuracy before", summary["bit_acc_before"]),
            ("bit accuracy after", summary["bit_acc_after"]),
            ("detection rate before", summary["detection_rate_before"]),
            ("detection rate after", summary["detection_rate_after"]),
            ("evasion rate", summary["evasion_rate"]), ("lower-tail rate after", summary["lower_tail_rate_after"]),
            ("SSIM", summary["ssim"]), ("PSNR (dB)", summary["psnr"]), ("l_inf [0,1]", summary["linf"]),
            ("l_2 [0,1]", summary["l2"]), ("SSIM below stop", summary["n_ssim_below_stop"])]
    if "iterations" in summary:
        rows.append(("mean iterations", summary["iterations"]))
    if "stop_reasons" in summary:
        rows.append(("stop reasons", ", ".join(f"{k} {v}" for k, v in summary["stop_reasons"].items())))
    lines = ["| metric | value |", "|---|---|"] + [f"| {k} | {_f(v)} |" for k, v in rows]
    if summary.get("evasion_note"):
        lines.append(f"\nNote: {summary['evasion_note']}")
    return "\n".join(lines) + "\n"
