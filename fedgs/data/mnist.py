"""MNIST from its four IDX files, split into K virtual clients.

MNIST has no writer ids, so clients are simulated with `fedgs.data.partition` (``iid`` or
``label-skew``) over the 60,000 training images, stored once as a pool and dealt in memory; the
10,000 t10k images stay one global test set.
Files may be gzipped (``train-images-idx3-ubyte.gz``) or not, and the dotted spelling
``train-images.idx3-ubyte`` is accepted too. Pixels are already in MNIST polarity (ink 255).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from fedgs.data.errors import DataError
from fedgs.data.federated import IMAGE_SIZE, PIXELS, ClientArrays
from fedgs.data.files import read_bytes

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
CLIENT_ID = "mnist-{:05d}"
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def find_idx_files(data_dir: str | Path) -> dict[str, Path]:
    """Paths of the four IDX files in ``data_dir`` (plain or .gz), keyed like `FILES`."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: MNIST data directory does not exist")
    found = {}
    for key, stem in FILES.items():
        dotted = stem.replace("-idx", ".idx")
        names = (stem, stem + ".gz", dotted, dotted + ".gz")
        hits = [data_dir / name for name in names if (data_dir / name).is_file()]
        if not hits:
            raise DataError(f"{data_dir}: missing {stem}[.gz] (MNIST IDX file)")
        found[key] = hits[0]
    return found


def read_idx_images(path: Path) -> np.ndarray:
    """(n, 784) uint8 images, after checking the magic number, image size and file length."""
    raw = read_bytes(path)
    if len(raw) < 16:
        raise DataError(f"{path}: too short for an IDX image header")
    magic, n, rows, cols = struct.unpack(">IIII", raw[:16])
    if magic != IMAGES_MAGIC:
        raise DataError(f"{path}: magic number {magic}, expected {IMAGES_MAGIC} (IDX images)")
    if (rows, cols) != (IMAGE_SIZE, IMAGE_SIZE):
        raise DataError(f"{path}: images are {rows}x{cols}, expected 28x28")
    if len(raw) != 16 + n * PIXELS:
        raise DataError(f"{path}: header says {n} images but the file has {len(raw)} bytes")
    return np.frombuffer(raw, np.uint8, offset=16).reshape(n, PIXELS)


def read_idx_labels(path: Path) -> np.ndarray:
    """(n,) int64 labels 0..9, after checking the magic number and file length."""
    raw = read_bytes(path)
    if len(raw) < 8:
        raise DataError(f"{path}: too short for an IDX label header")
    magic, n = struct.unpack(">II", raw[:8])
    if magic != LABELS_MAGIC:
        raise DataError(f"{path}: magic number {magic}, expected {LABELS_MAGIC} (IDX labels)")
    if len(raw) != 8 + n:
        raise DataError(f"{path}: header says {n} labels but the file has {len(raw)} bytes")
    labels = np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)
    if labels.size and labels.max() > 9:
        raise DataError(f"{path}: labels must lie in 0..9")
    return labels


def _read_pair(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    x, y = read_idx_images(images), read_idx_labels(labels)
    if len(x) != len(y):
        raise DataError(f"{images}: {len(x)} images but {labels.name} has {len(y)} labels")
    return x, y


def mnist_pool(files: dict[str, Path]) -> ClientArrays:
    """The 60,000 training images as one pool to be dealt to clients; the t10k images as the
    global test set."""
    train_x, train_y = _read_pair(files["train_images"], files["train_labels"])
    test_x, test_y = _read_pair(files["test_images"], files["test_labels"])
    return ClientArrays(
        client_ids=["mnist-pool"],
        train_pixels=train_x,
        train_labels=train_y,
        train_counts=np.array([len(train_y)], np.int64),
        test_pixels=test_x,
        test_labels=test_y,
        test_counts=None,
    )
