"""The fixed split of FEMNIST writers into training writers and evaluation writers.

Why: every quality figure compares a generator's samples with real images. If those real images
(or the classifier that reads them) came from the writers the generator trained on, a lookup
table of training images would score as well as a good generator. So a fixed share of writers is
held out for evaluation and never becomes a client, whatever the run's options (``--clients N``
takes the first N *training* writers).

Rule: a writer is an evaluation writer when the first 8 bytes of
``sha256(SALT + writer_id)``, read as a big-endian integer, are below ``EVALUATION_SHARE * 2**64``.
It depends on the writer id only, so it is the same on every machine, for every label mode and
every run option, and a writer keeps its role when more LEAF shards are added. All images of an
evaluation writer (its LEAF train and test rows) form the evaluation set; training writers'
LEAF test rows are not used (they are the training writers' images, so they could only flatter).
Evaluation writers are halved the same way (`is_classifier_writer`): one half trains the domain
classifier, the other half is the real reference its features are compared with.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fedgs.data.federated import ClientArrays

SALT = "fedgs-writer-split-v1:"
EVALUATION_SHARE = 0.2
RULE = (
    f"evaluation writer iff int(sha256('{SALT}' + writer_id)[:8 bytes]) < "
    f"{EVALUATION_SHARE} * 2**64"
)


def _position(writer_id: str) -> float:
    """The writer's fixed place in [0, 1): the first 8 bytes of its salted hash."""
    digest = hashlib.sha256((SALT + writer_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_evaluation_writer(writer_id: str) -> bool:
    """Whether ``writer_id`` is held out for evaluation (see the module docstring)."""
    return _position(writer_id) < EVALUATION_SHARE


def is_classifier_writer(writer_id: str) -> bool:
    """Among evaluation writers, the half whose images train the domain classifier; the other
    half's images are the feature reference and the classifier's test set."""
    return _position(writer_id) < EVALUATION_SHARE / 2


def _writers(arrays: ClientArrays, keep: np.ndarray) -> ClientArrays:
    """The writers flagged in ``keep``, rows and counts alike (per-writer test split kept)."""
    assert arrays.test_counts is not None
    train_rows = np.repeat(keep, arrays.train_counts)
    test_rows = np.repeat(keep, arrays.test_counts)
    return ClientArrays(
        client_ids=[w for w, k in zip(arrays.client_ids, keep, strict=True) if k],
        train_pixels=arrays.train_pixels[train_rows],
        train_labels=arrays.train_labels[train_rows],
        train_counts=arrays.train_counts[keep],
        test_pixels=arrays.test_pixels[test_rows],
        test_labels=arrays.test_labels[test_rows],
        test_counts=arrays.test_counts[keep],
    )


def split_writers(
    writers: ClientArrays,
) -> tuple[ClientArrays, ClientArrays, ClientArrays, dict[str, Any]]:
    """(training writers, classifier writers, reference writers, record for ``info``).

    ``writers`` has one entry per writer with its own train and test rows (`leaf.read_leaf`);
    the last two are the two halves of the evaluation writers.
    """
    held, classifier = roles(writers.client_ids)
    training = _writers(writers, ~held)
    classifier_writers = _writers(writers, classifier)
    reference_writers = _writers(writers, held & ~classifier)
    return training, classifier_writers, reference_writers, record(writers.client_ids)


def roles(writer_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(evaluation writer, classifier writer) flags of ``writer_ids``, as boolean arrays."""
    held = np.array([is_evaluation_writer(w) for w in writer_ids], dtype=bool)
    classifier = np.array([is_classifier_writer(w) for w in writer_ids], dtype=bool)
    return held, classifier


def record(writer_ids: list[str]) -> dict[str, Any]:
    """What a dataset's ``info`` records about the split of ``writer_ids`` (every loader's)."""
    held, classifier = roles(writer_ids)
    return {
        "rule": RULE,
        "evaluation_share": EVALUATION_SHARE,
        "training_writers": int((~held).sum()),
        "evaluation_writers": int(held.sum()),
        "classifier_writer_ids": [w for w, c in zip(writer_ids, classifier, strict=True) if c],
        "reference_writer_ids": [
            w for w, h, c in zip(writer_ids, held, classifier, strict=True) if h and not c
        ],
    }
