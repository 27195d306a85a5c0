"""iclr25-wm-transfer: A Transfer Attack to Image Watermarks (Hu, Jiang, Guo, Gong; ICLR 2025).

HiDDeN-style watermark encoders/decoders (:mod:`.models`), differentiable noise layers for robust
training (:mod:`.noise`), training with epoch checkpoints (:mod:`.train`), the double-tail detector
(:mod:`.detect`), the no-box transfer attack with inverse-decode targets (Eq. 3) and the white-box
bound (:mod:`.attack`), post-processing baselines at matched SSIM (:mod:`.baselines`), quality
metrics (:mod:`.quality`), the linear toy with a known answer (:mod:`.toy`) and the reproduction.

Names are imported lazily (PEP 562), so ``iclr25-wm-transfer --help`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_LAZY = {
    # models
    "HiddenConfig": "models", "HiddenEncoder": "models", "HiddenDecoder": "models", "ResNetDecoder": "models",
    "Discriminator": "models", "WatermarkModel": "models", "CallableDecoder": "models", "ConvBNRelu": "models",
    "check_images": "models", "check_messages": "models",
    # noise
    "Identity": "noise", "GaussianNoise": "noise", "GaussianBlur": "noise", "Resize": "noise",
    "CropResize": "noise", "Brightness": "noise", "JpegApprox": "noise", "jpeg_approx": "noise",
    "random_noise_layer": "noise",
    # training and checkpoints
    "TrainSettings": "train", "train_watermark_model": "train", "measure_clean_bit_accuracy": "train",
    "draw_message": "train",
    "save_watermark_model": "checkpoint", "load_watermark_model": "checkpoint", "check_decoders": "checkpoint",
    "DecoderCheckError": "checkpoint",
    # detection, attack, quality, baselines
    "bit_accuracy": "detect", "decode_bits": "detect", "inverse_decode_targets": "detect",
    "double_tail_threshold": "detect", "double_tail_fpr": "detect", "is_detected": "detect",
    "evasion_rate": "detect", "evasion_summary": "detect", "matching_bits": "detect", "lower_tail": "detect",
    "AttackResult": "attack", "transfer_attack": "attack", "whitebox_attack": "attack", "project_linf": "attack",
    "surrogate_gradient": "attack", "random_sign_noise": "attack",
    "ssim": "quality", "psnr": "quality", "linf": "quality", "l2": "quality", "to_unit": "quality",
    "image_quality": "quality",
    "post_process": "baselines", "match_quality": "baselines", "POST_PROCESSING": "baselines",
    "linear_toy": "toy",
    # data and pipeline
    "ImageSet": "data", "load_images": "data", "load_cifar_role": "data",
    "evaluate_images": "evaluation", "summarize_records": "evaluation",
    "run_comparison": "comparison", "watermark_images": "attack_run", "run_attack": "attack_run",
}

if TYPE_CHECKING:  # pragma: no cover
    from .attack import (  # noqa: F401
        AttackResult,
        project_linf,
        random_sign_noise,
        surrogate_gradient,
        transfer_attack,
        whitebox_attack,
    )
    from .attack_run import run_attack, watermark_images  # noqa: F401
    from .baselines import POST_PROCESSING, match_quality, post_process  # noqa: F401
    from .checkpoint import DecoderCheckError, check_decoders, load_watermark_model, save_watermark_model  # noqa: F401
    from .comparison import run_comparison  # noqa: F401
    from .data import ImageSet, load_cifar_role, load_images  # noqa: F401
    from .detect import (  # noqa: F401
        bit_accuracy,
        decode_bits,
        double_tail_fpr,
        double_tail_threshold,
        evasion_rate,
        evasion_summary,
        inverse_decode_targets,
        is_detected,
        lower_tail,
        matching_bits,
    )
    from .evaluation import evaluate_images, summarize_records  # noqa: F401
    from .models import (  # noqa: F401
        CallableDecoder,
        ConvBNRelu,
        Discriminator,
        HiddenConfig,
        HiddenDecoder,
        HiddenEncoder,
        ResNetDecoder,
        WatermarkModel,
        check_images,
        check_messages,
    )
    from .noise import (  # noqa: F401
        Brightness,
        CropResize,
        GaussianBlur,
        GaussianNoise,
        Identity,
        JpegApprox,
        Resize,
        jpeg_approx,
        random_noise_layer,
    )
    from .quality import image_quality, l2, linf, psnr, ssim, to_unit  # noqa: F401
    from .toy import linear_toy  # noqa: F401
    from .train import TrainSettings, draw_message, measure_clean_bit_accuracy, train_watermark_model  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", *_LAZY]
