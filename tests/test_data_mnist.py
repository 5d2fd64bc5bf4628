"""MNIST IDX reading and virtual-client partitions (real files in ../shared, synthetic errors)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fedgs.data import DataError, FederatedDataset, load_federated
from fedgs.data.mnist import read_idx_images, read_idx_labels
from fedgs.data.partition import iid_partition, label_skew_partition

MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist"
needs_mnist = pytest.mark.skipif(
    not MNIST.is_dir(), reason=f"real MNIST IDX files not found at {MNIST}"
)


@pytest.fixture(scope="module")
def skewed(tmp_path_factory: pytest.TempPathFactory) -> FederatedDataset:
    cache = tmp_path_factory.mktemp("fedgs-cache")
    return load_federated("mnist", MNIST, num_clients=100, partition="label-skew", cache_dir=cache)


def assert_disjoint_cover(parts: list[np.ndarray], n: int) -> None:
    merged = np.concatenate(parts)
    assert len(merged) == n and np.array_equal(np.sort(merged), np.arange(n))


def test_iid_partition_sizes() -> None:
    parts = iid_partition(1003, 10, seed=1)
    assert_disjoint_cover(parts, 1003)
    assert {len(p) for p in parts} == {100, 101}
    again = iid_partition(1003, 10, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_label_skew_partition_is_skewed() -> None:
    labels = np.repeat(np.arange(10), 100)
    parts = label_skew_partition(labels, 50, seed=0, shards_per_client=2)
    assert_disjoint_cover(parts, 1000)
    assert max(len(set(labels[p])) for p in parts) <= 2  # shards align with classes here


def test_partition_refuses_too_many_clients() -> None:
    with pytest.raises(DataError, match="between 1 and 10"):
        iid_partition(10, 11, seed=0)


@needs_mnist
def test_counts_and_global_test_set(skewed: FederatedDataset) -> None:
    assert skewed.num_train_images == 60_000
    assert skewed.num_test_images == 10_000
    assert skewed.test_offsets is None
    assert skewed.client_ids[42] == "mnist-00042"
    _, y = skewed.test_arrays()
    assert np.bincount(y.numpy()).tolist()[:2] == [980, 1135]
    with pytest.raises(DataError, match="global"):
        skewed.client_test(0)


@needs_mnist
def test_label_skew_on_real_mnist(skewed: FederatedDataset) -> None:
    classes = [len(set(skewed.client_train(k)[1].tolist())) for k in range(skewed.num_clients)]
    assert max(classes) <= 4 and np.mean(classes) < 2.5  # 2 shards of 300 images each
    x, y = skewed.train_arrays()
    assert np.bincount(y.numpy()).tolist()[:2] == [5923, 6742]  # every image exactly once
    assert x.mean() < -0.7  # MNIST polarity: dark background


@needs_mnist
def test_iid_clients_see_all_classes(tmp_path: Path) -> None:
    ds = load_federated("mnist", MNIST, num_clients=10, cache_dir=tmp_path)
    assert np.diff(ds.train_offsets).tolist() == [6000] * 10
    assert all(len(set(ds.client_train(k)[1].tolist())) == 10 for k in range(10))


def write_idx(path: Path, magic: int, dims: tuple[int, ...], payload: bytes) -> Path:
    header = struct.pack(">I" + "I" * len(dims), magic, *dims)
    path.write_bytes(gzip.compress(header + payload))
    return path


def test_idx_validation(tmp_path: Path) -> None:
    good = write_idx(tmp_path / "ok-images.gz", 2051, (2, 28, 28), bytes(2 * 784))
    assert read_idx_images(good).shape == (2, 784)
    cases = [
        (write_idx(tmp_path / "magic.gz", 2049, (2, 28, 28), bytes(2 * 784)), "magic number"),
        (write_idx(tmp_path / "size.gz", 2051, (2, 32, 32), bytes(2 * 1024)), "32x32"),
        (write_idx(tmp_path / "short.gz", 2051, (3, 28, 28), bytes(2 * 784)), "header says 3"),
    ]
    for path, message in cases:
        with pytest.raises(DataError, match=message) as err:
            read_idx_images(path)
        assert str(path) in str(err.value)
    labels = write_idx(tmp_path / "labels.gz", 2049, (2,), bytes([3, 12]))
    with pytest.raises(DataError, match="0..9"):
        read_idx_labels(labels)


def test_missing_idx_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        load_federated("mnist", tmp_path, cache_dir=tmp_path)
    with pytest.raises(DataError, match="needs a data directory"):
        load_federated("mnist")
