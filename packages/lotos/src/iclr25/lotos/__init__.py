"""iclr25-lotos: LOTOS — Layer-wise Orthogonalization for Training Robust Ensembles (ICLR 2025).

Drop-in pieces for PyTorch ensembles: PowerQR top singular vectors of any conv/dense layer
(:mod:`.spectral`), the ``SpectralClip`` wrapper (per-forward PowerQR, periodic FastClip clipping,
:mod:`.clip`), the LOTOS penalty (Eq. 3-4, :mod:`.loss`), an ``Ensemble`` (mean of softmax), PGD-ℓ∞,
transferability (Def. 3.2) and black-box robust accuracy (:mod:`.evaluation`), and the training of
the three arms ``orig`` / ``clip`` / ``lotos`` (:mod:`.train`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

# Public names -> submodule. Imported lazily (PEP 562) so that `iclr25-lotos --help` does not
# import torch; `from iclr25.lotos import X` works as usual.
_LAZY = {
    "pgd_linf": "attacks",
    "SpectralClip": "clip",
    "refresh_vectors": "clip",
    "spectral_layers": "clip",
    "wrap_layers": "clip",
    "DemoConfig": "config",
    "EvalConfig": "config",
    "ReproduceConfig": "config",
    "TrainConfig": "config",
    "ImageData": "data",
    "load_data": "data",
    "black_box_robust_accuracy": "evaluation",
    "cross_gain_matrix": "evaluation",
    "evaluate_ensemble": "evaluation",
    "make_attack": "evaluation",
    "mean_off_diagonal": "evaluation",
    "transfer_rate": "evaluation",
    "transferability_matrix": "evaluation",
    "lotos_penalty": "loss",
    "lotos_similarity": "loss",
    "Ensemble": "models",
    "SmallConvNet": "models",
    "resnet18_nobn": "models",
    "check_linear": "spectral",
    "conv_singular_values_fft": "spectral",
    "dense_singular_values": "spectral",
    "explicit_matrix": "spectral",
    "layer_top_singular": "spectral",
    "linear_operator": "spectral",
    "power_qr": "spectral",
    "load_ensemble": "train",
    "train_ensemble": "train",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .attacks import pgd_linf  # noqa: F401
    from .clip import SpectralClip, refresh_vectors, spectral_layers, wrap_layers  # noqa: F401
    from .config import DemoConfig, EvalConfig, ReproduceConfig, TrainConfig  # noqa: F401
    from .data import ImageData, load_data  # noqa: F401
    from .evaluation import (  # noqa: F401
        black_box_robust_accuracy,
        cross_gain_matrix,
        evaluate_ensemble,
        make_attack,
        mean_off_diagonal,
        transfer_rate,
        transferability_matrix,
    )
    from .loss import lotos_penalty, lotos_similarity  # noqa: F401
    from .models import Ensemble, SmallConvNet, resnet18_nobn  # noqa: F401
    from .spectral import (  # noqa: F401
        check_linear,
        conv_singular_values_fft,
        dense_singular_values,
        explicit_matrix,
        layer_top_singular,
        linear_operator,
        power_qr,
    )
    from .train import load_ensemble, train_ensemble  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__",
    "power_qr",
    "layer_top_singular",
    "linear_operator",
    "check_linear",
    "explicit_matrix",
    "conv_singular_values_fft",
    "dense_singular_values",
    "SpectralClip",
    "wrap_layers",
    "spectral_layers",
    "refresh_vectors",
    "lotos_penalty",
    "lotos_similarity",
    "SmallConvNet",
    "resnet18_nobn",
    "Ensemble",
    "pgd_linf",
    "make_attack",
    "transfer_rate",
    "transferability_matrix",
    "black_box_robust_accuracy",
    "cross_gain_matrix",
    "mean_off_diagonal",
    "evaluate_ensemble",
    "TrainConfig",
    "EvalConfig",
    "ReproduceConfig",
    "DemoConfig",
    "ImageData",
    "load_data",
    "train_ensemble",
    "load_ensemble",
]
