"""DP-FedAvg aggregation of critic deltas (McMahan et al., 2018), as Fed-Avg GAN uses it.

Trusted-server model: clients send raw (bounded) deltas, the server clips each to L2 norm S,
sums them, adds Gaussian noise of scale z S per coordinate and divides by the *expected* number of
clients m = qK (a fixed denominator, so a dropped client is just a zero delta and the sensitivity
stays S). Clipping (flat clip over all arrays together) and the noise scale z S / m are the same
as Flower's building blocks (``flwr.supercore.differential_privacy``; tests/test_fedavg_gan.py
checks them against Flower's), written here in NumPy so the privacy math imports no framework.
The noise is not Flower's (NumPy's global RNG, which anything in the process may have seeded, in
floats whose pattern can betray the sum): it is a discrete Gaussian on a fine grid from a fresh
ChaCha20 key (``fedgs.privacy.discrete_noise``), whose RDP is the continuous Gaussian's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedgs.privacy.discrete_noise import add_discrete_gaussian

Arrays = list[np.ndarray]


class NonFiniteDeltaError(ValueError):
    """A delta with NaN or inf entries: it is dropped, never clipped into the average."""


def clip_delta(delta: Sequence[np.ndarray], clip_norm: float) -> tuple[Arrays, float]:
    """A float64 copy of ``delta`` scaled to L2 norm <= ``clip_norm`` (all arrays together),
    and the norm before clipping."""
    copied = [np.array(a, dtype=np.float64) for a in delta]
    if not all(np.isfinite(a).all() for a in copied):
        raise NonFiniteDeltaError("delta has non-finite entries")
    norm = float(np.sqrt(sum(float(np.sum(a * a)) for a in copied)))
    if norm > clip_norm:
        scale = clip_norm / norm
        copied = [a * scale for a in copied]
    return copied, norm


def noisy_mean(
    clipped: Sequence[Sequence[np.ndarray]],
    shapes: Sequence[tuple[int, ...]],
    clip_norm: float,
    noise_multiplier: float,
    expected_clients: float,
) -> Arrays:
    """(sum of clipped deltas + noise of scale z S) / m, as float32 arrays of ``shapes``.

    ``clipped`` may be empty (no client sampled or all dropped): the result is then noise only,
    which is what the accountant assumes happened. z = 0 is the non-private reference: no noise.
    """
    if expected_clients <= 0:
        raise ValueError(f"expected_clients must be positive, got {expected_clients}")
    if not noise_multiplier >= 0:
        raise ValueError(f"noise multiplier must be >= 0, got {noise_multiplier}")
    total = [np.zeros(shape, dtype=np.float64) for shape in shapes]
    for delta in clipped:
        for acc, part in zip(total, delta, strict=True):
            if part.shape != acc.shape:
                raise ValueError(f"delta array of shape {part.shape}, expected {acc.shape}")
            acc += part
    flat = np.concatenate([acc.ravel() for acc in total])
    if noise_multiplier > 0 and flat.size:
        flat = add_discrete_gaussian(flat, noise_multiplier * clip_norm, clip_norm, flat.size)
    ends = np.cumsum([acc.size for acc in total])[:-1]
    return [
        (part.reshape(acc.shape) / expected_clients).astype(np.float32)
        for part, acc in zip(np.split(flat, ends), total, strict=True)
    ]
