"""Deliberately broken copies of the noise, for showing that an audit can fail (test only).

An audit that always passes proves nothing. These swap the noise samplers the real mechanisms
call (``fedgs.privacy.discrete_noise`` for the GS-WGAN sanitizer and DP-FedAvg,
``fedgs.privacy.distributed_noise`` for secure aggregation) for the duration of an audit run,
and put them back afterwards; the mechanisms' own code is untouched:

- ``noise-scaled-down``: the noise is a tenth of what the accountant assumes;
- ``fixed-seed-noise``: the noise comes from a generator with a fixed seed (the bug the
  ChaCha20 noise source replaced). The auditor knows the seed, so it recomputes the noise (it
  runs the mechanism on an all-zero input) and subtracts it from every release.

Nothing here is reachable from a training run: only ``fedgs audit --sabotage`` enters it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from fedgs.privacy import discrete_noise, distributed_noise

SCALED_DOWN = "noise-scaled-down"
FIXED_SEED = "fixed-seed-noise"
SABOTAGES = (SCALED_DOWN, FIXED_SEED)
NOISE_SCALE = 0.1
KNOWN_SEED = 1234  # the seed the auditor of FIXED_SEED knows


def noise_known_to_auditor(sabotage: str | None) -> bool:
    """Whether the auditor can recompute the noise (and so subtracts it from each release)."""
    return sabotage == FIXED_SEED


def _seeded(sigma: float, count: int) -> np.ndarray:
    return np.rint(np.random.default_rng(KNOWN_SEED).normal(0.0, sigma, count)).astype(np.int64)


@contextmanager
def sabotaged(sabotage: str | None) -> Iterator[None]:
    """Run the block with the noise broken as ``sabotage`` says (None: the real noise)."""
    if sabotage is None:
        yield
        return
    if sabotage not in SABOTAGES:
        raise ValueError(f"unknown sabotage {sabotage!r} (known: {', '.join(SABOTAGES)})")
    threads, shares = discrete_noise._discrete_gaussian_threads, distributed_noise.discrete_gaussian
    if sabotage == SCALED_DOWN:
        discrete_noise._discrete_gaussian_threads = lambda sigma, count: threads(
            sigma * NOISE_SCALE, count
        )
        distributed_noise.discrete_gaussian = lambda rng, sigma, count: shares(
            rng, sigma * NOISE_SCALE, count
        )
    else:
        discrete_noise._discrete_gaussian_threads = _seeded
        distributed_noise.discrete_gaussian = lambda rng, sigma, count: _seeded(sigma, count)
    try:
        yield
    finally:
        discrete_noise._discrete_gaussian_threads = threads
        distributed_noise.discrete_gaussian = shares
