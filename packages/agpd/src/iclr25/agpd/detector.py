"""AGPD: target-class identification by GCD dispersion and iterative filtering inside the target
class (paper Section 4.2, Algorithm 1, Appendix D.1).

The functional core, :func:`detect_from_gradients`, works on activation gradients alone (so it
runs on synthetic gradients too); :class:`AGPD` computes them from a model first.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from .config import AGPDConfig
from .gcd import closeness, cosine, cvbt
from .gradients import activation_gradients
from .stats import GAMMA, js_between, js_trace, robust_z, select_stop

__all__ = ["check_model_fit", "DetectionResult", "FilterResult", "clean_bases", "cvbt_matrix", "identify_targets",
           "filter_target_class", "detect_from_gradients", "AGPD"]


@dataclass
class FilterResult:
    """Algorithm 1 on one target class.

    Attributes:
        poison: ``(n,)`` bool, samples flagged before the stopping round.
        round_of: ``(n,)`` int64, the round each sample was filtered in (-1: never).
        js: the JS trace ``JS_1..JS_T``; stop: the stopping round ``t*``.
    """

    poison: Tensor
    round_of: Tensor
    js: list[float]
    stop: int


@dataclass
class DetectionResult:
    """Output of AGPD.

    Attributes:
        poison_mask: ``(N,)`` bool over the untrustworthy set, True = detected as poisoned.
        target_classes: identified target labels (empty: the model is declared clean).
        layer: the selected layer ``l*``; layers: all candidate layers (rows of ``rho``/``z``).
        rho: ``(L, K)`` float64 CVBT per layer and class; z: ``(L, K)`` robust z-scores.
        fallback: True when no class reached ``tau_z`` and the ``rho > fallback_rho`` rule was used.
        filters: per target class, the :class:`FilterResult` of Algorithm 1.
    """

    poison_mask: Tensor
    target_classes: list[int]
    layer: str
    layers: list[str]
    rho: Tensor
    z: Tensor
    fallback: bool = False
    filters: dict[int, FilterResult] = field(default_factory=dict)

    @property
    def js(self) -> dict[int, list[float]]:
        """The JS trace of every target class."""
        return {k: f.js for k, f in self.filters.items()}

    def summary(self) -> dict:
        """JSON-ready summary (no per-sample arrays)."""
        li = self.layers.index(self.layer)
        return {"target_classes": self.target_classes, "layer": self.layer, "fallback": self.fallback,
                "n_flagged": int(self.poison_mask.sum()), "rho": self.rho[li].tolist(), "z": self.z[li].tolist(),
                "max_z_per_layer": dict(zip(self.layers, self.z.max(1).values.tolist())),
                "rho_all": dict(zip(self.layers, self.rho.tolist())), "z_all": dict(zip(self.layers, self.z.tolist())),
                "stop": {k: f.stop for k, f in self.filters.items()},
                "js_len": {k: len(f.js) for k, f in self.filters.items()}}


def clean_bases(clean_grads: Tensor, clean_labels: Tensor, num_classes: int, basis: str = "mean",
                clean_correct: Tensor | None = None, seed: int = 0) -> Tensor:
    """Clean basis ``g(x_0^k, k)`` of every class -> ``(K, C)``.

    ``basis="single"`` (paper): one clean sample per class (seeded choice among the correctly
    classified ones); ``"mean"`` (official code): the mean over the correctly classified ones.
    Classes without a correctly classified clean sample use all their clean samples.

    Raises:
        ValueError: if a class has no clean sample (the defender needs at least one per class).
    """
    if basis not in ("single", "mean"):
        raise ValueError(f"basis must be 'single' or 'mean', got {basis!r}")
    rng = np.random.default_rng(seed)
    out = torch.empty(num_classes, clean_grads.shape[1], dtype=clean_grads.dtype)
    for k in range(num_classes):
        idx = torch.nonzero(clean_labels == k).flatten()
        if len(idx) == 0:
            raise ValueError(f"the clean set has no sample of class {k}; AGPD needs at least one per class")
        if clean_correct is not None and clean_correct[idx].any():
            idx = idx[clean_correct[idx]]
        out[k] = clean_grads[idx].mean(0) if basis == "mean" else clean_grads[idx[int(rng.integers(len(idx)))]]
    return out


def cvbt_matrix(grads: Mapping[str, Tensor], labels: Tensor, bases: Mapping[str, Tensor], num_classes: int,
                m: int = 1, include_far: bool = True, m_fraction: float | None = None) -> Tensor:
    """Eq. (3) for every layer and class -> ``(L, K)`` float64 (0 for a class without samples).

    ``m`` far-end vectors are averaged (the Remark after Eq. 4); with ``m_fraction`` a class of
    ``n_k`` samples uses ``ceil(m_fraction * n_k)`` of them."""
    rho = torch.zeros(len(grads), num_classes, dtype=torch.float64)
    for i, name in enumerate(grads):
        for k in range(num_classes):
            Gk = grads[name][labels == k]
            if len(Gk):
                mk = math.ceil(m_fraction * len(Gk)) if m_fraction is not None else m
                rho[i, k] = cvbt(Gk, bases[name][k], m=max(1, min(mk, len(Gk))), include_far=include_far)
    return rho


def identify_targets(rho: Tensor, cfg: AGPDConfig) -> tuple[int, list[int], Tensor, bool]:
    """Stage 2: robust z-score per layer, ``l* = argmax_l max_k z``, targets ``z >= tau_z``; when
    none, the ``rho > fallback_rho`` fallback (paper: at ``l*``; official code: the layer among the
    last three with the most such classes).

    Returns:
        ``(layer index, target classes, z (L, K), fallback used)``.
    """
    if rho.shape[1] <= 2 and cfg.tau_z > 1 / GAMMA:
        msg = (f"{rho.shape[1]} classes: the robust z-score is at most 1/1.4826 = 0.674 whatever rho is (the "
               f"median of {rho.shape[1]} values and their MAD), below tau_z = {cfg.tau_z:.4g}, so Stage 2 names a "
               "target only through the rho > fallback_rho rule; AGPD needs 3 or more classes to identify one")
        warnings.warn(msg, UserWarning, stacklevel=3)  # once: a log line of the same text printed it twice
    z = torch.stack([robust_z(r, one_sided=cfg.one_sided_z, eps=cfg.z_eps) for r in rho])
    zmax = torch.nan_to_num(z, posinf=1e300, neginf=-1e300).max(1).values
    li = int(torch.argmax(zmax))
    targets = torch.nonzero(z[li] >= cfg.tau_z).flatten().tolist()
    fallback = False
    if not targets and cfg.fallback_rho is not None:
        rows = [li] if cfg.fallback_layers == "best" else list(range(max(0, len(rho) - 3), len(rho)))
        counts = [int((rho[r] > cfg.fallback_rho).sum()) for r in rows]
        best = rows[int(np.argmax(counts))]
        if max(counts) > 0:
            li, fallback = best, True
            targets = torch.nonzero(rho[best] > cfg.fallback_rho).flatten().tolist()
    return li, targets, z, fallback


def filter_target_class(G: Tensor, g0: Tensor, cfg: AGPDConfig) -> FilterResult:
    """Algorithm 1 (Stage 3) on one target class, as the official code runs it (BackdoorBench
    ``detection_pretrain/agpd.py`` with ``stage1_new`` and ``find_small_and_smooth_window_start``).

    - Round 0: the sample(s) least cosine-similar to ``g0`` (the far end ``x_{n*}``) alone. The first
      closeness list is the *raw* closeness (Eq. 4) of every other sample against it.
    - Round ``t >= 1``: far end = mean gradient of every sample flagged so far (``far_update="mean"``;
      ``"fixed"`` keeps ``x_{n*}``); raw closeness ``s`` of the samples not yet flagged; they leave
      when ``s < tau_s`` (paper) or, with ``normalize_closeness``, when the min-max normalised value
      is ``<= tau_s`` (official; a round whose values are all equal removes them all). The loop ends
      when a round removes nothing or nothing is left.
    - After each round that removed samples, ``JS_t`` compares the density histograms (``cfg.bins``
      bins on [0, 1]) of the previous list and of the *raw* closeness of this round's *survivors*,
      which then become the previous list; a round that leaves no survivor gives ``JS_t = 1``, as in
      the official code. ``js_values="remaining"`` is the package's earlier reading (a named variant,
      not the official one): the thresholded values (min-max normalised when ``normalize_closeness``)
      of *all* samples entering each round, compared round to round.
    - :func:`~iclr25.agpd.stats.select_stop` gives ``t*`` (window start: official, middle: paper);
      the samples of rounds ``0 .. t*-1`` are poisoned. A trace shorter than the window, which the
      official code rejects, is handled as ``select_stop`` documents.

    Args:
        G: ``(n, C)`` activation gradients of the class; g0: ``(C,)`` clean basis.
        cfg: :class:`AGPDConfig`.

    Returns:
        :class:`FilterResult` (``round_of``: 0 for the initial far end, ``t`` for round ``t``).
    """
    n = len(G)
    round_of = torch.full((n,), -1, dtype=torch.long)
    if n == 0:
        return FilterResult(torch.zeros(0, dtype=torch.bool), round_of, [], 0)
    G = G.detach().double()
    c0 = cosine(G, g0)
    round_of[c0 == c0.min()] = 0
    far = G[round_of == 0].mean(0)
    prev = closeness(G[round_of < 0], g0, far)
    entering: list[np.ndarray] = []  # js_values="remaining": the thresholded values of every round
    js: list[float] = []
    t = 1
    while (round_of < 0).any():
        rest = torch.nonzero(round_of < 0).flatten()
        s = closeness(G[rest], g0, far)
        if cfg.normalize_closeness:
            lo, hi = s.min(), s.max()
            v = (s - lo) / (hi - lo) if hi > lo else torch.zeros_like(s)
            leave = v <= cfg.tau_s
        else:
            v = s
            leave = s < cfg.tau_s
        entering.append(v.numpy())
        if not leave.any():
            break
        round_of[rest[leave]] = t
        surv = s[~leave]
        if cfg.js_values == "survivors":
            js.append(1.0 if len(prev) == 0 or len(surv) == 0
                      else js_between(surv, prev, bins=cfg.bins, distance=cfg.js_distance))
        prev = surv
        if cfg.far_update == "mean":
            far = G[round_of >= 0].mean(0)
        t += 1
    if cfg.js_values == "remaining":
        js = js_trace(entering, bins=cfg.bins, distance=cfg.js_distance)
    exhausted = not (round_of < 0).any()
    stop = select_stop(js, cfg.window, cfg.beta, cfg.stop_rule, exhausted=exhausted,
                       ends_empty=exhausted and cfg.js_values == "survivors")
    return FilterResult((round_of >= 0) & (round_of < stop), round_of, js, stop)


#: Clean accuracy below this multiple of chance (1/K) makes :func:`check_model_fit` warn.
NEAR_CHANCE = 2.0


def check_model_fit(clean_acc: float, num_classes: int, n_clean: int) -> bool:
    """Warn (one ``UserWarning``, printed once on the command line) when the model classifies the defender's clean set near chance:
    below ``NEAR_CHANCE / K`` (20 % for 10 classes). AGPD reads the gradients of a model trained on
    the untrustworthy set; an untrained model, the wrong weights or inputs normalised differently
    from training give gradients that say nothing about a backdoor. Returns True when it warned."""
    if clean_acc < NEAR_CHANCE / num_classes:
        msg = (f"the model classifies only {100 * clean_acc:.1f} % of the {n_clean} clean samples correctly "
               f"(chance {100 / num_classes:.1f} % for {num_classes} classes): AGPD's gradients mean nothing for a "
               "model that has not learned the task; check the model file, its training and the input "
               "normalisation")
        warnings.warn(msg, UserWarning, stacklevel=3)  # once: a log line of the same text printed it twice
        return True
    return False


def detect_from_gradients(grads: Mapping[str, Tensor], labels: Tensor, clean_grads: Mapping[str, Tensor],
                          clean_labels: Tensor, cfg: AGPDConfig | None = None, clean_correct: Tensor | None = None,
                          num_classes: int | None = None) -> DetectionResult:
    """AGPD on precomputed activation gradients.

    Args:
        grads: ``{layer: (N, C_l)}`` gradients of the untrustworthy set (w.r.t. the given labels).
        labels: ``(N,)`` int64 given labels.
        clean_grads: ``{layer: (M, C_l)}`` gradients of the defender's clean set; clean_labels ``(M,)``.
        cfg: :class:`AGPDConfig` (default: the backdoorbench variant, the official code's).
        clean_correct: ``(M,)`` bool, whether the model classifies each clean sample correctly (a clean
            accuracy near chance is warned about: :func:`check_model_fit`).
        num_classes: K (default: the largest label + 1).

    Returns:
        :class:`DetectionResult`.

    Raises:
        ValueError: for mismatched layers or shapes, or a class missing from the clean set.
    """
    cfg = cfg or AGPDConfig()
    if list(grads) != list(clean_grads):
        raise ValueError(f"grads and clean_grads must have the same layers; got {list(grads)} and {list(clean_grads)}")
    if not grads:
        raise ValueError("no layers given")
    for name in grads:
        if len(grads[name]) != len(labels) or len(clean_grads[name]) != len(clean_labels):
            raise ValueError(f"layer {name}: {len(grads[name])} gradients for {len(labels)} labels, "
                             f"{len(clean_grads[name])} clean gradients for {len(clean_labels)} clean labels")
    K = num_classes or int(max(labels.max(), clean_labels.max())) + 1
    if clean_correct is not None and len(clean_correct):
        check_model_fit(float(clean_correct.double().mean()), K, len(clean_correct))
    bases = {n: clean_bases(clean_grads[n], clean_labels, K, cfg.basis, clean_correct, cfg.seed) for n in grads}
    rho = cvbt_matrix(grads, labels, bases, K, cfg.m, cfg.include_far, cfg.m_fraction)
    li, targets, z, fallback = identify_targets(rho, cfg)
    layers = list(grads)
    layer = layers[li]
    mask = torch.zeros(len(labels), dtype=torch.bool)
    filters = {}
    for k in targets:
        idx = torch.nonzero(labels == k).flatten()
        fr = filter_target_class(grads[layer][idx], bases[layer][k], cfg)
        filters[k] = fr
        mask[idx[fr.poison]] = True
    return DetectionResult(mask, targets, layer, layers, rho, z, fallback, filters)


class AGPD:
    """Activation Gradient based Poisoned sample Detection.

    Args:
        model: the classifier trained on the untrustworthy set (logits ``(N, K)``).
        layers: candidate layers (names in ``model.named_modules()``); default: every 3x3 conv of
            the residual blocks but the last (:func:`~iclr25.agpd.models.candidate_layers`).
        config: :class:`AGPDConfig`; or give its fields as keywords (``variant="paper"``,
            ``tau_s=0.05``).

    Which variant: the default, ``variant="backdoorbench"`` (the official code's choices: min-max
    normalised closeness ``<= tau_s`` per round, JS distance, window start), is the one that detects.
    ``variant="paper"`` thresholds the *raw* closeness ``s < 0.05``, which needs a sample's gradient to
    be about 19 times closer (in ``1 - cos``) to the far end than to the clean basis; on real models
    only the far sample itself passes, so the paper variant flags at most one sample per target class
    (digits quick runs: 1 of 135 poisoned). It separates only planted, widely split gradients
    (``iclr25-agpd demo``). Use it to study the paper's text, not to detect.

    Example::

        det = AGPD(model)                       # backdoorbench variant (official code), the default
        res = det.detect(x_bd, y_bd, x_clean, y_clean)
        res.target_classes, res.poison_mask.sum()
    """

    def __init__(self, model: nn.Module, layers: Sequence[str] | None = None, config: AGPDConfig | None = None,
                 **overrides):
        from .models import candidate_layers

        if config is not None and overrides:
            raise ValueError("pass either config=AGPDConfig(...) or keyword overrides, not both")
        self.model = model
        self.layers = list(layers) if layers is not None else candidate_layers(model)
        if not self.layers:
            raise ValueError("no candidate layers: pass layers=[...] (names of conv modules)")
        self.config = config if config is not None else AGPDConfig(**overrides)

    def gradients(self, x, y: Tensor | None, batch_size: int = 256, progress: bool = False,
                  amp: str | bool | None = None) -> dict[str, Tensor]:
        """Activation gradients ``{layer: (N, C_l)}`` of ``(x, y)`` (Eq. 1); ``x`` may be a DataLoader /
        iterable of ``(x, y)`` batches with ``y=None`` (streamed)."""
        return activation_gradients(self.model, x, y, self.layers, batch_size, progress=progress, amp=amp)

    def detect(self, x_bd, y_bd: Tensor | None, x_clean, y_clean: Tensor | None, batch_size: int = 256,
               num_classes: int | None = None, progress: bool = False, amp: str | bool | None = None,
               device: str | None = None) -> DetectionResult:
        """Run Stages 1-3 on the untrustworthy set ``(x_bd (N, ...), y_bd (N,))`` with the clean set
        ``(x_clean (M, ...), y_clean (M,))``.

        Either set may instead be a ``DataLoader`` (``shuffle=False``) or any iterable of ``(x, y)``
        batches, with its labels argument ``None``: batches are streamed to the device and only the
        ``(N, C_l)`` gradient vectors, labels and predictions are kept (:func:`stream_gradients`).
        ``amp``: ``"bf16"``/``"fp16"`` autocast on CUDA (off on CPU). The poison mask follows the
        iteration order."""
        from .data import check_images, check_label_range
        from .gradients import stream_gradients

        if isinstance(x_bd, Tensor):
            check_images(x_bd, y_bd, name="x_bd / y_bd")
            if y_bd is not None:
                check_label_range(self.model, x_bd, y_bd, name="y_bd")
        if isinstance(x_clean, Tensor):
            check_images(x_clean, y_clean, name="x_clean / y_clean")
            if y_clean is not None:
                check_label_range(self.model, x_clean, y_clean, name="y_clean")
        kw = dict(batch_size=batch_size, amp=amp, device=device)
        g = stream_gradients(self.model, x_bd, self.layers, y=y_bd, progress=progress, **kw)
        gc = stream_gradients(self.model, x_clean, self.layers, y=y_clean, **kw)
        if not len(g):
            raise ValueError("the untrustworthy set is empty")
        return detect_from_gradients(g.grads, g.labels, gc.grads, gc.labels, self.config, gc.preds == gc.labels,
                                     num_classes)
