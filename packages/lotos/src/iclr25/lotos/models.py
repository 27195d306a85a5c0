"""Models: the CPU-scale ``SmallConvNet``, a batch-norm-free ResNet-18, and the ``Ensemble``.

Normalisation is *inside* the models (``Normalize``), so attacks work in pixel space ``[0, 1]``
(the official code normalises in the data pipeline and clamps normalised inputs to ``[0, 1]``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .clip import wrap_layers

__all__ = ["Normalize", "SmallConvNet", "BasicBlockNoBN", "ResNetNoBN", "resnet18_nobn", "Ensemble",
           "build_model", "CIFAR_MEAN", "CIFAR_STD"]

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)


class Normalize(nn.Module):
    """``(x − mean) / std`` per channel; ``x`` ``(B, C, H, W)`` in ``[0, 1]``."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std


def _clip_kwargs(clip: float | None, clip_kwargs: dict | None) -> dict:
    kw = dict(clip_kwargs or {})
    kw["clip"] = clip
    return kw


def _kaiming_(model: nn.Module) -> None:
    """He (fan-in, ReLU) initialisation of every conv, zero biases: without batch-norm the default
    PyTorch init shrinks the signal by ≈ 1/3 per layer and the small nets barely train."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class SmallConvNet(nn.Module):
    """The spec's CPU-scale net (no batch-norm): conv 3→w (3×3, pad 1), conv w→w stride 2,
    conv w→2w, conv 2w→2w stride 2, ReLU after each, global average pool, linear 2w→classes.

    Args:
        num_classes: number of classes.
        in_ch: input channels (3 for CIFAR, 1 for digits).
        width: ``w`` (spec: 32).
        clip: ``None`` for the ``orig`` arm; a clip value ``C`` wraps every conv and the linear
            layer in :class:`~iclr25.lotos.clip.SpectralClip` (``clip`` and ``lotos`` arms).
        clip_kwargs: extra :class:`SpectralClip` arguments (``clip_every``, ``k``, ...).
        mean, std: per-channel normalisation applied inside the model.

    Input ``(B, in_ch, H, W)`` float in ``[0, 1]``; output ``(B, num_classes)`` logits.
    """

    def __init__(self, num_classes: int = 10, in_ch: int = 3, width: int = 32, clip: float | None = None,
                 clip_kwargs: dict | None = None, mean: Sequence[float] = CIFAR_MEAN,
                 std: Sequence[float] = CIFAR_STD):
        super().__init__()
        w = width
        self.norm = Normalize(mean, std)
        self.convs = nn.ModuleList([
            nn.Conv2d(in_ch, w, 3, padding=1),
            nn.Conv2d(w, w, 3, stride=2, padding=1),
            nn.Conv2d(w, 2 * w, 3, padding=1),
            nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1),
        ])
        self.fc = nn.Linear(2 * w, num_classes)
        _kaiming_(self)
        if clip is not None:
            wrap_layers(self, **_clip_kwargs(clip, clip_kwargs))

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(x)
        for c in self.convs:
            h = F.relu(c(h))
        return self.fc(h.mean(dim=(2, 3)))


class BasicBlockNoBN(nn.Module):
    """ResNet basic block without batch-norm. With a projection (downsampling) shortcut the merge is
    ``(conv-path + shortcut) / 2`` (so two 1-Lipschitz paths give a 1-Lipschitz block, as in the
    clipped ResNet of the code); identity-shortcut blocks are not halved."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1)
        self.project = stride != 1 or in_planes != planes
        self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride) if self.project else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv2(F.relu(self.conv1(x)))
        out = out + self.shortcut(x)
        if self.project:
            out = out / 2
        return F.relu(out)


class ResNetNoBN(nn.Module):
    """CIFAR ResNet (3×3 stem, four stages) without batch-norm; see :func:`resnet18_nobn`."""

    def __init__(self, num_blocks: Sequence[int] = (2, 2, 2, 2), num_classes: int = 10, in_ch: int = 3,
                 width: int = 64, clip: float | None = None, clip_kwargs: dict | None = None,
                 mean: Sequence[float] = CIFAR_MEAN, std: Sequence[float] = CIFAR_STD):
        super().__init__()
        self.norm = Normalize(mean, std)
        self.stem = nn.Conv2d(in_ch, width, 3, padding=1)
        layers, planes = [], width
        in_planes = width
        for i, n in enumerate(num_blocks):
            stride = 1 if i == 0 else 2
            for s in [stride] + [1] * (n - 1):
                layers.append(BasicBlockNoBN(in_planes, planes, s))
                in_planes = planes
            planes *= 2
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(in_planes, num_classes)
        _kaiming_(self)
        if clip is not None:
            wrap_layers(self, **_clip_kwargs(clip, clip_kwargs))

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.stem(self.norm(x)))
        h = self.blocks(h)
        return self.fc(h.mean(dim=(2, 3)))


def resnet18_nobn(num_classes: int = 10, in_ch: int = 3, clip: float | None = None,
                  clip_kwargs: dict | None = None, **kw) -> ResNetNoBN:
    """ResNet-18 without batch-norm (the paper's main "noBN" setting), optionally clipped."""
    return ResNetNoBN((2, 2, 2, 2), num_classes, in_ch, 64, clip, clip_kwargs, **kw)


def build_model(arch: str, *, num_classes: int, in_ch: int, width: int = 32, clip: float | None = None,
                clip_kwargs: dict | None = None, mean=CIFAR_MEAN, std=CIFAR_STD) -> nn.Module:
    """Build ``arch`` in ``{"small", "resnet18-nobn"}``.

    Raises:
        ValueError: unknown architecture.
    """
    if arch == "small":
        return SmallConvNet(num_classes, in_ch, width, clip, clip_kwargs, mean, std)
    if arch == "resnet18-nobn":
        return resnet18_nobn(num_classes, in_ch, clip, clip_kwargs, mean=mean, std=std)
    raise ValueError(f"unknown arch {arch!r}; choose 'small' or 'resnet18-nobn'")


class Ensemble(nn.Module):
    """Average of the members' probabilities, returned as log-probabilities (code: ``models/ensemble.py``).

    ``forward(x)`` = ``log(clamp((1/N) Σ_a softmax(F_a(x)), min=1e-40))``, ``(B, classes)`` float.
    ``F.cross_entropy`` / ``argmax`` on it behave as on logits.

    Args:
        models: ``N ≥ 2`` members with the same output size.

    Raises:
        ValueError: fewer than 2 members (an ensemble of one model is just the model; LOTOS and
            the within-ensemble transferability need pairs).
    """

    def __init__(self, models: Sequence[nn.Module]):
        super().__init__()
        models = list(models)
        if len(models) < 2:
            raise ValueError(f"an Ensemble needs at least 2 members, got {len(models)}; "
                             "use the single model directly")
        self.members = nn.ModuleList(models)

    def __len__(self) -> int:
        return len(self.members)

    def forward(self, x: Tensor) -> Tensor:
        probs = torch.stack([F.softmax(m(x), dim=-1) for m in self.members]).mean(0)
        return probs.clamp_min(1e-40).log()
