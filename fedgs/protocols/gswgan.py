"""The GS-WGAN wire protocol: the untrusted server's query and the client's sanitized reply.

Down, message type ``train.gswgan``: ArrayRecord ``fakes`` (n_dis fake batches, or fewer that
the client cycles over its n_dis critic steps; ``fedgs.protocols.common``); the last batch is
also the one whose gradient comes back.
Up: ArrayRecord ``sanitized``: ``gradient`` (B, 784), the clipped and noised upstream gradient
and nothing else, with the identity and policy records every reply carries; ``policy-used``
holds strategy, noise-multiplier, clip-norm, batch-size and delta.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord

from fedgs import wire
from fedgs.algorithms import ALGORITHMS
from fedgs.privacy.sanitizer import SanitizedGradient
from fedgs.protocols.common import (
    PIXELS,
    ProtocolError,
    array_values,
    arrays_record,
    decode_floats,
)

QUERY = ALGORITHMS["gswgan"].query
SANITIZED, GRADIENT = "sanitized", "gradient"


def encode_gradient(sanitized: SanitizedGradient, wire_dtype: str = "float32") -> ArrayRecord:
    """The only array a client sends: it accepts nothing but a SanitizedGradient."""
    if not isinstance(sanitized, SanitizedGradient):
        raise TypeError("only a SanitizedGradient may leave a client")
    return arrays_record(
        {GRADIENT: wire.encode(sanitized.values.detach().cpu().numpy(), wire_dtype)}
    )


def plausible_magnitude(clip_norm: float, noise_multiplier: float) -> float:
    """A bound no honest coordinate exceeds: C plus 20 noise standard deviations (a Gaussian
    passes 20 sigma with probability ~1e-88), so absurd replies can be dropped."""
    return clip_norm * (1.0 + 20.0 * 2.0 * noise_multiplier)


def decode_gradient(
    record: ArrayRecord, batch_size: int, max_abs: float = float("inf")
) -> torch.Tensor:
    """The server's check of a reply: exact shape, finite and plausible values, nothing else."""
    if set(record) != {GRADIENT}:
        raise ProtocolError(f"reply must hold exactly the '{GRADIENT}' array, got {sorted(record)}")
    gradient = decode_floats(array_values(record[GRADIENT]), GRADIENT)
    if gradient.shape != (batch_size, PIXELS):
        raise ProtocolError(
            f"gradient must have shape {(batch_size, PIXELS)}, got {gradient.shape}"
        )
    if gradient.dtype.kind != "f" or not np.isfinite(gradient).all():
        raise ProtocolError("gradient must be finite floats")
    if np.abs(gradient).max() > max_abs:
        raise ProtocolError(f"gradient values exceed the plausible bound {max_abs:g}")
    return torch.from_numpy(np.ascontiguousarray(gradient, dtype=np.float32))
