"""The evaluation writers never reach a client, whatever the run's options.

The real-data test goes through the API clients use (fedgs/run_data.py's ``dataset_for`` ->
``FederatedDataset.client_train``) and compares pixels, not just writer ids.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from fedgs.data import load_federated
from fedgs.data.cache import CACHE_ENV
from fedgs.data.federated import ClientArrays, FederatedDataset, read_client_arrays
from fedgs.data.writer_split import (
    EVALUATION_SHARE,
    is_classifier_writer,
    is_evaluation_writer,
    split_writers,
)
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for

FEMNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "femnist_leaf"


def test_rule_depends_on_the_writer_id_only() -> None:
    ids = [f"f{k:04d}_{k % 97:02d}" for k in range(5000)]
    held = [is_evaluation_writer(w) for w in ids]
    assert held == [is_evaluation_writer(w) for w in ids]
    assert abs(np.mean(held) - EVALUATION_SHARE) < 0.02
    # the classifier half is a subset of the evaluation writers
    assert all(h for w, h in zip(ids, held, strict=True) if is_classifier_writer(w))


def test_split_keeps_each_writer_whole() -> None:
    ids = [f"w{k}" for k in range(40)]
    train_counts = np.arange(1, 41)
    test_counts = np.full(40, 2)
    owner_train = np.repeat(np.arange(40), train_counts)
    owner_test = np.repeat(np.arange(40), test_counts)
    arrays = ClientArrays(
        client_ids=ids,
        train_pixels=np.repeat(owner_train[:, None], 784, 1).astype(np.uint8),
        train_labels=owner_train.astype(np.int64),
        train_counts=train_counts,
        test_pixels=np.repeat(owner_test[:, None], 784, 1).astype(np.uint8),
        test_labels=owner_test.astype(np.int64),
        test_counts=test_counts,
    )
    training, classifier, reference, record = split_writers(arrays)
    assert sorted(training.client_ids + classifier.client_ids + reference.client_ids) == sorted(ids)
    assert record["evaluation_writers"] == len(classifier.client_ids) + len(reference.client_ids)
    kept = {ids.index(w) for w in training.client_ids}
    assert set(training.train_labels.tolist()) == kept  # every row of a kept writer, no other
    assert len(training.train_labels) == sum(train_counts[k] for k in kept)


def _digests(pixels: np.ndarray) -> set[bytes]:
    return {hashlib.sha1(row.tobytes()).digest() for row in pixels}


@pytest.mark.skipif(not FEMNIST.is_dir(), reason=f"real FEMNIST data not found at {FEMNIST}")
@pytest.mark.parametrize("num_clients", [0, 50])
def test_no_evaluation_image_reaches_a_client(
    num_clients: int, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path_factory.getbasetemp() / "writer-split-cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    config = RunConfig(dataset="femnist", data_dir=str(FEMNIST), num_clients=num_clients)
    dataset = dataset_for(config)
    split = dataset.info["writer_split"]
    evaluation_ids = set(split["classifier_writer_ids"]) | set(split["reference_writer_ids"])
    assert 100 < len(evaluation_ids) < 200  # about 20% of FEMNIST's 710 writers
    assert not evaluation_ids & set(dataset.client_ids)
    # every image any evaluation writer has in the LEAF output (train and test rows, all labels)
    everyone, _ = read_client_arrays(FederatedDataset.load(next(cache.glob("femnist-writers*"))))
    held = np.array([w in evaluation_ids for w in everyone.client_ids])
    assert held.sum() == len(evaluation_ids)
    evaluation_images = _digests(everyone.train_pixels[np.repeat(held, everyone.train_counts)])
    evaluation_images |= _digests(everyone.test_pixels[np.repeat(held, everyone.test_counts)])
    for k in range(dataset.num_clients):
        images, _ = dataset.client_train(k)
        pixels = np.rint((images.numpy().reshape(len(images), -1) + 1.0) * 127.5).astype(np.uint8)
        assert not _digests(pixels) & evaluation_images, f"client {dataset.client_ids[k]}"
    # and the evaluation set the instrument reads is exactly the evaluation writers' digits
    test_images, _ = dataset.test_arrays()
    test_pixels = np.rint((test_images.numpy().reshape(len(test_images), -1) + 1) * 127.5)
    assert _digests(test_pixels.astype(np.uint8)) <= evaluation_images
    assert split["classifier_rows"] + split["reference_rows"] == len(test_images)


def test_embedded_held_out_part_never_reaches_a_client() -> None:
    dataset = load_federated("embedded")
    test_images, _ = dataset.test_arrays()
    held = {row.numpy().tobytes() for row in test_images.flatten(1)}
    for k in range(dataset.num_clients):
        images, _ = dataset.client_train(k)
        assert not {row.numpy().tobytes() for row in images.flatten(1)} & held
