"""Activation Gradient based Poisoned sample Detection (AGPD, Yuan et al., ICLR 2025).

Public API: :class:`AGPD` / :func:`detect_from_gradients` (the detector), :class:`AGPDConfig`
(paper and BackdoorBench variants), the GCD statistics (:mod:`~iclr25.agpd.gcd`), activation
gradients, attacks, baselines and metrics.
"""

from ._version import __version__
from .attacks import BlendTrigger, PatchTrigger, all_to_all, attack_success_rate, badnets, blended, poison
from .baselines import activation_clustering, spectral_signatures
from .config import AGPDConfig
from .detector import AGPD, DetectionResult, FilterResult, detect_from_gradients, filter_target_class
from .gcd import angles, closeness, cosine, cvbt, far_end
from .gradients import activation_gradients, penultimate_features
from .metrics import detection_metrics
from .models import PreActResNet, candidate_layers, preact_resnet18, small_preact_cnn
from .stats import js_trace, robust_z, select_stop
from .synthetic import synthetic_gradients
from .train import load_checkpoint, save_checkpoint, train_classifier

__all__ = [
    "__version__",
    "AGPD",
    "AGPDConfig",
    "DetectionResult",
    "FilterResult",
    "detect_from_gradients",
    "filter_target_class",
    "activation_gradients",
    "penultimate_features",
    "angles",
    "cosine",
    "cvbt",
    "closeness",
    "far_end",
    "robust_z",
    "js_trace",
    "select_stop",
    "PatchTrigger",
    "BlendTrigger",
    "poison",
    "badnets",
    "blended",
    "all_to_all",
    "attack_success_rate",
    "spectral_signatures",
    "activation_clustering",
    "detection_metrics",
    "PreActResNet",
    "preact_resnet18",
    "small_preact_cnn",
    "candidate_layers",
    "synthetic_gradients",
    "train_classifier",
    "save_checkpoint",
    "load_checkpoint",
]
