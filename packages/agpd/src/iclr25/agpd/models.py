"""Pre-activation ResNets with BackdoorBench's layer names (``conv1``, ``layerS.B.conv1/conv2``).

``preact_resnet18()`` is BackdoorBench's ``preactresnet18`` (He et al. 2016, the CIFAR variant:
no final BN-ReLU, global average pooling, linear head). The CPU-scale models are the same class
with fewer, narrower stages.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PreActBlock", "PreActResNet", "preact_resnet18", "small_preact_cnn", "conv_layer_names",
           "candidate_layers"]


class PreActBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-conv3x3 with an identity (or 1x1-conv) shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(x))
        sc = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        return out + sc


class PreActResNet(nn.Module):
    """Pre-activation ResNet: stem 3x3 conv, stages of :class:`PreActBlock` (the first block of
    every stage after the first has stride 2), global average pooling, linear head.

    Args:
        in_channels: image channels (3 for CIFAR, 1 for digits).
        num_classes: K.
        widths: channels per stage (``len(widths)`` stages, named ``layer1``, ``layer2``, ...).
        num_blocks: blocks per stage.

    Input ``(N, in_channels, H, W)`` float, output logits ``(N, num_classes)``.
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, widths: Sequence[int] = (64, 128, 256, 512),
                 num_blocks: Sequence[int] = (2, 2, 2, 2)):
        super().__init__()
        if len(widths) != len(num_blocks) or not widths:
            raise ValueError(f"widths {widths} and num_blocks {num_blocks} must be non-empty and equally long")
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False)
        planes = widths[0]
        for i, (w, nb) in enumerate(zip(widths, num_blocks)):
            blocks = []
            for b in range(nb):
                blocks.append(PreActBlock(planes, w, 2 if (b == 0 and i > 0) else 1))
                planes = w
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.num_stages = len(widths)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(planes, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv1(x)
        for i in range(self.num_stages):
            out = getattr(self, f"layer{i + 1}")(out)
        return self.linear(torch.flatten(self.avgpool(out), 1))


def preact_resnet18(num_classes: int = 10, in_channels: int = 3) -> PreActResNet:
    """BackdoorBench's ``preactresnet18`` (the paper's main model)."""
    return PreActResNet(in_channels, num_classes, (64, 128, 256, 512), (2, 2, 2, 2))


def small_preact_cnn(num_classes: int = 10, in_channels: int = 3, widths: Sequence[int] = (32, 64),
                     num_blocks: Sequence[int] = (2, 2)) -> PreActResNet:
    """CPU-scale Preact-style CNN of the spec: stem conv, two blocks of 32, a stride-2 block to
    64 and one more 64 block (8 block convs), global pooling, linear."""
    return PreActResNet(in_channels, num_classes, widths, num_blocks)


def conv_layer_names(model: nn.Module) -> list[str]:
    """Names of all 3x3 convolutions inside residual blocks, in forward order (BackdoorBench's
    ``conv_list``: ``layer1.0.conv1 ... layer4.1.conv2`` for preactresnet18)."""
    return [n for n, m in model.named_modules()
            if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3) and n.startswith("layer")]


def candidate_layers(model: nn.Module) -> list[str]:
    """AGPD candidate layers: :func:`conv_layer_names` without the last one.

    The last conv's output reaches the logits only through ``+ shortcut -> average pool ->
    linear``, a linear map, so its channel-wise activation gradient is ``W_y / (H W)`` for every
    sample of class ``y``: input-independent, ``rho = 0`` for every class up to rounding, and a
    z-score of rounding noise (known-answer test 6). BackdoorBench keeps it in ``conv_list`` but it
    never carries information.
    """
    names = conv_layer_names(model)
    return names[:-1] if len(names) > 1 else names
