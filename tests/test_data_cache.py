"""The data cache's key follows a source's bytes, not where it lies or when it was written: a
re-synced or copied data folder reuses its decoded folder, a changed byte gives a new one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fedgs.data import DataError, load_federated
from fedgs.data.cache import cache_key

MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist"


def test_key_follows_bytes_not_place_or_time(tmp_path: Path) -> None:
    first = tmp_path / "a" / "shard.bin"
    first.parent.mkdir()
    first.write_bytes(b"\x00" * 1000)
    key = cache_key("femnist", [first], {"labels": "digits"})
    copy = tmp_path / "b" / "shard.bin"
    copy.parent.mkdir()
    shutil.copyfile(first, copy)
    os.utime(copy, ns=(1, 1))
    assert cache_key("femnist", [copy], {"labels": "digits"}) == key
    copy.write_bytes(b"\x00" * 999 + b"\x01")  # same size, one byte changed
    os.utime(copy, ns=(1, 1))  # and the same mtime as before: the bytes alone must tell
    assert cache_key("femnist", [copy], {"labels": "digits"}) != key
    assert cache_key("femnist", [first], {"labels": "all"}) != key
    renamed = first.with_name("other.bin")
    shutil.copyfile(first, renamed)
    assert cache_key("femnist", [renamed], {"labels": "digits"}) != key  # names tell files apart


@pytest.mark.skipif(not MNIST.is_dir(), reason=f"real MNIST IDX files not found at {MNIST}")
def test_a_copied_data_folder_reuses_the_decoded_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ds = load_federated("mnist", MNIST, num_clients=10, cache_dir=cache)
    copy = tmp_path / "mnist-copy"
    shutil.copytree(MNIST, copy)  # new paths and new mtimes, the same bytes
    again = load_federated("mnist", copy, num_clients=10, cache_dir=cache)
    assert again.path == ds.path and again.fingerprint == ds.fingerprint
    assert len(list(cache.iterdir())) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_source_is_a_data_error(tmp_path: Path) -> None:
    source = tmp_path / "shard.bin"
    source.write_bytes(b"x")
    source.chmod(0)
    with pytest.raises(DataError, match="shard.bin: cannot read"):
        cache_key("femnist", [source], {})


def test_a_missing_source_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="gone.bin: cannot read"):
        cache_key("femnist", [tmp_path / "gone.bin"], {})
