"""`FederatedDataset`: the one type every loader returns.

Why this layout: a run touches thousands of clients, one at a time, often from several worker
processes. So the decoded images live once on disk as Hugging Face ``datasets`` Arrow files
(memory-mapped by ``load_from_disk``), train and test each sorted by client, and a client is
just a row range given by an offsets array of length K+1. Taking one client's images is a slice
of a memory map, nothing is held per client in Python, and pickling a dataset to a worker only
carries file paths and the offsets.

Sources without writers (MNIST, the embedded digits) are stored once, pooled, and dealt to
virtual clients in memory (`FederatedDataset.dealt`): the offsets then count positions in a row
order over the pooled files (one int64 per image, pickled with the paths) in place of a sorted
copy, so another seed or client count costs no disk (a server choosing the run's seed cannot
fill a node's disk with copies).

Stored columns: ``pixels`` (fixed-size list of 784 uint8, row-major 28x28, MNIST polarity: ink
bright, background 0) and ``label`` (int64). Floats in [-1, 1] (``x / 127.5 - 1``) are made on
access, so the files stay 4x smaller than float32 and the scaling lives in one place.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import torch

from fedgs.data.errors import DataError

IMAGE_SIZE = 28
PIXELS = IMAGE_SIZE * IMAGE_SIZE
FORMAT_VERSION = 1
META_FILE = "fedgs_meta.json"


@dataclass
class ClientArrays:
    """Decoded data in the order it is stored: rows grouped by client, clients in list order.

    ``test_counts`` gives each client's own test rows, which come first in the test arrays; any
    test rows after them belong to no client (e.g. FEMNIST writers without training images) and
    are only part of the evaluation set. ``test_counts=None`` means the test set is global
    (MNIST): it is not split by client at all.
    """

    client_ids: list[str]
    train_pixels: np.ndarray  # (N, 784) uint8
    train_labels: np.ndarray  # (N,) int64
    train_counts: np.ndarray  # (K,)
    test_pixels: np.ndarray  # (M, 784) uint8
    test_labels: np.ndarray  # (M,) int64
    test_counts: np.ndarray | None  # (K,) or None


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def _arrow_dataset(pixels: np.ndarray, labels: np.ndarray, fingerprint: str) -> datasets.Dataset:
    # Built through pyarrow directly: Dataset.from_dict on a (N, 784) array goes row by row in
    # Python and takes ~30 s for MNIST; this takes well under a second. The fingerprint is
    # given because without one ``datasets`` hashes the whole table, holding about four
    # copies of it in memory meanwhile (1 GB more for FEMNIST's 250 MB of digits).
    flat = pa.array(np.ascontiguousarray(pixels, dtype=np.uint8).reshape(-1))
    table = pa.table(
        {
            "pixels": pa.FixedSizeListArray.from_arrays(flat, PIXELS),
            "label": pa.array(np.asarray(labels, dtype=np.int64)),
        }
    )
    return datasets.Dataset(table, fingerprint=fingerprint)


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Hide the ``datasets`` save bar (our own bar already reports the slow part)."""
    was_enabled = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def content_fingerprint(name: str, num_classes: int, arrays: ClientArrays) -> str:
    """Hash of what was stored (ids, offsets, pixels, labels), not of file paths or dates.

    Two machines holding the same data get the same fingerprint, so others can key cached
    classifiers on it; a different label mode, partition or seed changes it.
    """
    h = hashlib.sha256()
    header = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "num_classes": num_classes,
        "client_ids": arrays.client_ids,
        "train_counts": [int(c) for c in arrays.train_counts],
        "test_counts": None if arrays.test_counts is None else [int(c) for c in arrays.test_counts],
    }
    h.update(json.dumps(header, sort_keys=True).encode())
    for array, dtype in (
        (arrays.train_pixels, np.uint8),
        (arrays.train_labels, np.int64),
        (arrays.test_pixels, np.uint8),
        (arrays.test_labels, np.int64),
    ):
        h.update(np.ascontiguousarray(array, dtype=dtype))  # the buffer itself: no copy
    return h.hexdigest()


def save_federated(
    path: Path, name: str, num_classes: int, arrays: ClientArrays, info: dict[str, Any]
) -> None:
    """Write ``arrays`` as a dataset folder that `FederatedDataset.load` reads back."""
    if len(arrays.train_counts) != len(arrays.client_ids):
        raise ValueError("train_counts must have one entry per client")
    path.mkdir(parents=True, exist_ok=True)
    fingerprint = content_fingerprint(name, num_classes, arrays)
    with _quiet_datasets():
        # one Arrow file per split: memory-mapped anyway, and an empty split still gets a file
        # (with the default sharding, an empty split is saved as no file and cannot be loaded)
        for split, pixels, labels in (
            ("train", arrays.train_pixels, arrays.train_labels),
            ("test", arrays.test_pixels, arrays.test_labels),
        ):
            dataset = _arrow_dataset(pixels, labels, f"{fingerprint[:32]}-{split}")
            dataset.save_to_disk(str(path / split), num_shards=1)
    meta = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "num_classes": num_classes,
        "client_ids": list(arrays.client_ids),
        "train_offsets": _offsets(arrays.train_counts).tolist(),
        "test_offsets": None
        if arrays.test_counts is None
        else _offsets(arrays.test_counts).tolist(),
        "fingerprint": fingerprint,
        "info": info,
    }
    (path / META_FILE).write_text(json.dumps(meta))


def read_client_arrays(ds: FederatedDataset) -> tuple[ClientArrays, dict[str, Any]]:
    """Everything ``ds`` holds, as arrays again, with its ``info``: its clients' training rows,
    and their own test rows followed by the rows of no client (or the global test set).

    For deriving one stored dataset from another (e.g. a FEMNIST label mode from all writers)
    without parsing the original source again, or a scenario's groups from a dealt dataset.
    """
    train_pixels, train_labels = ds._rows(
        "train", _merged_ranges(ds._train_starts, ds._train_stops)
    )
    if ds._test_starts is None or ds._test_stops is None:
        test_ranges = [(0, ds.num_test_images)]
    else:
        test_ranges = _merged_ranges(ds._test_starts, ds._test_stops)
        stored_end = int(ds._meta["test_offsets"][-1])  # rows after it belong to no client
        if ds.num_test_images > stored_end:
            test_ranges.append((stored_end, ds.num_test_images))
    test_pixels, test_labels = ds._rows("test", test_ranges)
    arrays = ClientArrays(
        client_ids=ds.client_ids,
        train_pixels=train_pixels,
        train_labels=train_labels,
        train_counts=np.diff(ds.train_offsets),
        test_pixels=test_pixels,
        test_labels=test_labels,
        test_counts=None if ds.test_offsets is None else np.diff(ds.test_offsets),
    )
    return arrays, ds.info


def _to_tensors(pixels: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.from_numpy(pixels.astype(np.float32)).view(-1, 1, IMAGE_SIZE, IMAGE_SIZE)
    return x.div_(127.5).sub_(1.0), torch.from_numpy(labels.astype(np.int64))


def _read_rows(ds: datasets.Dataset, ranges: Sequence[tuple[int, int]]) -> tuple[np.ndarray, ...]:
    """uint8 pixels (n, 784) and labels (n,) of the given row ranges, straight from Arrow."""
    table = ds.data.table  # the memory-mapped pyarrow table
    pixel_parts, label_parts = [], []
    for start, stop in ranges:
        rows = table.slice(start, stop - start)
        pixel_parts.append(rows.column("pixels").combine_chunks().flatten().to_numpy())
        label_parts.append(rows.column("label").to_numpy())
    if not pixel_parts:
        return np.zeros((0, PIXELS), np.uint8), np.zeros(0, np.int64)
    pixels = np.concatenate(pixel_parts) if len(pixel_parts) > 1 else pixel_parts[0]
    labels = np.concatenate(label_parts) if len(label_parts) > 1 else label_parts[0]
    return pixels.reshape(-1, PIXELS), labels


def _read_labels(ds: datasets.Dataset, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """The labels of the given row ranges, without reading any pixels."""
    table = ds.data.table
    parts = [table.slice(start, stop - start).column("label").to_numpy() for start, stop in ranges]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _positions(order: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    """The stored rows at ``ranges`` of a dealt view's row ``order``."""
    picked = [order[start:stop] for start, stop in ranges]
    return np.concatenate(picked) if picked else np.zeros(0, np.int64)


@dataclass
class _ChunkViews:
    """Zero-copy numpy views of a memory-mapped table's pixel chunks (and its labels): a
    dealt view's rows are scattered over the pool; indexing these reads a 60-image MNIST
    client in 0.18 ms of CPU, Arrow's ``take`` in 4.7 ms (a slice of a sorted copy: 0.07)."""

    starts: np.ndarray  # first row of each chunk, and the row count last
    pixels: list[np.ndarray]  # (rows of the chunk, 784) uint8 each
    labels: np.ndarray

    @classmethod
    def of(cls, ds: datasets.Dataset) -> _ChunkViews:
        chunks = ds.data.table.column("pixels").chunks
        views = [chunk.flatten().to_numpy().reshape(-1, PIXELS) for chunk in chunks]
        starts = np.cumsum([0] + [len(view) for view in views])
        return cls(starts, views, ds.data.table.column("label").to_numpy())

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pixels and labels of ``rows``, in that order."""
        chunk_of = np.searchsorted(self.starts, rows, side="right") - 1
        pixels = np.empty((len(rows), PIXELS), np.uint8)
        for c in np.unique(chunk_of).tolist():
            mine = chunk_of == c
            pixels[mine] = self.pixels[c][rows[mine] - self.starts[c]]
        return pixels, self.labels[rows]


def _merged_ranges(starts: np.ndarray, stops: np.ndarray) -> list[tuple[int, int]]:
    """Join back-to-back row ranges, so the full dataset is read as one slice."""
    merged: list[tuple[int, int]] = []
    for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        elif stop > start:
            merged.append((start, stop))
    return merged


class FederatedDataset:
    """Clients' images on memory-mapped Arrow files, addressed by row offsets.

    ``train_offsets[k]:train_offsets[k+1]`` are client k's rows in `train_arrays` order (length
    K+1). ``test_offsets`` is the same for per-client test splits, or None when the test set is
    global (MNIST). A `subset` shares the files and only recomputes offsets. A `dealt` dataset
    also carries, per split, the order of the stored rows its offsets count in.
    """

    def __init__(
        self,
        path: Path,
        meta: dict[str, Any],
        train: datasets.Dataset,
        test: datasets.Dataset,
        clients: np.ndarray | None = None,
        train_order: np.ndarray | None = None,
        test_order: np.ndarray | None = None,
    ) -> None:
        self.path = path
        self.name: str = meta["name"]
        self.num_classes: int = int(meta["num_classes"])
        self.info: dict[str, Any] = dict(meta.get("info") or {})
        self._meta = meta
        self._train = train
        self._test = test
        self._train_order = train_order
        self._test_order = test_order
        self._views: dict[str, _ChunkViews] = {}  # per split of a dealt view, made on first read
        all_ids: list[str] = meta["client_ids"]
        self._clients = np.arange(len(all_ids)) if clients is None else clients
        self.client_ids: list[str] = [all_ids[i] for i in self._clients.tolist()]
        base_train = np.asarray(meta["train_offsets"], dtype=np.int64)
        self._train_starts = base_train[self._clients]
        self._train_stops = base_train[self._clients + 1]
        self.train_offsets = _offsets(self._train_stops - self._train_starts)
        if meta["test_offsets"] is None:
            self._test_starts = self._test_stops = None
            self.test_offsets: np.ndarray | None = None
        else:
            base_test = np.asarray(meta["test_offsets"], dtype=np.int64)
            self._test_starts = base_test[self._clients]
            self._test_stops = base_test[self._clients + 1]
            self.test_offsets = _offsets(self._test_stops - self._test_starts)
        self.source_fingerprint: str = meta["fingerprint"]  # the stored folder or deal, any subset
        if clients is None:
            self.fingerprint: str = meta["fingerprint"]
        else:
            picked = ",".join(map(str, self._clients.tolist()))
            self.fingerprint = hashlib.sha256(
                f"{meta['fingerprint']}|{picked}".encode()
            ).hexdigest()

    @classmethod
    def load(cls, path: str | Path) -> FederatedDataset:
        """Open a folder written by `save_federated` (memory-mapped, nothing is copied)."""
        path = Path(path)
        meta_file = path / META_FILE
        try:
            meta = json.loads(meta_file.read_text())
        except FileNotFoundError as err:
            raise DataError(f"{path}: not a fedgs dataset folder ({META_FILE} is missing)") from err
        except ValueError as err:
            raise DataError(f"{meta_file}: unreadable dataset metadata ({err})") from err
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(
                f"{meta_file}: format version {meta.get('format_version')!r}, "
                f"this fedgs reads {FORMAT_VERSION}; delete the folder to rebuild it"
            )
        try:
            train = datasets.load_from_disk(str(path / "train"))
            test = datasets.load_from_disk(str(path / "test"))
        except FileNotFoundError as err:
            raise DataError(f"{path}: incomplete dataset folder ({err})") from err
        return cls(path, meta, train, test)

    def dealt(
        self,
        client_ids: Sequence[str],
        train_parts: Sequence[np.ndarray],
        test_parts: Sequence[np.ndarray] | None,
        options: dict[str, Any],
    ) -> FederatedDataset:
        """This stored pool's training rows dealt to ``client_ids``: client k trains on rows
        ``train_parts[k]`` and tests on ``test_parts[k]`` (also training rows of the pool; None:
        the pool's test set is the global one). Nothing is written: the view holds the row
        order. Its fingerprint hashes the pool's, the client ids and both row orders, so a
        changed partitioner is a new fingerprint (caches keyed on it stay true); ``options``
        (what chose the deal) join ``info``."""
        if self._train_order is not None or len(self._clients) != len(self._meta["client_ids"]):
            raise ValueError("dealt() takes a stored pool, not a subset or a deal of one")
        if len(train_parts) != len(client_ids) or (
            test_parts is not None and len(test_parts) != len(client_ids)
        ):
            raise ValueError("one train (and test) part per client")
        train_order = np.concatenate(train_parts).astype(np.int64)
        test_order = None if test_parts is None else np.concatenate(test_parts).astype(np.int64)
        train_offsets = _offsets(np.array([len(p) for p in train_parts]))
        test_offsets = (
            None if test_parts is None else _offsets(np.array([len(p) for p in test_parts]))
        )
        h = hashlib.sha256(f"{self._meta['fingerprint']}|dealt|".encode())
        h.update(json.dumps(list(client_ids)).encode())
        for array in (train_offsets, train_order, test_offsets, test_order):
            h.update(b"|" if array is None else array.tobytes())
        meta = {
            **self._meta,
            "client_ids": list(client_ids),
            "train_offsets": train_offsets.tolist(),
            "test_offsets": None if test_offsets is None else test_offsets.tolist(),
            "fingerprint": h.hexdigest(),
            "info": {**self.info, **options},
        }
        test = self._test if test_order is None else self._train
        return FederatedDataset(self.path, meta, self._train, test, None, train_order, test_order)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the chunk views: views of a memory map would travel as copies."""
        return {**self.__dict__, "_views": {}}

    def _rows(self, split: str, ranges: Sequence[tuple[int, int]]) -> tuple[np.ndarray, ...]:
        """uint8 pixels and labels of ``ranges`` of ``split`` (``train`` or ``test``): slices
        of the stored table, or in a dealt view positions in the split's row order."""
        table, order = self._split(split)
        if order is None:
            return _read_rows(table, ranges)
        return self._chunk_views(split).take(_positions(order, ranges))

    def _labels(self, split: str, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
        """`_rows`' labels alone, without reading any pixels."""
        table, order = self._split(split)
        if order is None:
            return _read_labels(table, ranges)
        return self._chunk_views(split).labels[_positions(order, ranges)]

    def _chunk_views(self, split: str) -> _ChunkViews:
        if split not in self._views:
            self._views[split] = _ChunkViews.of(self._split(split)[0])
        return self._views[split]

    def _split(self, split: str) -> tuple[datasets.Dataset, np.ndarray | None]:
        if split == "train":
            return self._train, self._train_order
        return self._test, self._test_order

    def __repr__(self) -> str:
        return (
            f"FederatedDataset(name={self.name!r}, clients={self.num_clients}, "
            f"train={self.num_train_images}, test={self.num_test_images}, "
            f"classes={self.num_classes})"
        )

    @property
    def num_clients(self) -> int:
        return len(self.client_ids)

    @property
    def num_train_images(self) -> int:
        return int(self.train_offsets[-1])

    @property
    def num_test_images(self) -> int:
        """Size of the evaluation set returned by `test_arrays`."""
        return len(self._test) if self._test_order is None else len(self._test_order)

    @property
    def has_client_test(self) -> bool:
        return self.test_offsets is not None

    def train_counts(self) -> dict[str, int]:
        """Client id -> number of training images."""
        return dict(zip(self.client_ids, np.diff(self.train_offsets).tolist(), strict=True))

    def class_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Images per class of this view's training images and of the whole evaluation set.

        From the label columns alone, so summarising 800K images reads no pixels.
        """
        train = self.train_labels()
        test = self._labels("test", [(0, self.num_test_images)])
        return (
            np.bincount(train, minlength=self.num_classes),
            np.bincount(test, minlength=self.num_classes),
        )

    def train_labels(self) -> np.ndarray:
        """The labels of this view's training images, in client order (no pixels read)."""
        ranges = _merged_ranges(self._train_starts, self._train_stops)
        return self._labels("train", ranges)

    def client_train(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client k's training images, float32 (n, 1, 28, 28) in [-1, 1], and int64 labels."""
        k = self._check_client(k)
        start, stop = int(self._train_starts[k]), int(self._train_stops[k])
        return _to_tensors(*self._rows("train", [(start, stop)]))

    def client_test(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client k's own test images (only where the source has per-client test splits)."""
        k = self._check_client(k)
        if self._test_starts is None or self._test_stops is None:
            raise DataError(
                f"{self.name}: the test set is global, not per client; use test_arrays()"
            )
        start, stop = int(self._test_starts[k]), int(self._test_stops[k])
        return _to_tensors(*self._rows("test", [(start, stop)]))

    def train_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All training images of this view's clients, in client order."""
        ranges = _merged_ranges(self._train_starts, self._train_stops)
        return _to_tensors(*self._rows("train", ranges))

    def test_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole evaluation set of the source, whatever `subset` was taken.

        For FEMNIST: every image of the evaluation writers (`fedgs.data.writer_split`), who are
        never clients; for MNIST the global t10k set; for the embedded digits the 10% held out
        of every client (never part of any client's training images).
        """
        return _to_tensors(*self._rows("test", [(0, self.num_test_images)]))

    def subset(self, client_indices: Sequence[int] | np.ndarray) -> FederatedDataset:
        """A view restricted to some clients (indices into this view), sharing the same files."""
        picked = np.asarray(client_indices, dtype=np.int64).reshape(-1)
        if picked.size and (picked.min() < 0 or picked.max() >= self.num_clients):
            raise DataError(f"{self.name}: client index out of range 0..{self.num_clients - 1}")
        if len(np.unique(picked)) != len(picked):
            raise DataError(f"{self.name}: subset() got the same client twice")
        return FederatedDataset(
            self.path,
            self._meta,
            self._train,
            self._test,
            self._clients[picked],
            self._train_order,
            self._test_order,
        )

    def _check_client(self, k: int) -> int:
        if not 0 <= int(k) < self.num_clients:
            raise IndexError(f"client {k} out of range 0..{self.num_clients - 1}")
        return int(k)
