"""The GS-WGAN wire protocol between the server and a client: message types and record keys.

Down (server -> client), message type ``train.gswgan``:
  ArrayRecord ``fakes``: ``images`` (n_dis, B, 784) in [-1, 1], ``labels`` int64 (n_dis, B).
  The last batch is also the one whose gradient comes back.
Up (client -> server): ArrayRecord ``sanitized``: ``gradient`` (B, 784), the clipped and
  noised upstream gradient and nothing else; ConfigRecord ``client`` with the client's id (the
  server learns which writer answered only from what it reports); ConfigRecord ``policy-used``:
  the public values the client applied (strategy, noise-multiplier, clip-norm, batch-size,
  delta). Every strategy's reply has this shape: no MetricRecord, no statistic of private data.
Warm start, message type ``train.warmstart``: ConfigRecord ``warmstart`` {steps}; the reply holds
  ``client`` and ``policy-used`` {strategy} only.
Float payloads travel as float32, float16 or bfloat16 (``fedgs.wire``; run-config ``wire-dtype``).
Clients answer a request they cannot or will not serve with an error reply (never a crash).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedgs import wire
from fedgs.algorithms import ALGORITHMS
from fedgs.privacy.sanitizer import SanitizedGradient

QUERY = ALGORITHMS["gswgan"].query

FAKES, IMAGES, LABELS = "fakes", "images", "labels"
SANITIZED, GRADIENT = "sanitized", "gradient"
METRICS = "metrics"  # the server's own records; never in a client's reply
CLIENT, CLIENT_ID, POLICY_USED = "client", "client-id", "policy-used"
WARM_START_CONFIG, STEPS = "warmstart", "steps"

PIXELS = 784
MAX_BATCH = 4096
MAX_CRITIC_BATCHES = 64


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the reason is safe to send back."""


@dataclass(frozen=True)
class FakeBatches:
    """Validated fake batches of a query: images (n_dis, B, 1, 28, 28), labels (n_dis, B)."""

    images: torch.Tensor
    labels: torch.Tensor

    def pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip(self.images, self.labels, strict=True))


def encode_fakes(
    images: list[torch.Tensor], labels: list[torch.Tensor], wire_dtype: str = "float32"
) -> dict[str, np.ndarray]:
    stacked = torch.stack([x.reshape(x.shape[0], PIXELS) for x in images])
    return {
        IMAGES: wire.encode(stacked.detach().cpu().numpy(), wire_dtype),
        LABELS: torch.stack(labels).cpu().numpy().astype(np.int64),
    }


def decode_fakes(arrays: dict[str, np.ndarray], num_classes: int) -> FakeBatches:
    """Check every property a client relies on; raise ProtocolError naming the first failure."""
    for key in (IMAGES, LABELS):
        if key not in arrays:
            raise ProtocolError(f"query is missing the '{key}' array")
    images, labels = _floats(arrays[IMAGES], IMAGES), arrays[LABELS]
    if images.ndim != 3 or images.shape[2] != PIXELS:
        raise ProtocolError(f"images must have shape (n_dis, B, {PIXELS}), got {images.shape}")
    n_dis, batch = images.shape[:2]
    if not (1 <= n_dis <= MAX_CRITIC_BATCHES and 1 <= batch <= MAX_BATCH):
        raise ProtocolError(f"query size out of range: {n_dis} batches of {batch}")
    if labels.shape != (n_dis, batch):
        raise ProtocolError(f"labels must have shape {(n_dis, batch)}, got {labels.shape}")
    if images.dtype.kind != "f" or not np.isfinite(images).all():
        raise ProtocolError("images must be finite floats")
    if np.abs(images).max() > 1.0 + 1e-4:
        raise ProtocolError("images must lie in [-1, 1]")
    if labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= num_classes:
        raise ProtocolError(f"labels must be integers in [0, {num_classes})")
    return FakeBatches(
        torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).view(
            n_dis, batch, 1, 28, 28
        ),
        torch.from_numpy(labels.astype(np.int64)),
    )


def _floats(payload: np.ndarray, name: str) -> np.ndarray:
    try:
        return wire.decode(payload)
    except wire.WireFormatError as error:
        raise ProtocolError(f"'{name}': {error}") from error


def encode_gradient(
    sanitized: SanitizedGradient, wire_dtype: str = "float32"
) -> dict[str, np.ndarray]:
    """The only array a client sends: it accepts nothing but a SanitizedGradient."""
    if not isinstance(sanitized, SanitizedGradient):
        raise TypeError("only a SanitizedGradient may leave a client")
    return {GRADIENT: wire.encode(sanitized.values.detach().cpu().numpy(), wire_dtype)}


def plausible_magnitude(clip_norm: float, noise_multiplier: float) -> float:
    """A bound no honest coordinate exceeds: C plus 20 noise standard deviations (a Gaussian
    passes 20 sigma with probability ~1e-88), so absurd replies can be dropped."""
    return clip_norm * (1.0 + 20.0 * 2.0 * noise_multiplier)


def decode_gradient(
    arrays: dict[str, np.ndarray], batch_size: int, max_abs: float = float("inf")
) -> torch.Tensor:
    """The server's check of a reply: exact shape, finite and plausible values, nothing else."""
    if set(arrays) != {GRADIENT}:
        raise ProtocolError(f"reply must hold exactly the '{GRADIENT}' array, got {sorted(arrays)}")
    gradient = _floats(arrays[GRADIENT], GRADIENT)
    if gradient.shape != (batch_size, PIXELS):
        raise ProtocolError(
            f"gradient must have shape {(batch_size, PIXELS)}, got {gradient.shape}"
        )
    if gradient.dtype.kind != "f" or not np.isfinite(gradient).all():
        raise ProtocolError("gradient must be finite floats")
    if np.abs(gradient).max() > max_abs:
        raise ProtocolError(f"gradient values exceed the plausible bound {max_abs:g}")
    return torch.from_numpy(np.ascontiguousarray(gradient, dtype=np.float32))
