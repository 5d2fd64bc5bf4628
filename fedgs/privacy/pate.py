"""PATE's noisy vote (Papernot et al. 2017) as PATE-GAN uses it: real/fake labels for the student.

For every generated sample the teachers that answered vote real or fake; the server adds
independent discrete Laplace noise of scale b (P(y) proportional to exp(-|y|/b), integers from a
fresh ChaCha20 key: ``fedgs.privacy.discrete_noise``) to both counts and labels the sample with
the larger noisy count (LNMax; a tie is labelled fake, a rule that reads no data). Only the labels
leave this function. Its privacy cost per sample is in ``teacher_events.pate_step_event``.
"""

from __future__ import annotations

import math

import numpy as np

from fedgs.privacy.discrete_noise import discrete_laplace
from fedgs.privacy.randomness import SecureRandom


def noisy_labels(
    real_votes: np.ndarray,
    voters: int,
    laplace_scale: float,
) -> np.ndarray:
    """Boolean labels (True = real): n_real + DLap(b) > n_fake + DLap(b) per sample.

    ``real_votes[j]`` is how many of the ``voters`` answering teachers called sample j real.
    """
    real = np.asarray(real_votes, dtype=np.int64)
    if not np.array_equal(real, np.asarray(real_votes)):
        raise ValueError("real vote counts must be integers")
    if voters < 1 or real.min(initial=0) < 0 or real.max(initial=0) > voters:
        raise ValueError(f"real vote counts must lie in [0, {voters}] with voters >= 1")
    if not (laplace_scale > 0 and math.isfinite(laplace_scale)):
        raise ValueError(f"Laplace scale must be positive and finite, got {laplace_scale!r}")
    noise = discrete_laplace(SecureRandom(), laplace_scale, 2 * real.size).reshape(2, *real.shape)
    return real + noise[0] > (voters - real) + noise[1]
