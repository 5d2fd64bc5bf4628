"""The whole FEMNIST writer population from Parquet shards: one federated client per writer.

Input: a folder of ``*.parquet`` files with columns ``writer_id`` (string), ``character`` (LEAF
label 0..61) and ``image`` (Hugging Face ``Image()``: 28x28 grayscale PNG bytes, 255 = white
background, LEAF's preprocessing), e.g. the complete LEAF set of 3,597 writers and 817,851
images. A writer may span shards; rows keep their order within a writer.

The result is what `fedgs.data.load` makes of LEAF's JSON: clients are the training writers
(`fedgs.data.writer_split`, sorted by writer id) with at least one image in the label mode;
every image of a training writer is a training image (the set has no per-writer test split),
and the test set is every image of the evaluation writers, classifier half first. Pixels are
flipped to MNIST polarity exactly as `fedgs.data.leaf` does, so a writer present in both
sources gives identical arrays.

Why it is built the way it is: decoding 817K PNGs takes about half a minute per core, so it
happens once per label mode and the result is cached (`fedgs.data.load`). The build reads the
small ``writer_id``/``character`` columns first, so it knows every kept image's final row and
fills preallocated uint8 arrays shard by shard (peak memory: the result plus one batch of
PNGs), decoding only the images the label mode keeps. One process: on a 2-core machine a
process per core was no faster (PNG decoding of 28x28 images is mostly per-image overhead).

Shards are opened with ``datasets.load_dataset("parquet", ..., streaming=True)``: that reads a
Parquet file in place, batch by batch and only the columns asked for (no Arrow copy in the
Hugging Face cache, nothing fetched over the network).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from fedgs.data import writer_split
from fedgs.data.errors import DataError
from fedgs.data.federated import PIXELS, ClientArrays
from fedgs.data.leaf import relabel

COLUMNS = ("writer_id", "character", "image")
NUM_LABELS = 62  # LEAF's labels 0..61: digits, then A-Z, then a-z
BATCH_ROWS = 10_000  # the shards' row-group size


def _batches(path: Path, columns: list[str]) -> Iterator[pa.Table]:
    """``columns`` of the shard as Arrow tables of up to `BATCH_ROWS` rows."""
    try:
        ds = datasets.load_dataset("parquet", data_files=[str(path)], split="train", streaming=True)
        present = ds.column_names or []
        missing = [c for c in COLUMNS if c not in present]
        if missing:
            raise DataError(
                f"{path}: not a FEMNIST shard: column(s) {', '.join(missing)} missing "
                f"(it has {', '.join(present) or 'none'}; expected {', '.join(COLUMNS)})"
            )
        yield from ds.select_columns(columns).with_format("arrow").iter(batch_size=BATCH_ROWS)
    except DataError:
        raise
    except (pa.ArrowException, OSError, ValueError, TypeError) as err:
        raise DataError(f"{path}: cannot read as Parquet ({err})") from err


def _column(batch: pa.Table, name: str, path: Path) -> pa.Array:
    column = batch.column(name).combine_chunks()
    if column.null_count:
        raise DataError(f"{path}: column {name} has missing values")
    return column


def read_index(path: Path) -> tuple[pa.ChunkedArray, np.ndarray]:
    """Every row's writer id (Arrow strings) and LEAF label (0..61, int64), no images read."""
    ids = []
    labels = []
    for batch in _batches(path, ["writer_id", "character"]):
        writer = _column(batch, "writer_id", path)
        label = _column(batch, "character", path)
        if not pa.types.is_string(writer.type) and not pa.types.is_large_string(writer.type):
            raise DataError(f"{path}: column writer_id is {writer.type}, expected strings")
        if not pa.types.is_integer(label.type):
            raise DataError(f"{path}: column character is {label.type}, expected integer labels")
        ids.append(writer.cast(pa.string()))
        labels.append(label.to_numpy().astype(np.int64))
    found = np.concatenate(labels) if labels else np.zeros(0, np.int64)
    if found.size and (found.min() < 0 or found.max() >= NUM_LABELS):
        raise DataError(f"{path}: labels must lie in 0..{NUM_LABELS - 1}")
    return pa.chunked_array(ids, pa.string()), found


def _decode(png: bytes | None, path: Path, row: int) -> np.ndarray:
    """One image as 784 uint8 in MNIST polarity (ink bright): ``255 - stored pixel``."""
    if png is None:
        raise DataError(f"{path}: row {row} has no image bytes")
    try:
        image = Image.open(io.BytesIO(png))
        if image.mode != "L" or image.size != (28, 28):
            raise DataError(
                f"{path}: row {row} is a {image.mode} {image.size[0]}x{image.size[1]} image, "
                f"expected grayscale (L) 28x28"
            )
        pixels = np.frombuffer(image.tobytes(), np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise DataError(f"{path}: row {row} is not a readable image ({err})") from err
    return 255 - pixels


def decode_rows(path: Path, rows: np.ndarray) -> np.ndarray:
    """The images of shard rows ``rows`` (ascending), (len(rows), 784) uint8, MNIST polarity.

    Stored pixels follow LEAF (255 = white background), like LEAF's JSON floats ``k/255``;
    flipping them here gives exactly the arrays `fedgs.data.leaf` makes from the JSON.
    """
    out = np.empty((len(rows), PIXELS), np.uint8)
    start = done = 0
    for batch in _batches(path, ["image"]):
        stop = start + batch.num_rows
        wanted = rows[done : np.searchsorted(rows, stop)]
        if wanted.size:
            image = _column(batch, "image", path)
            if not pa.types.is_struct(image.type) or image.type.get_field_index("bytes") < 0:
                raise DataError(f"{path}: column image is {image.type}, expected PNG bytes")
            pngs = image.field("bytes").take(pa.array(wanted - start)).to_pylist()
            for i, (row, png) in enumerate(zip(wanted.tolist(), pngs, strict=True)):
                out[done + i] = _decode(png, path, row)
            done += wanted.size
        start = stop
    if done != len(rows):
        raise DataError(f"{path}: has {start} rows, fewer than when it was indexed")
    return out


FEMNIST_ENV = "FEDGS_FEMNIST"


def default_dir() -> Path:
    """The FEMNIST folder used when none is given: ``$FEDGS_FEMNIST``. No path is guessed: a
    run's data is what its user named, never whatever happens to sit near the current folder."""
    env = os.environ.get(FEMNIST_ENV)
    if env:
        return Path(env).expanduser()
    raise DataError(
        f"the femnist dataset needs a data directory: pass --data-dir (a folder of FEMNIST "
        f"Parquet shards, or LEAF's own output), or set {FEMNIST_ENV} to one"
    )


def find_shards(root: Path) -> list[Path]:
    """The ``*.parquet`` files directly in ``root``, sorted by name (none: empty list)."""
    return sorted(p for p in root.glob("*.parquet") if p.is_file()) if root.is_dir() else []


def read_parquet(shards: list[Path], mode: str) -> tuple[ClientArrays, dict[str, Any]]:
    """Label mode ``mode``'s clients and evaluation set from ``shards``, with a report."""
    ids, labels, shard_rows = [], [], []
    for shard in shards:
        shard_ids, shard_labels = read_index(shard)
        ids.extend(shard_ids.chunks)
        labels.append(shard_labels)
        shard_rows.append(len(shard_ids))
    # writer ids -> their rank in sorted order, through Arrow: no Python string per image
    encoded = pa.chunked_array(ids, pa.string()).combine_chunks().dictionary_encode()
    found = encoded.dictionary.to_pylist()
    order = sorted(range(len(found)), key=found.__getitem__)
    rank = np.empty(len(found), np.int64)
    rank[order] = np.arange(len(found))
    owner = rank[encoded.indices.to_numpy()]
    writer_ids = [found[i] for i in order]
    held, classifier = writer_split.roles(writer_ids)
    keep, new_labels = relabel(np.concatenate(labels), mode)

    rows = np.flatnonzero(keep & ~held[owner])
    train_rows = rows[np.argsort(owner[rows], kind="stable")]  # writer order, rows kept in order
    rows = np.flatnonzero(keep & held[owner])
    test_rows = rows[np.lexsort((owner[rows], ~classifier[owner[rows]]))]  # classifier half first
    # where each kept row goes: train row i -> i, test row j -> -1 - j
    destination = np.zeros(len(owner), np.int64)
    destination[train_rows] = np.arange(len(train_rows))
    destination[test_rows] = -1 - np.arange(len(test_rows))
    train_pixels = np.empty((len(train_rows), PIXELS), np.uint8)
    test_pixels = np.empty((len(test_rows), PIXELS), np.uint8)

    start = 0
    for shard, count in tqdm(
        zip(shards, shard_rows, strict=True),
        total=len(shards),
        desc="Decoding FEMNIST Parquet shards",
        unit="shard",
    ):
        local = np.flatnonzero(keep[start : start + count])
        where = destination[start + local]
        pixels = decode_rows(shard, local)
        train_pixels[where[where >= 0]] = pixels[where >= 0]
        test_pixels[-1 - where[where < 0]] = pixels[where < 0]
        start += count

    train_counts = np.bincount(owner[train_rows], minlength=len(writer_ids))
    is_client = train_counts > 0
    split = writer_split.record(writer_ids)
    split["classifier_rows"] = int(np.count_nonzero(classifier[owner[test_rows]]))
    split["reference_rows"] = len(test_rows) - split["classifier_rows"]
    arrays = ClientArrays(
        client_ids=[w for w, c in zip(writer_ids, is_client, strict=True) if c],
        train_pixels=train_pixels,
        train_labels=new_labels[train_rows],
        train_counts=train_counts[is_client],
        test_pixels=test_pixels,
        test_labels=new_labels[test_rows],
        test_counts=None,
    )
    info = {
        "shards": len(shards),
        "images_in_source": len(owner),
        "writers": split["training_writers"],
        "writers_with_train_split": split["training_writers"],  # every writer: no test split
        "writers_test_only": 0,
        "writers_dropped_by_labels": split["training_writers"] - int(is_client.sum()),
        "writer_split": split,
    }
    return arrays, info
