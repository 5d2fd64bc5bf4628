"""Nearest-neighbour distances in row blocks: a full pairwise matrix's numbers, never the matrix.

The instrument's neighbour searches are too large to hold at once on the complete FEMNIST split:
prdc's k-NN radii of the ~43,000 reference features are an N x N float64 matrix (15 GB), and
each memorisation query chunk against the ~318,000 training images is a 512 x 318,000 matrix
plus its temporaries (2-3 GB). Here every search walks blocks of about `BLOCK_BYTES` and keeps
only what the full matrix was reduced to (a k-th smallest value, a running minimum, counts), so
the results are those of the full matrix (tests/test_eval_memory.py) at a bounded peak.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from sklearn.metrics import pairwise_distances

BLOCK_BYTES = 64 * 2**20  # one block of distances; the peak stays a small multiple of it


def rows_per_block(columns: int, itemsize: int = 8) -> int:
    """Rows of a ``columns``-wide distance block of at most `BLOCK_BYTES` (at least one)."""
    return max(1, BLOCK_BYTES // max(1, columns * itemsize))


def euclidean_blocks(x: np.ndarray, y: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
    """(rows, distances from ``x[rows]`` to every row of ``y``), block by block.

    scikit-learn's Euclidean distances, as the ``prdc`` package computes them (float64).
    """
    step = rows_per_block(len(y))
    for start in range(0, len(x), step):
        rows = slice(start, start + step)
        yield rows, pairwise_distances(x[rows], y, metric="euclidean")


def kth_neighbour_distances(x: np.ndarray, k: int) -> np.ndarray:
    """Each row's distance to its k-th nearest other row (itself, at distance 0, not counted).

    prdc's ``compute_nearest_neighbour_distances``: the (k+1)-th smallest distance of a row.
    """
    radii = np.empty(len(x))
    for rows, distances in euclidean_blocks(x, x):
        radii[rows] = np.partition(distances, k, axis=1)[:, k]
    return radii


def prdc_blocks(
    real: np.ndarray,
    fake: np.ndarray,
    k: int,
    real_radii: np.ndarray | None = None,
) -> dict[str, float]:
    """prdc's ``compute_prdc`` (precision, recall, density, coverage) in row blocks of ``real``.

    ``real_radii``: ``kth_neighbour_distances(real, k)`` when already computed (one reference
    scores every sampler).
    """
    if real_radii is None:
        real_radii = kth_neighbour_distances(real, k)
    fake_radii = kth_neighbour_distances(fake, k)
    inside = np.zeros(len(fake), dtype=np.int64)  # per fake: the real k-NN balls holding it
    recalled = np.zeros(len(real), dtype=bool)  # per real: inside some fake k-NN ball
    covered = np.zeros(len(real), dtype=bool)  # per real: its own ball holds some fake
    for rows, distances in euclidean_blocks(real, fake):
        inside += (distances < real_radii[rows, None]).sum(axis=0)
        recalled[rows] = (distances < fake_radii[None, :]).any(axis=1)
        covered[rows] = distances.min(axis=1) < real_radii[rows]
    return {
        "precision": float((inside > 0).mean()),
        "recall": float(recalled.mean()),
        "density": float((1.0 / float(k)) * inside.mean()),
        "coverage": float(covered.mean()),
    }
