"""DP-MERF's release: a writer's clipped mean embedding plus its own discrete Gaussian noise.

Each writer computes v = (1/n) sum_i phi(x_i) (outer) onehot(y_i) over all its images
(``random_features``), scales it to Frobenius norm at most C and adds discrete Gaussian noise of
std 2*C*sigma to every coordinate, on the client, before anything leaves it. Under replace-one
neighbours (one writer's data changed) two releases differ by at most 2C in L2, so the release is
a Gaussian mechanism of noise multiplier sigma, the same relation as GS-WGAN's sanitizer
(``sanitizer.noise_std``) and its ``events`` (``mean_embedding_event``). The noise is drawn
from a fresh ChaCha20 key (``discrete_noise``): no seeded generator on this path. The guarantee
holds against an untrusted server: the server only ever sees the noised matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedgs.privacy.discrete_noise import add_discrete_gaussian
from fedgs.privacy.random_features import RandomFeatures, mean_embedding
from fedgs.privacy.sanitizer import noise_std


@dataclass(frozen=True)
class ReleasedEmbedding:
    """A writer's clipped and noised mean embedding: the only thing a DP-MERF client sends
    (``fedgs.protocols.dp_merf.encode_embedding`` accepts nothing else)."""

    values: np.ndarray  # (D + 1) x classes, float64
    clip_norm: float
    noise_multiplier: float


def writer_embedding(
    features: RandomFeatures, images: torch.Tensor, labels: torch.Tensor, num_classes: int
) -> np.ndarray:
    """The writer's mean embedding, float64 ((D + 1) x classes); non-finite input raises."""
    with torch.no_grad():
        rows = features(images).double()
    matrix = mean_embedding(rows, labels, num_classes).cpu().numpy()
    if not np.isfinite(matrix).all():
        raise ValueError("the embedding holds NaN or inf; nothing may be released from it")
    return matrix


def clip(matrix: np.ndarray, clip_norm: float) -> np.ndarray:
    """``matrix`` scaled to Frobenius norm at most ``clip_norm`` (float64)."""
    if not (clip_norm > 0 and math.isfinite(clip_norm)):
        raise ValueError(f"clip norm must be positive and finite, got {clip_norm!r}")
    matrix = np.asarray(matrix, dtype=np.float64)
    norm = float(np.linalg.norm(matrix))
    return matrix * min(1.0, clip_norm / norm) if norm > 0 else matrix


def release(matrix: np.ndarray, clip_norm: float, noise_multiplier: float) -> ReleasedEmbedding:
    """The one release of a writer: ``matrix`` clipped to C, plus noise of std 2*C*sigma on
    every coordinate (sensitivity 2C over the whole matrix)."""
    if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
        raise ValueError(f"noise multiplier must be positive and finite, got {noise_multiplier!r}")
    clipped = clip(matrix, clip_norm)
    noisy = add_discrete_gaussian(
        clipped.ravel(),
        noise_std(clip_norm, noise_multiplier),
        sensitivity=2.0 * clip_norm,
        dimension=clipped.size,
    )
    return ReleasedEmbedding(noisy.reshape(clipped.shape), clip_norm, noise_multiplier)
