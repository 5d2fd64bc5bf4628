"""Real LEAF FEMNIST (four independent LEAF samples in ../shared): dedup, counts, polarity, cache.

Numbers are from ../shared/data/femnist_leaf/PROVENANCE.md and USERS.tsv. The train total depends
on which copy a duplicated writer is taken from: PROVENANCE's 54,310 comes from taking the first
copy in its table order; fedgs takes the copy with the most train images (some copies hold a
truncated writer), which gives 54,503 train and 15,513 test images.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from fedgs.data import DataError, FederatedDataset, load_federated

FEMNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "femnist_leaf"
pytestmark = pytest.mark.skipif(
    not FEMNIST.is_dir(), reason=f"real FEMNIST data not found at {FEMNIST}"
)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fedgs-cache")


@pytest.fixture(scope="module")
def all62(cache_dir: Path) -> FederatedDataset:
    return load_federated("femnist", FEMNIST, labels="all62", cache_dir=cache_dir)


@pytest.fixture(scope="module")
def digits(cache_dir: Path) -> FederatedDataset:
    return load_federated("femnist", FEMNIST, labels="digits", cache_dir=cache_dir)


def test_dedup_by_writer(all62: FederatedDataset) -> None:
    info = all62.info
    split = info["writer_split"]
    assert info["copies"] == 4
    # 710 writers: 148 held out for evaluation (fedgs.data.writer_split), 562 training writers
    assert split["training_writers"] + split["evaluation_writers"] == 710
    assert split["evaluation_writers"] == 148
    assert info["writers"] == 562
    assert info["writers_with_train_split"] == 317
    assert all62.num_clients == 317
    assert len(set(all62.client_ids)) == all62.num_clients  # no writer twice
    assert all62.num_train_images == 43_486
    # every image of the evaluation writers, classifier half first
    assert all62.num_test_images == 14_340 == split["classifier_rows"] + split["reference_rows"]
    counts = np.diff(all62.train_offsets)
    assert counts.min() == 2 and counts.max() == 320 and np.median(counts) == 149


def test_all_62_classes(all62: FederatedDataset) -> None:
    _, train_y = all62.train_arrays()
    _, test_y = all62.test_arrays()
    assert all62.num_classes == 62
    assert set(train_y.tolist()) == set(range(62))
    assert set(test_y.tolist()) == set(range(62))


def test_digits_only(digits: FederatedDataset, all62: FederatedDataset) -> None:
    _, y = digits.train_arrays()
    assert digits.num_classes == 10 and int(y.max()) == 9
    _, all_y = all62.train_arrays()
    assert digits.num_train_images == int((all_y < 10).sum())
    # PROVENANCE: about 45.9k digits over train + test; without the training writers' own
    # LEAF test rows (unused: see fedgs.data.writer_split) 40,158 remain
    assert digits.num_train_images + digits.num_test_images == 40_158
    assert digits.num_clients == 317 - digits.info["writers_dropped_by_labels"] == 308
    assert set(digits.client_ids) <= set(all62.client_ids)


def test_mnist_polarity(all62: FederatedDataset) -> None:
    x, _ = all62.client_train(0)
    assert x.min() == -1.0 and x.max() == 1.0
    assert x.mean() < -0.8  # dark background, bright ink (LEAF itself is 88% white)
    corners = x[:, 0, [0, 0, -1, -1], [0, -1, 0, -1]]
    assert (corners == -1.0).float().mean() > 0.95


def test_test_set_is_the_evaluation_writers(all62: FederatedDataset) -> None:
    assert all62.test_offsets is None and not all62.has_client_test
    with pytest.raises(DataError, match="global"):
        all62.client_test(0)
    split = all62.info["writer_split"]
    held = set(split["classifier_writer_ids"]) | set(split["reference_writer_ids"])
    assert not held & set(all62.client_ids)


def test_cached_reload_is_fast_and_identical(all62: FederatedDataset, cache_dir: Path) -> None:
    start = time.perf_counter()
    again = load_federated("femnist", FEMNIST, labels="all62", cache_dir=cache_dir)
    assert time.perf_counter() - start < 5.0
    assert again.path == all62.path and again.fingerprint == all62.fingerprint
    assert again.train_counts() == all62.train_counts()


def test_subset_shares_files(all62: FederatedDataset) -> None:
    picked = [5, 1, 300]
    sub = all62.subset(picked)
    assert sub.client_ids == [all62.client_ids[i] for i in picked]
    assert sub.path == all62.path and sub.fingerprint != all62.fingerprint
    x, _ = sub.train_arrays()
    assert len(x) == sub.num_train_images == sum(len(all62.client_train(i)[0]) for i in picked)
    assert bool((sub.client_train(2)[0] == all62.client_train(300)[0]).all())


def test_num_clients_keeps_the_first_writers(digits: FederatedDataset, cache_dir: Path) -> None:
    first = load_federated(
        "femnist", FEMNIST, labels="digits", num_clients=100, cache_dir=cache_dir
    )
    assert first.num_clients == 100
    assert first.client_ids == digits.client_ids[:100]
    assert first.fingerprint == digits.subset(range(100)).fingerprint
    for bad in (0, digits.num_clients + 1):
        with pytest.raises(DataError, match=f"1..{digits.num_clients}"):
            load_federated(
                "femnist", FEMNIST, labels="digits", num_clients=bad, cache_dir=cache_dir
            )
