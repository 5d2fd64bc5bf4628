"""Splitting a pooled data set into K disjoint virtual clients.

For sources without writers (MNIST, the embedded digits) clients must be simulated. Two schemes:

- ``iid``: a seeded shuffle cut into K parts whose sizes differ by at most one.
- ``label-skew``: the "pathological non-IID" shards of McMahan et al. (2017, FedAvg): sort the
  images by label, cut them into ``K * shards_per_client`` equal shards and deal each client
  ``shards_per_client`` random shards. While shards are smaller than classes, a shard spans one
  class, or two where it straddles a class boundary, so a client sees at most
  ``2 * shards_per_client`` classes and usually ``shards_per_client``. Chosen over a Dirichlet
  split because it never leaves a client empty and all clients get the same size, which keeps
  per-client DP sampling uniform.

Both return one index array per client, in seeded random order (sources such as the embedded
digits are sorted by label); together they cover every index exactly once.
"""

from __future__ import annotations

import numpy as np

from fedgs.data.errors import DataError
from fedgs.data.names import PARTITIONS


def _check_sizes(n: int, parts: int, what: str) -> None:
    if not 1 <= parts <= n:
        raise DataError(f"{what} must be between 1 and {n} (the number of images), got {parts}")


def iid_partition(n: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """Indices 0..n-1 shuffled and cut into ``num_clients`` near-equal parts."""
    _check_sizes(n, num_clients, "the number of clients")
    order = np.random.default_rng(seed).permutation(n)
    return list(np.array_split(order, num_clients))


def label_skew_partition(
    labels: np.ndarray, num_clients: int, seed: int, shards_per_client: int = 2
) -> list[np.ndarray]:
    """McMahan et al. label shards: each client gets ``shards_per_client`` single-label runs."""
    if shards_per_client < 1:
        raise DataError(f"shards_per_client must be at least 1, got {shards_per_client}")
    _check_sizes(len(labels), num_clients * shards_per_client, "clients x shards_per_client")
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(labels))  # random order inside each class
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = np.array_split(by_label, num_clients * shards_per_client)
    deal = rng.permutation(len(shards)).reshape(num_clients, shards_per_client)
    return [rng.permutation(np.concatenate([shards[s] for s in row])) for row in deal]


def partition(
    labels: np.ndarray, num_clients: int, scheme: str, seed: int, shards_per_client: int = 2
) -> list[np.ndarray]:
    """Dispatch on ``scheme`` (one of `PARTITIONS`)."""
    if scheme == "iid":
        return iid_partition(len(labels), num_clients, seed)
    if scheme == "label-skew":
        return label_skew_partition(labels, num_clients, seed, shards_per_client)
    raise DataError(f"unknown partition {scheme!r}; choose one of {', '.join(PARTITIONS)}")


def holdout_split(
    parts: list[np.ndarray], test_fraction: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each client's indices into (train, test), ``floor(test_fraction * n)`` for test.

    Gives synthetic clients a per-client test split like LEAF's ``-t sample``; flooring keeps at
    least one training image per non-empty client.
    """
    rng = np.random.default_rng(seed)
    train, test = [], []
    for part in parts:
        shuffled = rng.permutation(part)
        n_test = int(len(part) * test_fraction)
        test.append(shuffled[:n_test])
        train.append(shuffled[n_test:])
    return train, test
