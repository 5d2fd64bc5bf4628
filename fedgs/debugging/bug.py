"""The injected pre-processing bug: pixel inversion on a seeded, exact share of the writers.

Why seeded and exact: the scenario's confusion table is read against a known ground truth, and a
rerun with the same seed must break the same writers.
"""

from __future__ import annotations

import numpy as np

# independent random streams of one scenario seed
HOLDOUT_STREAM = 0
BUG_STREAM = 1


def buggy_count(num_writers: int, fraction: float) -> int:
    """round(fraction * num_writers), halves rounded up (Python's round() would go to even)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the bug fraction must be in [0, 1], got {fraction}")
    return int(np.floor(fraction * num_writers + 0.5))


def choose_buggy(num_writers: int, fraction: float, seed: int) -> np.ndarray:
    """Boolean mask over writers: exactly `buggy_count` of them, drawn uniformly with ``seed``."""
    mask = np.zeros(num_writers, dtype=bool)
    rng = np.random.default_rng((seed, BUG_STREAM))
    mask[rng.choice(num_writers, buggy_count(num_writers, fraction), replace=False)] = True
    return mask


def invert_pixels(pixels: np.ndarray) -> np.ndarray:
    """Stored uint8 pixels inverted (255 - p): exactly x -> -x on the [-1, 1] floats."""
    if pixels.dtype != np.uint8:
        raise TypeError(f"expected uint8 pixels, got {pixels.dtype}")
    return 255 - pixels
