"""LEAF FEMNIST reader: one federated client per handwriting writer.

Input is LEAF's own output (``data/femnist/data`` after ``preprocess.sh``): ``train/`` and
``test/`` folders of JSON shards (``*.json`` or ``*.json.gz``), each shard holding
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 floats]], "y": [...]}}}``.
A folder may also hold several such LEAF outputs ("copies", e.g. independent ``--sf 0.05``
samples); they are found by walking down until a folder has a ``train/`` or ``test/`` child.

Polarity: LEAF stores ``x = k/255`` with a WHITE background (1.0) and dark ink. We convert to
MNIST polarity, ink bright and background dark: ``pixel = 255 - round(255 * x)`` as uint8, so
FEMNIST and MNIST images look alike to a model (`FederatedDataset` maps them to [-1, 1]).

Deduplication: the same writer (user id) can occur in several copies, with slightly different
pixels (different Pillow versions), so duplicates are found by user id, not by image. Each user
is kept from ONE copy, chosen by `choose_copies`: a copy where it has a train split, there the one
with the most train images, ties to the first copy in sorted order. Without this one writer would
be several clients, which breaks per-client (user-level) differential privacy accounting.

Label modes: ``digits`` keeps y < 10 (10 classes), ``merged36`` keeps digits and merges lower-
with upper-case letters (y 36..61 -> y - 26; 36 classes), ``all62`` keeps all 62 classes.
Clients are the writers with at least one training image after label filtering; writers with
only test images stay in the evaluation set, and the counts of both are reported in ``info``.
The JSON is parsed once per source (`read_leaf`: all writers, all labels; the loader caches it)
and each label mode is derived from that (`select_labels`), so switching modes costs no parse.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fedgs.data.errors import DataError
from fedgs.data.federated import PIXELS, ClientArrays
from fedgs.data.files import read_bytes
from fedgs.data.names import LABEL_CLASSES, LABEL_MODES

SPLITS = ("train", "test")
NUM_CLASSES = LABEL_CLASSES
NUM_LEAF_LABELS = 62

UserData = tuple[np.ndarray, np.ndarray]  # (n, 784) uint8 MNIST-polarity pixels, (n,) int64


@dataclass(frozen=True)
class Shard:
    """One JSON file, with the LEAF output ("copy") and split it belongs to."""

    path: Path
    copy: str  # the folder holding train/ and test/, relative to the search root
    split: str  # "train" or "test"


def _is_shard(path: Path) -> bool:
    return path.is_file() and (path.name.endswith(".json") or path.name.endswith(".json.gz"))


def _copies(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) that have a ``train/`` or ``test/`` child.

    The walk stops at such a folder: its other subfolders (LEAF's raw_data with ~800k PNGs,
    intermediate files) are not searched.
    """
    found, pending = [], [root]
    while pending:
        folder = pending.pop()
        children = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if any(child.name in SPLITS for child in children):
            found.append(folder)
        else:
            pending.extend(children)
    return found


def find_shards(root: str | Path) -> list[Shard]:
    """All shards under ``root``, sorted by (copy, split, file name).

    ``root`` is one LEAF output, a folder of several, or a single ``train/``/``test/`` folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: FEMNIST data directory does not exist")
    if root.name in SPLITS:
        base, split_dirs = root.parent, [root]
    else:
        base = root
        split_dirs = [c / s for c in _copies(root) for s in SPLITS if (c / s).is_dir()]
    shards = [
        Shard(path, os.path.relpath(folder.parent, base), folder.name)
        for folder in split_dirs
        for path in folder.iterdir()
        if _is_shard(path)
    ]
    if not shards:
        raise DataError(
            f"{root}: no LEAF shards (*.json or *.json.gz inside a train/ or test/ folder) found"
        )
    return sorted(shards, key=lambda s: (s.copy, s.split, s.path.name))


class _FloatMemo(dict[str, float]):
    """``json`` float parser that parses each distinct literal once.

    LEAF pixels take only 256 distinct values (k/255), so this makes ``json.loads`` about 3x
    faster than parsing 55 million float literals one by one.
    """

    def __missing__(self, literal: str) -> float:
        value = self[literal] = float(literal)
        return value


def _pixels(x: Any, where: str) -> np.ndarray:
    """LEAF x rows -> (n, 784) uint8 in MNIST polarity; DataError names the bad image."""
    try:
        values = np.asarray(x, dtype=np.float64)
    except (ValueError, TypeError):
        values = None
    if values is None or values.ndim != 2 or values.shape[1] != PIXELS:
        if not isinstance(x, list):
            raise DataError(f"{where}: 'x' must be a list of images")
        for i, row in enumerate(x):
            if not isinstance(row, list):
                raise DataError(f"{where}: image {i} is not a list of {PIXELS} numbers")
            if len(row) != PIXELS:
                raise DataError(f"{where}: image {i} has {len(row)} values, expected {PIXELS}")
        raise DataError(f"{where}: 'x' holds values that are not numbers")
    if not np.all((values >= 0.0) & (values <= 1.0)):
        raise DataError(f"{where}: pixel values must lie in [0, 1] (LEAF scale)")
    return (255.0 - np.rint(values * 255.0)).astype(np.uint8)


def _labels(y: Any, where: str) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DataError(f"{where}: 'y' must be a list of integer labels")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_LEAF_LABELS):
        raise DataError(f"{where}: labels must lie in 0..{NUM_LEAF_LABELS - 1}")
    return labels.astype(np.int64)


def read_shard(path: Path) -> dict[str, UserData]:
    """One validated LEAF shard: user id -> (pixels, labels)."""
    try:
        obj = json.loads(read_bytes(path), parse_float=_FloatMemo().__getitem__)
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise DataError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(obj, dict):
        raise DataError(f"{path}: not a LEAF shard (top level is not a JSON object)")
    missing = [key for key in ("users", "num_samples", "user_data") if key not in obj]
    if missing:
        raise DataError(f"{path}: not a LEAF shard (missing key(s) {', '.join(missing)})")
    users, num_samples, user_data = obj["users"], obj["num_samples"], obj["user_data"]
    if not (isinstance(users, list) and isinstance(num_samples, list)):
        raise DataError(f"{path}: 'users' and 'num_samples' must be lists")
    if not isinstance(user_data, dict):
        raise DataError(f"{path}: 'user_data' must be an object keyed by user id")
    if len(users) != len(num_samples):
        raise DataError(f"{path}: {len(users)} users but {len(num_samples)} num_samples entries")
    if not all(isinstance(user, str) for user in users):
        raise DataError(f"{path}: user ids in 'users' must be strings")
    if len(set(users)) != len(users):
        raise DataError(f"{path}: a user id is listed twice in 'users'")
    if set(user_data) != set(users):
        raise DataError(f"{path}: 'users' and the keys of 'user_data' differ")
    out: dict[str, UserData] = {}
    for user, count in zip(users, num_samples, strict=True):
        where = f"{path}: user {user!r}"
        record = user_data[user]
        if not isinstance(record, dict) or "x" not in record or "y" not in record:
            raise DataError(f"{where}: entry must have 'x' and 'y'")
        x, y = record["x"], record["y"]
        if not (isinstance(x, list) and isinstance(y, list)):
            raise DataError(f"{where}: 'x' and 'y' must be lists")
        if len(x) != len(y):
            raise DataError(f"{where}: {len(x)} images in 'x' but {len(y)} labels in 'y'")
        if count != len(y):
            raise DataError(f"{where}: num_samples says {count} but it has {len(y)} samples")
        if not y:
            raise DataError(f"{where}: empty client (zero samples)")
        out[user] = (_pixels(x, where), _labels(y, where))
    return out


def choose_copies(parts: dict[tuple[str, str], dict[str, UserData]]) -> dict[str, str]:
    """User id -> the one copy to take that writer from.

    A copy with the user's train split wins; among those, the one with the most train images
    (some copies hold a truncated writer: LEAF's sampler can cut the last writer it draws, e.g.
    ``f2346_88`` has 152 train images in one copy and 7 in another); ties go to the first copy
    in sorted order. Writers without any train split are taken the same way from test splits.
    """
    copies = sorted({copy for copy, _ in parts})
    users = sorted({user for part in parts.values() for user in part})
    chosen = {}
    for user in users:
        for split in SPLITS:
            held = [
                (c, parts[(c, split)][user]) for c in copies if user in parts.get((c, split), {})
            ]
            if held:
                chosen[user] = max(held, key=lambda item: len(item[1][1]))[0]  # first max wins
                break
    return chosen


def _stack(users: list[str], data: dict[str, UserData | None]) -> UserData:
    present = [d for d in (data[u] for u in users) if d is not None]
    if not present:
        return np.zeros((0, PIXELS), np.uint8), np.zeros(0, np.int64)
    return np.concatenate([d[0] for d in present]), np.concatenate([d[1] for d in present])


def read_leaf(shards: list[Shard]) -> tuple[ClientArrays, dict[str, Any]]:
    """Read and deduplicate ``shards`` (from `find_shards`): every writer, all 62 labels.

    One "client" per distinct writer, sorted by user id, with its train and test rows from the
    copy `choose_copies` picked; writers without a train split have zero train rows here.
    `select_labels` turns this into the clients of a label mode. Also returns a report.
    """
    # (copy, split) -> user -> data; a user twice in one copy and split keeps its first shard
    parts: dict[tuple[str, str], dict[str, UserData]] = {}
    for shard in tqdm(shards, desc="Reading LEAF shards", unit="shard"):
        part = parts.setdefault((shard.copy, shard.split), {})
        for user, data in read_shard(shard.path).items():
            part.setdefault(user, data)

    chosen = choose_copies(parts)
    users = sorted(chosen)
    train = {u: parts.get((chosen[u], "train"), {}).get(u) for u in users}
    test = {u: parts.get((chosen[u], "test"), {}).get(u) for u in users}
    train_pixels, train_labels = _stack(users, train)
    test_pixels, test_labels = _stack(users, test)
    arrays = ClientArrays(
        client_ids=users,
        train_pixels=train_pixels,
        train_labels=train_labels,
        train_counts=np.array([0 if train[u] is None else len(train[u][1]) for u in users]),
        test_pixels=test_pixels,
        test_labels=test_labels,
        test_counts=np.array([0 if test[u] is None else len(test[u][1]) for u in users]),
    )
    copies = {copy for copy, _ in parts}
    appearances = sum(
        len({u for (c, _), p in parts.items() if c == copy for u in p}) for copy in copies
    )
    info = {
        "copies": len(copies),
        "shards": len(shards),
        "duplicate_writer_copies_skipped": appearances - len(chosen),
    }
    return arrays, info


def relabel(labels: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(keep mask, new labels) of LEAF labels 0..61 in a label mode."""
    if mode == "digits":
        return labels < 10, labels
    if mode == "merged36":
        return np.ones(labels.shape, bool), np.where(labels >= 36, labels - 26, labels)
    if mode == "all62":
        return np.ones(labels.shape, bool), labels
    raise DataError(f"unknown label mode {mode!r}; choose one of {', '.join(LABEL_MODES)}")


def pooled_rows(writers: ClientArrays, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """All rows (train, then test) of ``writers`` in label mode ``mode``, as one pool."""
    assert writers.test_counts is not None
    pixels = np.concatenate([writers.train_pixels, writers.test_pixels])
    keep, labels = relabel(np.concatenate([writers.train_labels, writers.test_labels]), mode)
    return pixels[keep], labels[keep]


def select_labels(writers: ClientArrays, mode: str) -> tuple[ClientArrays, dict[str, Any]]:
    """The clients of label mode ``mode`` from `read_leaf`'s writers.

    Clients are the writers with at least one train image left; the test rows of the others
    (test-only writers, writers without images of these classes) follow the clients' test rows,
    so they stay in the evaluation set. Also returns the writer counts for the report.
    """
    assert writers.test_counts is not None
    num_writers = len(writers.client_ids)

    def kept(pixels: np.ndarray, labels: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
        keep, new = relabel(labels, mode)
        owner = np.repeat(np.arange(num_writers), counts)
        return pixels[keep], new[keep], owner[keep]

    train_pixels, train_labels, train_owner = kept(
        writers.train_pixels, writers.train_labels, writers.train_counts
    )
    test_pixels, test_labels, test_owner = kept(
        writers.test_pixels, writers.test_labels, writers.test_counts
    )
    train_counts = np.bincount(train_owner, minlength=num_writers)
    is_client = train_counts > 0
    test_order = np.argsort(~is_client[test_owner], kind="stable")  # clients' rows first
    with_train = int(np.count_nonzero(writers.train_counts))
    arrays = ClientArrays(
        client_ids=[w for w, keep in zip(writers.client_ids, is_client, strict=True) if keep],
        train_pixels=train_pixels,  # rows of writers without train images are all gone
        train_labels=train_labels,
        train_counts=train_counts[is_client],
        test_pixels=test_pixels[test_order],
        test_labels=test_labels[test_order],
        test_counts=np.bincount(test_owner, minlength=num_writers)[is_client],
    )
    info = {
        "writers": num_writers,
        "writers_with_train_split": with_train,
        "writers_test_only": num_writers - with_train,
        "writers_dropped_by_labels": with_train - int(is_client.sum()),
        "test_images_of_non_clients": int(np.count_nonzero(~is_client[test_owner])),
    }
    return arrays, info
