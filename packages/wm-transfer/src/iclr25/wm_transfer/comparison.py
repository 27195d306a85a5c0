"""The comparison of the transfer attack with its baselines on the same images and messages
(the ``compare`` command and the reproduction's comparison job), and its Markdown table."""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .attack import AttackResult, random_sign_noise, transfer_attack, whitebox_attack
from .baselines import POST_PROCESSING, match_quality
from .checkpoint import load_watermark_model
from .data import load_cifar_role
from .detect import bit_accuracy, double_tail_threshold, is_detected
from .evaluation import decode_batched, evaluate_images, summarize_records
from .models import WatermarkModel

__all__ = ["surrogate_subsets", "mean_sd", "run_comparison", "comparison_table", "comparison_job"]

log = logging.getLogger(__name__)


def surrogate_subsets(n_surrogates: int, m: int, k: int) -> list[tuple[int, ...]]:
    """Up to ``k`` distinct subsets of size ``m`` of ``range(n_surrogates)``: cyclic windows starting at
    ``0, m, 2m, ...`` (mod n), e.g. n = 3, m = 2 → (0,1), (2,0), (1,2); m = 1 → (0,), (1,), (2,).

    Raises:
        ValueError: ``m`` outside ``[1, n_surrogates]``.
    """
    if not 1 <= m <= n_surrogates:
        raise ValueError(f"m={m} must be in [1, {n_surrogates}] (the number of surrogates)")
    out: list[tuple[int, ...]] = []
    seen: set[frozenset[int]] = set()
    start = 0
    for _ in range(n_surrogates * max(1, k)):
        sub = tuple((start + i) % n_surrogates for i in range(m))
        start += m
        if frozenset(sub) in seen:
            start += 1
            continue
        seen.add(frozenset(sub))
        out.append(sub)
        if len(out) == k:
            break
    return out


def mean_sd(values: Sequence[float | None]) -> tuple[float, float, int]:
    """Mean, sample standard deviation (0 for a single value) and count of the defined values
    (``nan`` mean when none)."""
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    if not v:
        return float("nan"), float("nan"), 0
    return statistics.fmean(v), (statistics.stdev(v) if len(v) > 1 else 0.0), len(v)


def _row_summary(target, x_w: Tensor, x_adv: Tensor, w: Tensor, fpr: float, ssim_stop: float,
                 res: AttackResult | None = None, surrogates: Sequence | None = None,
                 targets: Sequence[Tensor] | None = None) -> dict[str, Any]:
    recs = evaluate_images(target, x_w, x_adv, w, fpr=fpr, ssim_stop=ssim_stop,
                           iterations=None if res is None else res.iterations,
                           stop_reason=None if res is None else res.stop_reason,
                           surrogate_bit_acc=None if res is None else res.surrogate_bit_acc)
    s = summarize_records(recs)
    if res is None and surrogates is not None and targets is not None:
        with torch.no_grad():
            accs = [bit_accuracy(decode_batched(m, x_adv), t.cpu()) for m, t in zip(surrogates, targets)]
        s["surrogate_bit_acc"] = float(torch.stack(accs).mean())
    return s


def run_comparison(target: WatermarkModel, surrogates: Sequence[WatermarkModel], x_w: Tensor, w: Tensor, *,
                   alpha: float, r: float, eps: float, max_iters: int, ssim_stop: float,
                   m_values: Sequence[int] = (1, 2), n_subsets: int = 3, sign_alpha: float = 0.01,
                   r_tight: float | None = 0.1, fpr: float = 1e-4, seed: int = 0,
                   post_processing: Sequence[str] = POST_PROCESSING, whitebox: bool = True,
                   quiet: bool | None = None,
                   on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Transfer attack per m and subset, and its baselines, on the same ``x_w`` / messages ``w``.

    Rows: ``transfer`` per m (each subset one "seed"); at the largest m per subset: ``sign`` (PGD
    sign steps of ``sign_alpha``), ``clip`` (clip projection), ``tight_rescale`` / ``tight_clip`` (both at
    ``r_tight``, where the ℓ∞ bound binds), ``random_noise`` (random ±a noise with each image's ℓ∞
    of the attack; surrogate bit accuracy against the same targets), ``postprocess[kind]`` matched to
    that subset's mean SSIM; once: ``whitebox`` (ε as given) and ``whitebox_eps0`` (run to full inversion).

    ``on_row(partial)`` (optional) is called after every finished row with the result so far (the same
    layout, rows still missing absent), e.g. to save a long run's progress.

    Returns:
        dict of rows (summaries as :func:`~.evaluation.summarize_records`, with ``subset``) plus
        ``clean`` (bit accuracy / detection on ``x_w`` and on covers is the caller's) and ``params``.
    """
    from iclr25.core.progress import progress

    device = next(target.parameters()).device
    x_w = x_w.cpu()
    w = w.cpu()
    xd = x_w.to(device)
    kw = dict(alpha=alpha, r=r, eps=eps, max_iters=max_iters, ssim_stop=ssim_stop)
    out: dict[str, Any] = {"params": dict(kw, m_values=list(m_values), n_subsets=n_subsets, sign_alpha=sign_alpha,
                                          r_tight=r_tight, fpr=fpr, seed=seed,
                                          thresholds=list(double_tail_threshold(target.n_bits, fpr)))}
    with torch.no_grad():
        d0 = decode_batched(target, x_w)
    out["clean"] = {"bit_acc": float(bit_accuracy(d0, w).mean()),
                    "detection_rate": float(is_detected(d0, w, fpr=fpr).float().mean())}
    m_max = max(m_values)
    out["transfer"] = {}
    jobs = [(m, sub) for m in m_values for sub in surrogate_subsets(len(surrogates), m, n_subsets)]
    largest: list[tuple[tuple[int, ...], AttackResult]] = []
    for m, sub in progress(jobs, desc="transfer attacks", unit="run", quiet=quiet):
        res = transfer_attack(xd, [surrogates[i] for i in sub], **kw)
        s = _row_summary(target, x_w, res.x_adv.cpu(), w, fpr, ssim_stop, res)
        s["subset"] = list(sub)
        s["stop_counts"] = res.stop_counts()
        out["transfer"].setdefault(str(m), []).append(s)
        if on_row is not None:
            on_row(out)
        if m == m_max:
            largest.append((sub, res))
    rows: dict[str, list[dict[str, Any]]] = {"sign": [], "clip": [], "tight_rescale": [], "tight_clip": [],
                                             "random_noise": []}
    pp: dict[str, list[dict[str, Any]]] = {k: [] for k in post_processing}
    if on_row is not None:  # the partial result shows the baseline rows as they fill
        out.update(rows)
        out["postprocess"] = pp
    g = torch.Generator().manual_seed(seed)
    for sub, res in progress(largest, desc="baselines", unit="subset", quiet=quiet):
        sm = [surrogates[i] for i in sub]
        variants = [("sign", dict(kw, alpha=sign_alpha, update="sign")), ("clip", dict(kw, projection="clip"))]
        if r_tight is not None:
            variants += [("tight_rescale", dict(kw, r=r_tight)), ("tight_clip", dict(kw, r=r_tight, projection="clip"))]
        for name, vkw in variants:
            rv = transfer_attack(xd, sm, **vkw)
            s = _row_summary(target, x_w, rv.x_adv.cpu(), w, fpr, ssim_stop, rv)
            s["subset"] = list(sub)
            rows[name].append(s)
            if on_row is not None:
                on_row(out)
        a = res.delta.flatten(1).abs().max(1).values.cpu()
        x_rand = random_sign_noise(x_w, a, g)
        s = _row_summary(target, x_w, x_rand, w, fpr, ssim_stop, None, sm, res.targets)
        s["subset"] = list(sub)
        rows["random_noise"].append(s)
        tgt_ssim = float(res.ssim.mean())
        for kind in post_processing:
            mr = match_quality(x_w, kind, min(tgt_ssim, 1.0), seed=seed)
            s = _row_summary(target, x_w, mr.x, w, fpr, ssim_stop)
            s.update(subset=list(sub), strength=mr.strength, matched_ssim=mr.ssim, target_ssim=tgt_ssim,
                     range_exhausted=mr.reached)
            pp[kind].append(s)
        if on_row is not None:
            on_row(out)
    out.update(rows)
    out["postprocess"] = pp
    if whitebox:
        for name, e in (("whitebox", eps), ("whitebox_eps0", 0.0)):
            rw = whitebox_attack(xd, target, **dict(kw, eps=e))
            out[name] = _row_summary(target, x_w, rw.x_adv.cpu(), w, fpr, ssim_stop, rw)
            out[name]["stop_counts"] = rw.stop_counts()
            if on_row is not None:
                on_row(out)
    return out


def _agg(rows: Sequence[dict[str, Any]], key: str) -> tuple[float, float, int]:
    return mean_sd([r.get(key) for r in rows])


def comparison_table(comp: dict[str, Any]) -> str:
    """Markdown table of :func:`run_comparison`: evasion, target bit accuracy after, lower-tail rate,
    SSIM, PSNR, ℓ∞ — mean ± sd over subsets."""
    def fmt(rows: Sequence[dict[str, Any]], key: str, nd: int = 3) -> str:
        m, s, k = _agg(rows, key)
        if k == 0:
            return "undefined"
        return f"{m:.{nd}f} ± {s:.{nd}f}" if len(rows) > 1 else f"{m:.{nd}f}"

    lines = ["| attack | runs | evasion | target bit acc after | lower tail | SSIM | PSNR (dB) | l_inf [0,1] |",
             "|---|---|---|---|---|---|---|---|"]

    def add(name: str, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        lines.append(f"| {name} | {len(rows)} | {fmt(rows, 'evasion_rate')} | {fmt(rows, 'bit_acc_after')} | "
                     f"{fmt(rows, 'lower_tail_rate_after')} | {fmt(rows, 'ssim')} | {fmt(rows, 'psnr', 1)} | "
                     f"{fmt(rows, 'linf')} |")

    m_max = max(int(k) for k in comp["transfer"])
    for m, rows in comp["transfer"].items():
        add(f"transfer m={m}", rows)
    add(f"sign-gradient m={m_max}", comp.get("sign", []))
    add(f"clip projection m={m_max}", comp.get("clip", []))
    rt = comp["params"].get("r_tight")
    add(f"rescale, r={rt} m={m_max}", comp.get("tight_rescale", []))
    add(f"clip, r={rt} m={m_max}", comp.get("tight_clip", []))
    add("random ±r noise (equal l_inf)", comp.get("random_noise", []))
    for kind, rows in comp.get("postprocess", {}).items():
        add(f"{kind} (matched SSIM)", rows)
    for name in ("whitebox", "whitebox_eps0"):
        if name in comp:
            add(name.replace("_eps0", " (eps=0, full inversion)"), [comp[name]])
    return "\n".join(lines) + "\n"


def comparison_job(settings: dict[str, Any], seed: int, deps: dict[str, Any]) -> dict[str, Any]:
    """Runner job of the reproduction: one target's :func:`run_comparison` on the first
    ``settings["n_images"]`` test images, watermarked with the target's own message.

    ``settings``: ``target`` and ``surrogates`` (model paths), ``n_images``, ``m_values``, ``n_subsets``,
    ``attack`` (α, r, ε, T, SSIM stop), ``device``, ``partial`` (a file that holds the rows finished so far
    while the job runs: progress only, removed at the end). ``deps["decoder_check"]`` is the decoder check's
    record: when it failed, nothing is attacked and the record says so (``{"skipped": ...}``).

    Returns:
        the comparison (:func:`run_comparison`) with ``covers`` (the target decoding the unwatermarked
        covers: ``bit_acc``, ``false_positive_rate``); undefined numbers are ``None``.
    """
    from iclr25.core.runner import nan_to_none

    check = deps.get("decoder_check")
    if check is not None and not check["passed"]:
        return {"skipped": "decoder check failed: " + str(check["error"])}
    torch.manual_seed(seed)
    dev = torch.device(settings.get("device", "cpu"))
    target = load_watermark_model(settings["target"], dev)
    surs = [load_watermark_model(q, dev) for q in settings["surrogates"]]
    test = load_cifar_role("test", settings["n_images"], seed=0).images
    w = target.message.cpu()[None].expand(test.shape[0], -1)
    with torch.no_grad():
        x_w = torch.cat([target.embed(test[i:i + 256].to(dev)).cpu() for i in range(0, test.shape[0], 256)])
        d_cov = decode_batched(target, test)
    covers = {"bit_acc": float(bit_accuracy(d_cov, w).mean()),
              "false_positive_rate": float(is_detected(d_cov, w).float().mean())}
    partial = Path(settings["partial"]) if settings.get("partial") else None

    def _write(comp: dict[str, Any]) -> None:
        assert partial is not None
        tmp = partial.with_name(partial.name + ".tmp")
        tmp.write_text(json.dumps({"complete": False, "comparison": nan_to_none(dict(comp, covers=covers))},
                                  indent=2, default=float) + "\n")
        os.replace(tmp, partial)

    comp = run_comparison(target, surs, x_w, w, m_values=tuple(settings["m_values"]), n_subsets=settings["n_subsets"],
                          seed=seed, post_processing=POST_PROCESSING, quiet=True,
                          on_row=_write if partial is not None else None, **settings["attack"])
    comp["covers"] = covers
    if partial is not None:
        partial.unlink(missing_ok=True)
    return nan_to_none(comp)

