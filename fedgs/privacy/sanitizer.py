"""The gradient sanitizer: the only path by which a client's signal may leave it.

Each row (one sample's upstream gradient) is clipped to L2 norm C and gets Gaussian noise of std
2*C*sigma: under replace-one neighbours a row's sensitivity is 2C, so each row is a Gaussian
mechanism of noise multiplier sigma. The noise is a discrete Gaussian on a fine grid drawn from a
fresh ChaCha20 key per call (``fedgs.privacy.discrete_noise``): nothing a server can predict,
replay or read off the floating-point pattern; its RDP is the continuous Gaussian's.
It is drawn on the CPU (a reply is B x 784 numbers) and moved back to the gradient's device.
Non-finite input raises: a NaN row would otherwise be clipped to NaN and published.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedgs.privacy.discrete_noise import add_discrete_gaussian


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


def _clipped64(gradients: torch.Tensor, clip_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows scaled to L2 norm at most ``clip_norm`` and the pre-clip norms, both float64."""
    if clip_norm <= 0:
        raise ValueError(f"clip norm must be positive, got {clip_norm}")
    rows = gradients.flatten(1)
    if not bool(torch.isfinite(rows).all()):
        raise NonFiniteGradientError("gradient holds NaN or inf values; refusing to sanitize")
    # Norms in float64: a float32 row of norm > ~1e19 would overflow to inf and be zeroed.
    norms = rows.double().norm(dim=1)
    # min(1, C / ||g||); a zero row stays zero (the clamp only avoids 0/0).
    scale = (clip_norm / norms.clamp_min(torch.finfo(torch.float64).tiny)).clamp(max=1.0)
    return rows.double() * scale.unsqueeze(1), norms


def clip_rows(gradients: torch.Tensor, clip_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale each row to L2 norm at most ``clip_norm``; return (clipped, pre-clip norms)."""
    clipped, norms = _clipped64(gradients, clip_norm)
    dtype = gradients.dtype
    return clipped.to(dtype), norms.to(dtype)


def sanitize(
    gradients: torch.Tensor, clip_norm: float, noise_multiplier: float
) -> SanitizedGradient:
    """Clip every row to ``clip_norm`` and add discrete Gaussian noise of scale 2*C*sigma to
    every coordinate (on a grid of step ``grid_step(2C, row length)``)."""
    if not (noise_multiplier >= 0 and math.isfinite(noise_multiplier)):
        raise ValueError(f"noise multiplier must be finite and >= 0, got {noise_multiplier}")
    clipped, norms = _clipped64(gradients, clip_norm)
    dtype = gradients.dtype
    if noise_multiplier == 0:  # a non-private reference: no ledger accepts it (sigma > 0)
        return SanitizedGradient(clipped.to(dtype), clip_norm, 0.0, norms.to(dtype))
    noisy = add_discrete_gaussian(
        clipped.cpu().numpy(),
        noise_std(clip_norm, noise_multiplier),
        sensitivity=2.0 * clip_norm,
        dimension=clipped.shape[1],
    )
    values = torch.from_numpy(noisy).to(device=gradients.device, dtype=dtype)
    return SanitizedGradient(values, clip_norm, noise_multiplier, norms.to(dtype).detach())
