"""Conditional ResNet generator of GS-WGAN: (z, y) -> 1x28x28 image in [-1, 1].

Three up-sampling residual blocks take a 4x4 map to 32x32, which is cropped to 28x28. The output is
tanh (the official code used a sigmoid on [0, 1] data; fedgs data live in [-1, 1]). Channels halve
at each up-sampling (4w, 2w, w), so the 32x32 convolutions stay cheap on a CPU; at width 64 that is
~1.9M parameters where the paper's generator, 4w throughout, has ~3.8M. CPU runs use smaller widths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

IMAGE_SIZE = 28
_START_SIZE = 4


class _UpBlock(nn.Module):
    """Pre-activation residual block that doubles the spatial size."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.shortcut = (
            nn.Identity()
            if in_channels == out_channels
            else nn.Conv2d(in_channels, out_channels, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.interpolate(F.relu(self.bn1(x)), scale_factor=2.0)
        h = self.conv2(F.relu(self.bn2(self.conv1(h))))
        return h + self.shortcut(F.interpolate(x, scale_factor=2.0))


class ConditionalResNetGenerator(nn.Module):
    """G(z, y): the label enters as a one-hot vector concatenated to the latent code."""

    def __init__(self, num_classes: int = 10, z_dim: int = 10, width: int = 64) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.z_dim = z_dim
        self.width = width
        self.fc = nn.Linear(z_dim + num_classes, 4 * width * _START_SIZE * _START_SIZE)
        self.blocks = nn.Sequential(
            _UpBlock(4 * width, 4 * width),
            _UpBlock(4 * width, 2 * width),
            _UpBlock(2 * width, width),
        )
        self.bn = nn.BatchNorm2d(width)
        self.to_image = nn.Conv2d(width, 1, 3, padding=1)
        # channels-last convolutions and up-sampling run 1.3-2x faster on CPU (oneDNN)
        self.to(memory_format=torch.channels_last)

    def forward(self, z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(labels, self.num_classes).to(z.dtype)
        h = self.fc(torch.cat([z, onehot], dim=1)).view(z.shape[0], -1, _START_SIZE, _START_SIZE)
        h = h.contiguous(memory_format=torch.channels_last)
        h = self.to_image(F.relu(self.bn(self.blocks(h))))
        margin = (h.shape[-1] - IMAGE_SIZE) // 2
        image = torch.tanh(h[:, :, margin : margin + IMAGE_SIZE, margin : margin + IMAGE_SIZE])
        return image.contiguous()
