"""Memorisation check: are samples closer to training images than unseen real images are?

For each sample, the pixel-space (L2, images in [-1, 1]) distance to its nearest training image
(the clients' images). The yardstick is the same distance for real held-out images (evaluation
writers, never trained on): a sample is a *near-copy* when it lies closer to a training image
than all but ``QUANTILE`` of the held-out images do. So held-out real handwriting has a
near-copy share of about ``QUANTILE`` by construction, a lookup table of training images has 1,
and a private generator should stay near ``QUANTILE``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from fedgs.metrics.neighbours import rows_per_block

QUANTILE = 0.01
CLOSEST_PAIRS = 8


def nearest(queries: torch.Tensor, pool: torch.Tensor, chunk: int = 512) -> tuple[np.ndarray, ...]:
    """(distance, index) of each query's nearest pool row, in pixel space.

    The pool is walked in blocks (`fedgs.metrics.neighbours.BLOCK_BYTES` of distances per
    query chunk) keeping a running minimum, so 318,000 FEMNIST training images never make one
    chunk x pool matrix; an earlier pool row wins a tie, as in one minimum over the whole pool.
    """
    flat = queries.flatten(1).float()
    best = torch.empty(len(flat))
    where = torch.zeros(len(flat), dtype=torch.long)
    step = rows_per_block(chunk, itemsize=4)
    for start in tqdm(range(0, len(pool), step), desc="nearest", leave=False):
        block = pool[start : start + step].flatten(1).float()
        block_norms = (block**2).sum(1)
        for first in range(0, len(flat), chunk):
            part = flat[first : first + chunk]
            # |q - p|^2 = |q|^2 - 2 q.p + |p|^2: one matrix product per chunk and block
            squared = (part**2).sum(1, keepdim=True) - 2.0 * part @ block.T + block_norms
            value, index = squared.min(dim=1)
            rows = slice(first, first + chunk)
            # strictly smaller replaces; the first block always sets (a NaN sample stays NaN)
            better = value < best[rows] if start else torch.ones_like(value, dtype=torch.bool)
            best[rows] = torch.where(better, value, best[rows])
            where[rows] = torch.where(better, index + start, where[rows])
    return best.clamp_min(0.0).sqrt().numpy(), where.numpy()


@dataclass(frozen=True)
class Memorisation:
    near_copy_share: float  # samples closer to a training image than QUANTILE of held-out ones
    threshold: float  # that distance
    median_sample_distance: float  # median sample -> nearest training image
    median_heldout_distance: float  # median held-out real image -> nearest training image
    closest: list[tuple[int, int, float]]  # (sample index, training index, distance), closest first

    def to_dict(self) -> dict[str, float]:
        return {
            "near_copy_share": self.near_copy_share,
            "near_copy_threshold": self.threshold,
            "median_nn_distance_samples": self.median_sample_distance,
            "median_nn_distance_heldout": self.median_heldout_distance,
        }


def memorisation(
    samples: torch.Tensor,
    training: torch.Tensor,
    heldout: torch.Tensor,
    heldout_distance: np.ndarray | None = None,
) -> Memorisation:
    """Near-copy share of ``samples`` with respect to ``training``, calibrated on ``heldout``
    (``heldout_distance``: its nearest-training distances, when already computed)."""
    if heldout_distance is None:
        heldout_distance, _ = nearest(heldout, training)
    threshold = float(np.quantile(heldout_distance, QUANTILE))
    distance, index = nearest(samples, training)
    order = np.argsort(distance, kind="stable")[:CLOSEST_PAIRS]
    return Memorisation(
        near_copy_share=float((distance <= threshold).mean()),
        threshold=threshold,
        median_sample_distance=float(np.median(distance)),
        median_heldout_distance=float(np.median(heldout_distance)),
        closest=[(int(i), int(index[i]), float(distance[i])) for i in order],
    )
