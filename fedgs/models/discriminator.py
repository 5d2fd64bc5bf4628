"""Conditional DCGAN critic of GS-WGAN with spectral norm and a label projection.

Three 5x5 stride-2 convolutions (width, 2*width, 4*width channels) take 28x28 to 4x4; the score is
a linear read-out plus the projection <embed(y), h> (Miyato & Koyama, 2018). There is no batch
normalization: each sample's score depends on that sample only, which the per-sample gradient of
the sanitizer relies on. At width 64 the network has ~1.07M parameters as in the paper.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

_FEATURE_SIZE = 4


class ConditionalDCGANDiscriminator(nn.Module):
    """D(x, y) -> one unbounded critic score per sample."""

    def __init__(self, num_classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.width = width
        self.features = nn.Sequential(
            spectral_norm(nn.Conv2d(1, width, 5, stride=2, padding=2)),
            nn.LeakyReLU(0.2),
            spectral_norm(nn.Conv2d(width, 2 * width, 5, stride=2, padding=2)),
            nn.LeakyReLU(0.2),
            spectral_norm(nn.Conv2d(2 * width, 4 * width, 5, stride=2, padding=2)),
            nn.LeakyReLU(0.2),
            nn.Flatten(),
        )
        feature_dim = 4 * width * _FEATURE_SIZE * _FEATURE_SIZE
        self.score = spectral_norm(nn.Linear(feature_dim, 1))
        self.label_embedding = spectral_norm(nn.Embedding(num_classes, feature_dim))

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.features(images)
        projection = (self.label_embedding(labels) * h).sum(dim=1)
        return self.score(h).squeeze(1) + projection
