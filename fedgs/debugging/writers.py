"""Which writers do what: held out for the classifier, or in the federated population.

The classifier must be trained on writers the generators never see, so the scenario cuts the
loaded clients once, with its seed, and builds every other dataset from row ranges of the same
stored arrays (uint8, as `save_federated` writes them).
"""

from __future__ import annotations

import numpy as np

from fedgs.data.federated import ClientArrays
from fedgs.debugging.bug import HOLDOUT_STREAM, invert_pixels


def split_holdout(num_writers: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out, population) writer indices, each sorted; at least one held out, two left."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction}")
    count = max(1, int(np.floor(fraction * num_writers + 0.5)))
    if num_writers - count < 2:
        raise ValueError(
            f"{num_writers} writers are too few: holding out {count} leaves fewer than two "
            "to score and split into groups"
        )
    order = np.random.default_rng((seed, HOLDOUT_STREAM)).permutation(num_writers)
    return np.sort(order[:count]), np.sort(order[count:])


def _rows(counts: np.ndarray, writers: np.ndarray) -> list[np.ndarray]:
    """Row indices of each listed writer in arrays grouped by writer with these counts."""
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return [np.arange(offsets[k], offsets[k + 1]) for k in writers.tolist()]


def _take(
    pixels: np.ndarray, rows: list[np.ndarray], invert: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pixels of the listed row groups (inverted where ``invert``), and the concatenated rows."""
    order = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    taken = pixels[order]
    flip = np.repeat(invert, [len(r) for r in rows]) if rows else np.zeros(0, bool)
    taken[flip] = invert_pixels(taken[flip])
    return taken, order


def select_writers(
    arrays: ClientArrays, writers: np.ndarray, invert: np.ndarray | None = None
) -> ClientArrays:
    """The listed writers (in that order) as their own dataset; all images of the writers
    flagged in ``invert`` are inverted, train and own test alike. Test rows of no writer are
    dropped; a global test set (no per-writer split) is kept as it is, clean."""
    writers = np.asarray(writers, dtype=np.int64)
    invert = np.zeros(len(writers), bool) if invert is None else np.asarray(invert, bool)
    if invert.shape != writers.shape:
        raise ValueError("invert needs one flag per selected writer")
    train_pixels, train_order = _take(
        arrays.train_pixels, _rows(arrays.train_counts, writers), invert
    )
    if arrays.test_counts is None:
        test_pixels, test_labels, test_counts = arrays.test_pixels, arrays.test_labels, None
    else:
        test_pixels, test_order = _take(
            arrays.test_pixels, _rows(arrays.test_counts, writers), invert
        )
        test_labels, test_counts = arrays.test_labels[test_order], arrays.test_counts[writers]
    return ClientArrays(
        client_ids=[arrays.client_ids[k] for k in writers.tolist()],
        train_pixels=train_pixels,
        train_labels=arrays.train_labels[train_order],
        train_counts=arrays.train_counts[writers],
        test_pixels=test_pixels,
        test_labels=test_labels,
        test_counts=test_counts,
    )


def holdout_images(arrays: ClientArrays, writers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clean pixels and labels for the classifier: the held-out writers' train and own test
    rows, plus test rows that belong to no client (FEMNIST writers without a train split, who
    are outside the federated population anyway)."""
    held = select_writers(arrays, writers)
    parts = [(held.train_pixels, held.train_labels)]
    if arrays.test_counts is not None:
        parts.append((held.test_pixels, held.test_labels))
        owned = int(arrays.test_counts.sum())
        parts.append((arrays.test_pixels[owned:], arrays.test_labels[owned:]))
    return np.concatenate([p for p, _ in parts]), np.concatenate([y for _, y in parts])
