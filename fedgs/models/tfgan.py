"""The Fed-Avg GAN paper's networks: TF-GAN's MNIST generator and discriminator, made conditional.

Augenstein et al. (ICLR 2020) used TF-GAN's MNIST models: G maps noise through dense 1024 and
dense 7*7*256 layers and two 4x4 stride-2 transposed convolutions (64, 32 channels) to a 4x4
convolution with tanh (~13.3M parameters); D has two 4x4 stride-2 convolutions (64, 128), a dense
1024 layer and a linear score (~6.56M parameters). fedgs conditions both on the label so the two
strategies are scored alike (label agreement): G takes a one-hot label next to the noise, D adds a
projection <embed(y), h> on its 1024 features. D has no batch normalization: the WGAN-GP penalty
needs each score to depend on its own sample only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NOISE_DIM = 128
_DENSE = 1024
_START = 7


class TFGANGenerator(nn.Module):
    """G(z, y) -> 1x28x28 image in [-1, 1]."""

    def __init__(self, num_classes: int = 10, z_dim: int = NOISE_DIM) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.z_dim = z_dim
        self.dense = nn.Sequential(
            nn.Linear(z_dim + num_classes, _DENSE),
            nn.BatchNorm1d(_DENSE),
            nn.ReLU(),
            nn.Linear(_DENSE, 256 * _START * _START),
            nn.BatchNorm1d(256 * _START * _START),
            nn.ReLU(),
        )
        self.upsample = nn.Sequential(
            nn.ConvTranspose2d(256, 64, 4, stride=2, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
        )
        # TensorFlow's "same" padding for an even kernel: one more row/column after than before
        self.to_image = nn.Sequential(nn.ZeroPad2d((1, 2, 1, 2)), nn.Conv2d(32, 1, 4))

    def forward(self, z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        onehot = F.one_hot(labels, self.num_classes).to(z.dtype)
        h = self.dense(torch.cat([z, onehot], dim=1)).view(-1, 256, _START, _START)
        return torch.tanh(self.to_image(self.upsample(h)))


class TFGANDiscriminator(nn.Module):
    """D(x, y) -> one unbounded critic score per sample."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(1, 64, 4, stride=2, padding=1),
            nn.LeakyReLU(0.01),
            nn.Conv2d(64, 128, 4, stride=2, padding=1),
            nn.LeakyReLU(0.01),
            nn.Flatten(),
            nn.Linear(128 * _START * _START, _DENSE),
            nn.LeakyReLU(0.01),
        )
        self.score = nn.Linear(_DENSE, 1)
        self.label_embedding = nn.Embedding(num_classes, _DENSE)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.features(images)
        return self.score(h).squeeze(1) + (self.label_embedding(labels) * h).sum(dim=1)
