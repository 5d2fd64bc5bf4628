"""DP-MERF's feature map: random Fourier features of a Gaussian kernel, plus a label coordinate.

phi(x) = [a, sqrt(1 - a^2) * sqrt(2/D) * (cos(W x), sin(W x))] for a flattened image x, with the
D/2 rows of W drawn N(0, I / bandwidth^2): phi(x) . phi(x') = a^2 + (1 - a^2) * k(x, x') in
expectation, k the Gaussian kernel of that length scale (Rahimi and Recht 2007). Every phi(x)
has L2 norm 1 exactly (cos^2 + sin^2 = 1 per pair), so a writer's mean embedding has norm <= 1
before any clipping. The constant coordinate a makes row 0 of a mean embedding phi (outer)
onehot(y) the class proportions times a: the server reads the class weights off the release.

W is drawn from a *public* seed the server sends with its query: the frequencies are part of
the mechanism's description, not a privacy randomness (nothing here noises anything; the noise
comes from ``fedgs.privacy.mean_embedding``, keyed by the OS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PIXELS = 784  # a flattened 28 x 28 image
LABEL_COORDINATE = 0.5  # a: the constant coordinate that carries the class proportions
MAX_FEATURES = 2**16  # the largest D a query may ask for (a release is (D + 1) x classes)


@dataclass(frozen=True)
class FeatureSpec:
    """The public description of the feature map: D, the kernel's length scale and W's seed."""

    features: int
    bandwidth: float
    seed: int

    def __post_init__(self) -> None:
        if isinstance(self.features, bool) or not isinstance(self.features, int):
            raise ValueError(f"features must be an integer, got {self.features!r}")
        if not 2 <= self.features <= MAX_FEATURES or self.features % 2:
            raise ValueError(
                f"features must be even and in [2, {MAX_FEATURES}], got {self.features}"
            )
        if not (self.bandwidth > 0 and math.isfinite(self.bandwidth)):
            raise ValueError(f"bandwidth must be positive and finite, got {self.bandwidth!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")

    @property
    def dimension(self) -> int:
        """Values of phi(x): D features and the label coordinate."""
        return self.features + 1


class RandomFeatures:
    """phi as a differentiable map from images (n, ...) to (n, D + 1) rows of norm 1."""

    def __init__(self, spec: FeatureSpec, device: torch.device | str = "cpu") -> None:
        self.spec = spec
        # a public, reproducible draw on the CPU: client and server build the same W
        rng = torch.Generator().manual_seed(spec.seed)
        frequencies = torch.randn(spec.features // 2, PIXELS, generator=rng) / spec.bandwidth
        self.frequencies = frequencies.to(device)
        self.scale = math.sqrt((1.0 - LABEL_COORDINATE**2) * 2.0 / spec.features)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = images.reshape(images.shape[0], PIXELS).to(self.frequencies)
        projected = x @ self.frequencies.T
        constant = torch.full((x.shape[0], 1), LABEL_COORDINATE, dtype=x.dtype, device=x.device)
        return torch.cat(
            [constant, self.scale * torch.cos(projected), self.scale * torch.sin(projected)], 1
        )


def mean_embedding(rows: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(1/n) sum_i phi(x_i) (outer) onehot(y_i): a (D + 1) x classes matrix whose column c is
    the share of class c times its mean feature vector (``rows`` are the phi(x_i))."""
    onehot = torch.nn.functional.one_hot(labels.long(), num_classes).to(rows.dtype)
    return rows.T @ onehot / rows.shape[0]
