"""DP-MERF with public perceptual features (DP-MEPF, Harder et al. 2023): a feature map whose
main block is the embedding layer of a small CNN trained only on public font digits.

phi(x) = [a, sqrt(1 - a^2) * (sqrt(s) * h(x) / ||h(x)||, sqrt(1 - s) * r(x))] with h the
network's embedding (the linear layer before its ReLU and class head), r the random Fourier
features of ``random_features`` without their label coordinate (norm 1 already), s the share
of the feature norm on h and a the same constant label coordinate as ``random_features`` (row 0
of a mean embedding is still a * the class proportions, so ``class_weights`` reads it as is).
Every phi(x) has norm 1, so a writer's mean embedding has norm <= 1 before clipping.

Why: random Fourier features of raw pixels measure distances a digit classifier does not care
about (a stroke shifted by a pixel is far away). An embedding trained to tell digits apart
concentrates the mean embedding on what tells classes apart, in far fewer coordinates, so the
same per-coordinate noise costs much less. The network never sees a writer's data: it is
trained on ``fedgs.data.public_digits`` (fonts), and its weights are part of the query's public
description (``weights_to_arrays`` / ``network_from_arrays``: a plain dict of numpy arrays, the
SHA-256 of which ``PublicFeatureSpec.weights_sha256`` records).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedgs.data.public_digits import NUM_CLASSES, cached_digits
from fedgs.privacy.random_features import LABEL_COORDINATE, PIXELS, FeatureSpec, RandomFeatures

PUBLIC_TRAIN_IMAGES = 20_000  # font digits rendered from the public seed (~2 minutes, cached)
EMBEDDING_WIDTH = 64  # h's dimension: small, so the release has few coordinates to noise
EMBEDDING_WEIGHT = "body.10.weight"  # the state_dict name of h's linear layer


class FeatureNetwork(nn.Module):
    """Three 3x3 convolutions (16/32/64) and a linear embedding: about 61k parameters."""

    def __init__(self, width: int = EMBEDDING_WIDTH, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(3),
            nn.Flatten(),
            nn.Linear(64 * 9, width),
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(width, num_classes))

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images.reshape(images.shape[0], 1, 28, 28))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(images))


def train_network(
    seed: int = 0,
    images: int = PUBLIC_TRAIN_IMAGES,
    epochs: int = 8,
    width: int = EMBEDDING_WIDTH,
) -> FeatureNetwork:
    """The feature network trained on ``images`` font digits rendered from ``seed`` (public
    data only; never a writer's image). Seeded weights, order and data: the same seed and
    thread count give the same weights, yet a query should ship the weights, not the seed."""
    data, labels = cached_digits(images, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        network = FeatureNetwork(width)
    order = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-3)
    network.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(labels), generator=order).split(128):
            loss = F.cross_entropy(network(data[idx]), labels[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return network.eval()


def weights_to_arrays(network: FeatureNetwork) -> dict[str, np.ndarray]:
    """The weights as float32 numpy arrays: what a query carries."""
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in network.state_dict().items()}


def embedding_width(arrays: dict[str, np.ndarray]) -> int:
    """h's dimension, read off the embedding layer's weight (out_features x in_features)."""
    return int(arrays[EMBEDDING_WEIGHT].shape[0])


def network_from_arrays(arrays: dict[str, np.ndarray]) -> FeatureNetwork:
    """The network rebuilt from ``weights_to_arrays``'s dict (its width read off the arrays)."""
    network = FeatureNetwork(embedding_width(arrays))
    network.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()})
    return network.eval()


def weights_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the names, shapes and float32 bytes of the weights, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name], dtype=np.float32)
        digest.update(f"{name}:{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class PublicFeatureSpec:
    """The public description of the map: the weights' digest and width, the share s of the
    feature norm on the embedding, and the random-feature block (0 features: none)."""

    weights_sha256: str
    width: int
    public_share: float = 1.0
    random_features: int = 0
    bandwidth: float = 20.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.public_share <= 1.0:
            raise ValueError(f"public share must be in (0, 1], got {self.public_share!r}")
        if (self.public_share < 1.0) != (self.random_features > 0):
            raise ValueError("a share below 1 needs random features, and random features need it")
        if self.random_features:
            self.random_spec()  # D even and in range, a finite positive bandwidth

    def random_spec(self) -> FeatureSpec:
        return FeatureSpec(self.random_features, self.bandwidth, self.seed)

    @property
    def dimension(self) -> int:
        """Values of phi(x): the label coordinate, the embedding and the random features."""
        return 1 + self.width + self.random_features


class PublicFeatures:
    """phi as a differentiable map from images (n, ...) to (n, dimension) rows of norm 1; the
    network is frozen (no gradient to its weights, only through it to the images)."""

    def __init__(
        self,
        spec: PublicFeatureSpec,
        arrays: dict[str, np.ndarray],
        device: torch.device | str = "cpu",
    ) -> None:
        if weights_digest(arrays) != spec.weights_sha256:
            raise ValueError("the weights do not match the spec's SHA-256")
        self.spec = spec
        self.network = network_from_arrays(arrays).to(device).requires_grad_(False)
        self.random = RandomFeatures(spec.random_spec(), device) if spec.random_features else None
        self.scale = math.sqrt(1.0 - LABEL_COORDINATE**2)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = images.reshape(images.shape[0], PIXELS).float().to(self.device())
        blocks = [math.sqrt(self.spec.public_share) * F.normalize(self.network.embed(x), dim=1)]
        if self.random is not None:
            # RandomFeatures' rows are [a, sqrt(1 - a^2) * r(x)] with ||r(x)|| = 1
            r = self.random(x)[:, 1:] / self.scale
            blocks.append(math.sqrt(1.0 - self.spec.public_share) * r)
        constant = torch.full((x.shape[0], 1), LABEL_COORDINATE, dtype=x.dtype, device=x.device)
        return torch.cat([constant, self.scale * torch.cat(blocks, 1)], 1)

    def device(self) -> torch.device:
        """Where the network (and so every output) lives."""
        return next(self.network.parameters()).device


def public_features(
    network: FeatureNetwork,
    public_share: float = 1.0,
    random_features: int = 0,
    bandwidth: float = 20.0,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> PublicFeatures:
    """The map for a trained ``network``, its spec's digest computed from the weights."""
    arrays = weights_to_arrays(network)
    spec = PublicFeatureSpec(
        weights_digest(arrays),
        embedding_width(arrays),
        public_share,
        random_features,
        bandwidth,
        seed,
    )
    return PublicFeatures(spec, arrays, device)
