"""PATE's noisy vote (Papernot et al. 2017) as PATE-GAN uses it: real/fake labels for the student.

For every generated sample the teachers that answered vote real or fake; the server adds
independent Lap(b) noise to both counts and labels the sample with the larger noisy count
(LNMax). Only the labels leave this function. Its privacy cost per sample is in
``teacher_events.pate_step_event``.
"""

from __future__ import annotations

import secrets

import numpy as np


def noisy_labels(
    real_votes: np.ndarray,
    voters: int,
    laplace_scale: float,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Boolean labels (True = real): argmax of (n_fake + Lap(b), n_real + Lap(b)) per sample.

    ``real_votes[j]`` is how many of the ``voters`` answering teachers called sample j real. The
    noise comes from a generator seeded from ``secrets`` unless a test passes one.
    """
    real = np.asarray(real_votes, dtype=np.float64)
    if voters < 1 or real.min(initial=0) < 0 or real.max(initial=0) > voters:
        raise ValueError(f"real vote counts must lie in [0, {voters}] with voters >= 1")
    if not laplace_scale > 0:
        raise ValueError(f"Laplace scale must be positive, got {laplace_scale!r}")
    rng = rng or np.random.default_rng(secrets.randbits(128))
    noisy_real = real + rng.laplace(0.0, laplace_scale, real.shape)
    noisy_fake = (voters - real) + rng.laplace(0.0, laplace_scale, real.shape)
    return noisy_real > noisy_fake
