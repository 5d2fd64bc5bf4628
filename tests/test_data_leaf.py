"""LEAF reader on tiny synthetic shards: format errors, dedup rule, label modes, polarity."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from fedgs.data import DataError, load_federated
from fedgs.data.federated import ClientArrays
from fedgs.data.leaf import find_shards, read_leaf, read_shard, select_labels

BLANK = [1.0] * 784  # LEAF background: white


def image(ink: float = 0.0, at: int = 0) -> list[float]:
    row = list(BLANK)
    row[at] = ink
    return row


def user(n: int, labels: list[int] | None = None) -> dict:
    labels = labels if labels is not None else [k % 10 for k in range(n)]
    return {"x": [image() for _ in range(n)], "y": labels}


def shard(users: dict[str, dict]) -> dict:
    return {
        "users": list(users),
        "num_samples": [len(u["y"]) for u in users.values()],
        "user_data": users,
    }


def write(path: Path, obj: object, *, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def clients(root: Path, labels: str) -> tuple[ClientArrays, dict]:
    writers, parse_info = read_leaf(find_shards(root))
    arrays, info = select_labels(writers, labels)
    return arrays, {**parse_info, **info}


def test_reads_plain_and_gzipped_shards_with_mnist_polarity(tmp_path: Path) -> None:
    write(tmp_path / "train" / "a.json", shard({"w1": {"x": [image(0.0, 5)], "y": [3]}}))
    write(
        tmp_path / "test" / "a.json.gz",
        shard({"w1": {"x": [image(128 / 255, 7)], "y": [4]}}),
        gz=True,
    )
    arrays, info = clients(tmp_path, "all62")
    assert arrays.client_ids == ["w1"]
    train = arrays.train_pixels[0]
    assert train.dtype == np.uint8
    assert train[5] == 255  # LEAF ink 0.0 -> bright
    assert np.all(np.delete(train, 5) == 0)  # LEAF background 1.0 -> dark
    assert arrays.test_pixels[0][7] == 127  # 255 - round(255 * 128/255)
    assert info["writers"] == 1


def test_float_conversion_on_access(tmp_path: Path) -> None:
    write(tmp_path / "d" / "train" / "a.json", shard({"w1": {"x": [image(0.0, 0)], "y": [1]}}))
    ds = load_federated("femnist", tmp_path / "d", labels="all62", cache_dir=tmp_path / "cache")
    x, y = ds.client_train(0)
    assert x.shape == (1, 1, 28, 28) and x.dtype.is_floating_point
    assert x[0, 0, 0, 0].item() == 1.0 and x.min().item() == -1.0
    assert y.tolist() == [1]
    assert ds.test_offsets is None and ds.num_test_images == 0  # test set: evaluation writers


def test_dedup_prefers_train_split_then_most_train_images(tmp_path: Path) -> None:
    # "a" has w1 only in test; "b" has a truncated train split; "c" the full one
    write(tmp_path / "a" / "test" / "s.json", shard({"w1": user(2), "w2": user(3)}))
    write(tmp_path / "b" / "train" / "s.json", shard({"w1": user(2), "w3": user(4)}))
    write(tmp_path / "c" / "train" / "s.json", shard({"w1": user(5), "w3": user(4)}))
    write(tmp_path / "c" / "test" / "s.json", shard({"w1": user(1)}))
    arrays, info = clients(tmp_path, "all62")
    assert arrays.client_ids == ["w1", "w3"]  # w2 is test-only: not a client
    assert arrays.train_counts.tolist() == [5, 4]  # w1 from c (5 > 2); w3 tie -> b, first sorted
    assert arrays.test_counts.tolist() == [1, 0]  # w1's test split from c, not a's
    assert len(arrays.test_labels) == 1 + 3  # plus w2's test images, after the clients' rows
    assert info["writers"] == 3
    assert info["writers_with_train_split"] == 2
    assert info["writers_test_only"] == 1
    assert info["duplicate_writer_copies_skipped"] == 3  # w1 in a and b, w3 in c
    assert info["test_images_of_non_clients"] == 3


def test_label_modes(tmp_path: Path) -> None:
    labels = [0, 9, 10, 35, 36, 61]
    write(tmp_path / "train" / "s.json", shard({"w1": user(6, labels), "w2": user(1, [40])}))
    digits, info = clients(tmp_path, "digits")
    assert digits.client_ids == ["w1"] and digits.train_labels.tolist() == [0, 9]
    assert info["writers_dropped_by_labels"] == 1  # w2 wrote no digit
    merged, _ = clients(tmp_path, "merged36")
    assert merged.train_labels.tolist() == [0, 9, 10, 35, 10, 35, 14]
    full, _ = clients(tmp_path, "all62")
    assert full.train_labels.tolist() == [*labels, 40]


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist") as err:
        find_shards(tmp_path / "nope")
    assert "nope" in str(err.value)


def test_directory_without_shards(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="no LEAF shards") as err:
        find_shards(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_load_federated_needs_femnist_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDGS_FEMNIST", raising=False)
    monkeypatch.chdir(tmp_path)  # no default FEMNIST folder (../shared/data/femnist_full) here
    with pytest.raises(DataError, match="data directory"):
        load_federated("femnist")


BAD_SHARDS = {
    "bad_json": (b'{"users": [', "not valid JSON"),
    "no_users": ({"num_samples": [], "user_data": {}}, "missing key"),
    "no_user_data": ({"users": [], "num_samples": []}, "missing key"),
    "not_object": ([1, 2], "not a LEAF shard"),
    "short_row": (shard({"w1": {"x": [[1.0] * 783], "y": [0]}}), "783 values, expected 784"),
    "users_vs_num_samples": (
        {"users": ["w1"], "num_samples": [1, 2], "user_data": {"w1": user(1)}},
        "1 users but 2 num_samples",
    ),
    "num_samples_vs_y": (
        {"users": ["w1"], "num_samples": [3], "user_data": {"w1": user(2)}},
        "num_samples says 3 but it has 2",
    ),
    "x_vs_y": (shard({"w1": {"x": [BLANK, BLANK], "y": [0]}}), "2 images in 'x' but 1 labels"),
    "empty_client": (shard({"w1": {"x": [], "y": []}}), "empty client"),
    "user_data_keys": (
        {"users": ["w1"], "num_samples": [1], "user_data": {"w2": user(1)}},
        "differ",
    ),
    "user_id_type": (
        {"users": [7], "num_samples": [1], "user_data": {"7": user(1)}},
        "must be strings",
    ),
    "pixel_range": (shard({"w1": {"x": [[2.0] * 784], "y": [0]}}), r"\[0, 1\]"),
    "label_range": (shard({"w1": {"x": [BLANK], "y": [62]}}), "0..61"),
}


@pytest.mark.parametrize("case", sorted(BAD_SHARDS))
def test_bad_shard_names_file_and_problem(tmp_path: Path, case: str) -> None:
    content, message = BAD_SHARDS[case]
    path = tmp_path / "train" / f"{case}.json"
    if isinstance(content, bytes):
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
    else:
        write(path, content)
    with pytest.raises(DataError, match=message) as err:
        read_shard(path)
    assert str(path) in str(err.value)
    # and through the public loader, without a traceback from deep inside
    with pytest.raises(DataError, match=message):
        load_federated("femnist", tmp_path, cache_dir=tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").iterdir()]  # no half-written cache left


def test_truncated_gzip(tmp_path: Path) -> None:
    path = write(tmp_path / "train" / "s.json.gz", shard({"w1": user(3)}), gz=True)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError, match="truncated gzip") as err:
        read_shard(path)
    assert str(path) in str(err.value)


def test_not_gzip_despite_name(tmp_path: Path) -> None:
    path = write(tmp_path / "train" / "s.json.gz", shard({"w1": user(1)}))
    with pytest.raises(DataError, match="gzip") as err:
        read_shard(path)
    assert str(path) in str(err.value)


def test_search_stops_at_leaf_output(tmp_path: Path) -> None:
    write(tmp_path / "data" / "train" / "s.json", shard({"w1": user(1)}))
    # LEAF's intermediate folders beside train/ are not searched
    write(tmp_path / "data" / "sampled_data" / "train" / "x.json", shard({"w9": user(1)}))
    found = find_shards(tmp_path)
    assert [(s.copy, s.split, s.path.name) for s in found] == [("data", "train", "s.json")]
    assert [s.path.name for s in find_shards(tmp_path / "data" / "train")] == ["s.json"]
