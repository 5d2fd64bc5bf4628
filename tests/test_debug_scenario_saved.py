"""The ``saved`` dataset kind: how the debugging scenario's groups reach the simulation clients."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fedgs.data import DataError, load_federated
from fedgs.data.federated import ClientArrays, read_client_arrays, save_federated


def _arrays(ids: list[str], seed: int) -> ClientArrays:
    rng = np.random.default_rng(seed)
    train_counts, test_counts = np.array([3, 2], np.int64), np.array([1, 1], np.int64)
    return ClientArrays(
        client_ids=ids,
        train_pixels=rng.integers(0, 256, (5, 784), dtype=np.uint8),
        train_labels=rng.integers(0, 10, 5).astype(np.int64),
        train_counts=train_counts,
        test_pixels=rng.integers(0, 256, (2, 784), dtype=np.uint8),
        test_labels=rng.integers(0, 10, 2).astype(np.int64),
        test_counts=test_counts,
    )


def test_saved_folder_round_trips_through_load_federated(tmp_path: Path) -> None:
    arrays = _arrays(["w1", "w2"], seed=0)
    save_federated(tmp_path / "g", "group", 10, arrays, {"labels": "digits"})
    ds = load_federated("saved", tmp_path / "g")
    assert ds.client_ids == ["w1", "w2"] and ds.num_classes == 10
    images, labels = ds.client_train(1)
    expected = torch.from_numpy(arrays.train_pixels[3:].astype(np.float32)) / 127.5 - 1
    assert torch.equal(images.view(2, 784), expected)
    assert torch.equal(labels, torch.from_numpy(arrays.train_labels[3:]))
    back, info = read_client_arrays(ds)
    assert np.array_equal(back.test_pixels, arrays.test_pixels) and info == {"labels": "digits"}


def test_groups_with_other_writers_or_pixels_get_other_fingerprints(tmp_path: Path) -> None:
    a = _arrays(["w1", "w2"], seed=0)
    other_writers = _arrays(["w3", "w4"], seed=0)
    other_pixels = _arrays(["w1", "w2"], seed=0)
    other_pixels.train_pixels = 255 - other_pixels.train_pixels
    prints = set()
    for name, arrays in (("a", a), ("b", other_writers), ("c", other_pixels)):
        save_federated(tmp_path / name, "group", 10, arrays, {})
        prints.add(load_federated("saved", tmp_path / name).fingerprint)
    assert len(prints) == 3


def test_saved_refuses_what_it_cannot_honour(tmp_path: Path) -> None:
    save_federated(tmp_path / "g", "group", 36, _arrays(["w1", "w2"], 0), {"labels": "merged36"})
    with pytest.raises(DataError, match="labels 'merged36'"):
        load_federated("saved", tmp_path / "g")  # labels default to digits
    assert load_federated("saved", tmp_path / "g", labels="merged36").num_classes == 36
    with pytest.raises(DataError, match="fixed clients"):
        load_federated("saved", tmp_path / "g", labels="merged36", num_clients=3)
    with pytest.raises(DataError, match="needs a data directory"):
        load_federated("saved")
    with pytest.raises(DataError, match="no such folder"):
        load_federated("saved", tmp_path / "missing")
    with pytest.raises(DataError, match="not a fedgs dataset folder"):
        load_federated("saved", tmp_path)
    shutil.rmtree(tmp_path / "g" / "train")
    with pytest.raises(DataError, match="incomplete dataset folder"):
        load_federated("saved", tmp_path / "g", labels="merged36")
