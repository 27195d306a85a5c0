"""iclr25-lotos: LOTOS — Layer-wise Orthogonalization for Training Robust Ensembles (ICLR 2025).

Drop-in pieces for PyTorch ensembles: PowerQR top singular vectors of any conv/dense layer
(:mod:`.spectral`), the ``SpectralClip`` wrapper (per-forward PowerQR, periodic FastClip clipping,
:mod:`.clip`), the LOTOS penalty (Eq. 3-4, :mod:`.loss`), an ``Ensemble`` (mean of softmax), PGD-ℓ∞,
transferability (Def. 3.2) and black-box robust accuracy (:mod:`.evaluation`), and the training of
the three arms ``orig`` / ``clip`` / ``lotos`` (:mod:`.train`).
"""

from ._version import __version__
from .attacks import pgd_linf
from .clip import SpectralClip, refresh_vectors, spectral_layers, wrap_layers
from .config import DemoConfig, EvalConfig, ReproduceConfig, TrainConfig
from .data import ImageData, load_data
from .evaluation import (
    black_box_robust_accuracy,
    cross_gain_matrix,
    evaluate_ensemble,
    make_attack,
    mean_off_diagonal,
    transfer_rate,
    transferability_matrix,
)
from .loss import lotos_penalty, lotos_similarity
from .models import Ensemble, SmallConvNet, resnet18_nobn
from .spectral import (
    check_linear,
    conv_singular_values_fft,
    dense_singular_values,
    explicit_matrix,
    layer_top_singular,
    linear_operator,
    power_qr,
)
from .train import load_ensemble, train_ensemble

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
