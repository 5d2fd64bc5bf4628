"""The gradient sanitizer: the only path by which a client's signal may leave it.

Each row (one sample's upstream gradient) is clipped to L2 norm C and gets Gaussian noise of std
2*C*sigma: under replace-one neighbours a row's sensitivity is 2C, so each row is a Gaussian
mechanism of noise multiplier sigma (ALGORITHMS.md s.1 step 3, s.3). Non-finite input raises:
a NaN row would otherwise be clipped to NaN and published.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


class NonFiniteGradientError(ValueError):
    """The gradient to sanitize holds NaN or inf; nothing may be released from it."""


@dataclass(frozen=True)
class SanitizedGradient:
    """A clipped and noised gradient batch, plus pre-clip norms for local monitoring.

    Only ``values`` is privatized and only ``values`` leaves a client
    (``fedgs.protocols.gswgan.encode_gradient``): the pre-clip norms are a function of the
    private data that no epsilon covers, so no reply carries them.
    """

    values: torch.Tensor
    clip_norm: float
    noise_multiplier: float
    pre_clip_norms: torch.Tensor

    @property
    def noise_std(self) -> float:
        return noise_std(self.clip_norm, self.noise_multiplier)

    @property
    def batch_size(self) -> int:
        return int(self.values.shape[0])


def noise_std(clip_norm: float, noise_multiplier: float) -> float:
    """Standard deviation of the per-coordinate noise: 2*C*sigma (sensitivity 2C)."""
    return 2.0 * clip_norm * noise_multiplier


def clip_rows(gradients: torch.Tensor, clip_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale each row to L2 norm at most ``clip_norm``; return (clipped, pre-clip norms)."""
    if clip_norm <= 0:
        raise ValueError(f"clip norm must be positive, got {clip_norm}")
    rows = gradients.flatten(1)
    if not bool(torch.isfinite(rows).all()):
        raise NonFiniteGradientError("gradient holds NaN or inf values; refusing to sanitize")
    # Norms in float64: a float32 row of norm > ~1e19 would overflow to inf and be zeroed.
    norms = rows.double().norm(dim=1)
    # min(1, C / ||g||); a zero row stays zero (the clamp only avoids 0/0).
    scale = (clip_norm / norms.clamp_min(torch.finfo(torch.float64).tiny)).clamp(max=1.0)
    clipped = (rows.double() * scale.unsqueeze(1)).to(rows.dtype)
    return clipped, norms.to(rows.dtype)


def sanitize(
    gradients: torch.Tensor,
    clip_norm: float,
    noise_multiplier: float,
    generator: torch.Generator | None = None,
) -> SanitizedGradient:
    """Clip every row to ``clip_norm`` and add N(0, (2*C*sigma)^2) noise to every coordinate."""
    if noise_multiplier < 0:
        raise ValueError(f"noise multiplier must be >= 0, got {noise_multiplier}")
    clipped, norms = clip_rows(gradients, clip_norm)
    noise = torch.randn(
        clipped.shape, generator=generator, dtype=clipped.dtype, device=clipped.device
    )
    values = clipped + noise * noise_std(clip_norm, noise_multiplier)
    return SanitizedGradient(values.detach(), clip_norm, noise_multiplier, norms.detach())
