"""Activation Gradient based Poisoned sample Detection (AGPD, Yuan et al., ICLR 2025).

Public API: :class:`AGPD` / :func:`detect_from_gradients` (the detector), :class:`AGPDConfig`
(paper and BackdoorBench variants), the GCD statistics (:mod:`~iclr25.agpd.gcd`), activation
gradients, attacks, baselines and metrics.
"""

from ._version import __version__

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
    "predict",
    "stream_gradients",
    "GradientPass",
    "image_folder",
    "torchvision_dataset",
    "make_loader",
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

# Imported on first use (module __getattr__), so that `import iclr25.agpd` and `iclr25-agpd --help`
# do not load torch & co.
_LAZY = {
    "BlendTrigger": "attacks",
    "PatchTrigger": "attacks",
    "all_to_all": "attacks",
    "attack_success_rate": "attacks",
    "badnets": "attacks",
    "blended": "attacks",
    "poison": "attacks",
    "activation_clustering": "baselines",
    "spectral_signatures": "baselines",
    "AGPDConfig": "config",
    "AGPD": "detector",
    "DetectionResult": "detector",
    "FilterResult": "detector",
    "detect_from_gradients": "detector",
    "filter_target_class": "detector",
    "angles": "gcd",
    "closeness": "gcd",
    "cosine": "gcd",
    "cvbt": "gcd",
    "far_end": "gcd",
    "activation_gradients": "gradients",
    "penultimate_features": "gradients",
    "predict": "gradients",
    "stream_gradients": "gradients",
    "GradientPass": "gradients",
    "image_folder": "vision",
    "torchvision_dataset": "vision",
    "make_loader": "vision",
    "detection_metrics": "metrics",
    "PreActResNet": "models",
    "candidate_layers": "models",
    "preact_resnet18": "models",
    "small_preact_cnn": "models",
    "js_trace": "stats",
    "robust_z": "stats",
    "select_stop": "stats",
    "synthetic_gradients": "synthetic",
    "load_checkpoint": "train",
    "save_checkpoint": "train",
    "train_classifier": "train",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
