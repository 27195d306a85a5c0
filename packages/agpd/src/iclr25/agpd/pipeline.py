"""End-to-end experiment: poison -> train -> AGPD (both variants) + baselines -> metrics.

Used by ``reproduce`` and the CLI; every step is also available on its own (``attacks``,
``train``, ``detector``, ``baselines``, ``metrics``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from .attacks import attack_success_rate, make_trigger, poison
from .baselines import activation_clustering, spectral_signatures
from .config import AGPDConfig
from .data import ImageData, split_clean_set
from .detector import clean_bases, detect_from_gradients, filter_target_class
from .gcd import closeness, cosine, far_end_indices
from .gradients import activation_gradients, penultimate_features, predict
from .metrics import detection_metrics
from .models import candidate_layers, preact_resnet18, small_preact_cnn
from .train import accuracy, train_classifier

__all__ = ["build_model", "poison_dataset", "run_experiment", "planted_target_check", "oracle_auroc", "DETECTORS", "detector_config",
           "inclass_separation"]

#: Named detector settings run by :func:`run_experiment`: the paper's text, the official code, and the
#: official code with the paper's ``m`` extension at a CPU-scale size (m = 10 % of each class).
DETECTORS: dict[str, dict] = {
    "backdoorbench": dict(variant="backdoorbench"),  # the default detector (official code)
    "paper": dict(variant="paper"),
    "backdoorbench-m10": dict(variant="backdoorbench", m_fraction=0.1),
}


def detector_config(name: str) -> AGPDConfig:
    """The :class:`AGPDConfig` of a named detector setting (:data:`DETECTORS`)."""
    if name not in DETECTORS:
        raise ValueError(f"unknown detector {name!r}; choose from {list(DETECTORS)}")
    return AGPDConfig(**DETECTORS[name])


def inclass_separation(grads: torch.Tensor, is_poison: torch.Tensor) -> dict:
    """Geometry of one class's activation gradients ``(n, C)`` with a poison mask ``(n,)``: the angle
    (degrees) between the poisoned and the clean mean gradient, the clean samples' mean angle to
    their own mean (the cloud's spread), and their ratio (> 1: the poisoned mean lies outside the
    clean cloud, the two-cluster GCD the paper's statistic rests on, Sec. 4.1)."""
    if not is_poison.any() or is_poison.all():
        return {"angle_deg": None, "clean_spread_deg": None, "ratio": None}
    g = grads.double()
    mp, mc = g[is_poison].mean(0), g[~is_poison].mean(0)
    ang = float(torch.rad2deg(torch.arccos(cosine(mp[None], mc)[0])))
    spread = float(torch.rad2deg(torch.arccos(cosine(g[~is_poison], mc))).mean())
    return {"angle_deg": ang, "clean_spread_deg": spread, "ratio": ang / spread if spread > 0 else None}

log = logging.getLogger("iclr25.agpd")


def build_model(kind: str, num_classes: int, in_channels: int) -> nn.Module:
    """``"small"`` (CPU-scale Preact CNN) or ``"preactresnet18"``."""
    if kind == "small":
        return small_preact_cnn(num_classes, in_channels)
    if kind == "preactresnet18":
        return preact_resnet18(num_classes, in_channels)
    raise ValueError(f"unknown model {kind!r}; choose 'small' or 'preactresnet18'")


def poison_dataset(data: ImageData, attack: str, ratio: float = 0.1, target: int = 0, alpha: float = 0.2,
                   patch_size: int | None = None, seed: int = 0):
    """Poison ``data``'s training split. ``attack``: ``badnets``, ``blended``, their ``-a2a``
    (all-to-all) forms, or ``clean`` (no poisoning).

    Returns:
        ``(x_bd, y_bd, poison_mask, trigger or None, target or None)``.

    Raises:
        ValueError: an unknown attack, or a target that is not a class of ``data``.
    """
    if attack == "clean":
        return data.x_train, data.y_train, torch.zeros(len(data.y_train), dtype=torch.bool), None, None
    base, _, mode = attack.partition("-")
    if mode not in ("", "a2a"):
        raise ValueError(f"unknown attack {attack!r}")
    if not 0 <= target < data.num_classes:
        raise ValueError(f"target {target} is not a class of this data set: use 0..{data.num_classes - 1}")
    trig = make_trigger(base, data.image_shape, seed, patch_size, alpha)
    tgt = None if mode == "a2a" else target
    x_bd, y_bd, mask = poison(data.x_train, data.y_train, trig, ratio, tgt, seed, data.num_classes)
    return x_bd, y_bd, mask, trig, tgt


def oracle_auroc(grads: torch.Tensor, base: torch.Tensor, is_poison: torch.Tensor) -> float:
    """Diagnostic: AUROC of ``1 - closeness`` (far end = the farthest sample) for separating the
    poisoned from the clean samples of the *true* target class (Stage 3's raw material)."""
    from sklearn.metrics import roc_auc_score

    if is_poison.all() or not is_poison.any():
        return float("nan")
    s = closeness(grads, base, grads[far_end_indices(grads, base, 1)[0]])
    return float(roc_auc_score(is_poison.numpy(), -s.numpy()))


def planted_target_check(grads: dict[str, torch.Tensor], labels: torch.Tensor, clean_grads: dict[str, torch.Tensor],
                         clean_labels: torch.Tensor, cfg: AGPDConfig, clean_correct: torch.Tensor | None,
                         num_classes: int, target: int = 0, seed: int = 0, share: float = 0.1) -> dict:
    """A case where the target is certain, on a real model's gradients: in class ``target``, a seeded
    ``share`` of the samples get their gradient negated at every layer (a cluster pointing away from
    the clean one, as the paper's Fig. 2 draws the poisoned samples), then the same detector runs.
    Pairs the clean control's "no target named" with a check that the same thresholds do name a
    target when one is there. Returns the named targets, the planted class's z at the chosen layer and
    whether it came from the z-score or the ``rho`` fallback, and Stage 3's TPR/FPR on the plant."""
    idx = torch.nonzero(labels == target).flatten()
    g = torch.Generator().manual_seed(seed)
    planted = idx[torch.randperm(len(idx), generator=g)[: max(1, round(share * len(idx)))]]
    mask = torch.zeros(len(labels), dtype=torch.bool)
    mask[planted] = True
    sign = torch.where(mask, -1.0, 1.0)[:, None]
    pg = {n: v * sign.to(v.dtype) for n, v in grads.items()}
    res = detect_from_gradients(pg, labels, clean_grads, clean_labels, cfg, clean_correct, num_classes)
    li = res.layers.index(res.layer)
    return {"targets": res.target_classes, "fallback": res.fallback, "layer": res.layer,
            "z_target": float(res.z[li, target]), "n_planted": int(mask.sum()),
            **{k: v for k, v in detection_metrics(mask, res.poison_mask).items() if k in ("TPR", "FPR", "F1")}}


def run_experiment(data: ImageData, attack: str, *, ratio: float = 0.1, target: int = 0, epochs: int = 30,
                   model: str = "small", batch_size: int = 128, lr: float = 0.01, augment: bool = False,
                   clean_per_class: int = 10, variants: tuple[str, ...] = tuple(DETECTORS),
                   baselines: tuple[str, ...] = ("spectral", "ac"), seed: int = 0, device: str = "cpu",
                   checkpoint: str | Path | None = None, resume: bool = False, progress: bool = False) -> dict:
    """One attack, end to end. Returns a JSON-ready dict: clean accuracy ``acc`` and ``asr`` (in
    [0, 1]), ``agpd[variant]`` (metrics + summary), ``baselines[name]`` (metrics), the oracle
    closeness AUROC per layer, and timings."""
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    x_clean, y_clean, x_eval, y_eval = split_clean_set(data.x_test, data.y_test, clean_per_class, seed)
    x_bd, y_bd, pmask, trig, tgt = poison_dataset(data, attack, ratio, target, seed=seed)
    net = build_model(model, data.num_classes, data.image_shape[0])
    train_classifier(net, x_bd, y_bd, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, augment=augment,
                     device=device, checkpoint=checkpoint, resume=resume, progress=progress)
    t_train = time.perf_counter() - t0
    out: dict = {"attack": attack, "data": data.name, "n_train": len(y_bd), "n_poison": int(pmask.sum()),
                 "acc": accuracy(net, x_eval, y_eval),
                 "asr": (attack_success_rate(net, x_eval, y_eval, trig, tgt, data.num_classes)
                         if trig is not None else None)}
    layers = candidate_layers(net)
    grads = activation_gradients(net, x_bd, y_bd, layers, progress=progress)
    cgrads = activation_gradients(net, x_clean, y_clean, layers)
    correct = predict(net, x_clean) == y_clean
    out["agpd"] = {}
    for v in variants:
        cfg = detector_config(v)
        res = detect_from_gradients(grads, y_bd, cgrads, y_clean, cfg, correct, data.num_classes)
        out["agpd"][v] = {**detection_metrics(pmask, res.poison_mask), **res.summary(), "config": asdict(cfg)}
        if tgt is not None:  # where the true target ranks, at the layer where its z is highest
            zt = res.z[:, tgt]
            bl = int(torch.argmax(torch.nan_to_num(zt, posinf=1e300)))
            row = torch.nan_to_num(res.z[bl], posinf=1e300, neginf=-1e300)
            out["agpd"][v]["target_z"] = float(zt[bl])
            out["agpd"][v]["target_rank"] = int((row > row[tgt]).sum()) + 1
            out["agpd"][v]["target_z_layer"] = layers[bl]
        if tgt is not None:  # Stage 3 alone, told the true target: at its highest-z layer, and at every layer
            sel = torch.nonzero(y_bd == tgt).flatten()
            per_layer = {}
            for layer in layers:
                base = clean_bases(cgrads[layer], y_clean, data.num_classes, cfg.basis, correct, cfg.seed)[tgt]
                fr = filter_target_class(grads[layer][sel], base, cfg)
                given = torch.zeros_like(pmask)
                given[sel[fr.poison]] = True
                per_layer[layer] = {"layer": layer, "js_len": len(fr.js), "stop": fr.stop,
                                    **detection_metrics(pmask, given)}
            out["agpd"][v]["given_target"] = per_layer[layers[int(torch.argmax(res.z[:, tgt]))]]
            out["agpd"][v]["given_target_per_layer"] = per_layer
        if attack == "clean":  # the same detector where a target is certain: a planted split in class `target`
            out["agpd"][v]["planted"] = planted_target_check(grads, y_bd, cgrads, y_clean, cfg, correct,
                                                             data.num_classes, target, seed)
    feats = penultimate_features(net, x_bd)
    out["baselines"] = {}
    for b in baselines:
        if b == "spectral":
            flag = spectral_signatures(feats, y_bd, ratio)
        elif b == "ac":
            flag = activation_clustering(feats, y_bd, seed=seed)
        else:
            raise ValueError(f"unknown baseline {b!r}; choose from 'spectral', 'ac'")
        out["baselines"][b] = detection_metrics(pmask, flag)
    if tgt is not None:
        sel = y_bd == tgt
        out["inclass_separation"] = {n: inclass_separation(grads[n][sel], pmask[sel]) for n in layers}
        out["oracle_auroc"] = {
            n: oracle_auroc(grads[n][sel], clean_bases(cgrads[n], y_clean, data.num_classes, "mean", correct)[tgt],
                            pmask[sel]) for n in layers}
    # diagnostic: how concentrated the GCDs are (cosine of each sample to its class's mean clean basis)
    out["cosine_to_basis"] = {}
    for n in layers:
        b = clean_bases(cgrads[n], y_clean, data.num_classes, "mean", correct)
        c = cosine(grads[n], b)[y_bd, torch.arange(len(y_bd))]
        ck = [c[y_bd == k] for k in range(data.num_classes)]
        out["cosine_to_basis"][n] = {
            "mean": [float(v.mean()) if len(v) else None for v in ck],
            "min": [float(v.min()) if len(v) else None for v in ck],
            "poisoned_mean": float(c[pmask].mean()) if pmask.any() else None}
    out["seconds"] = {"train": t_train, "total": time.perf_counter() - t0}
    return out
