"""Scores a generator against a dataset: the glue every runner uses at its checkpoints.

The yardstick never sees the clients' data: the domain classifier is trained on one half of the
dataset's evaluation images and the real reference (FID, precision/recall, the classifier's test
accuracy) is the other half. For FEMNIST the halves are two disjoint sets of evaluation writers
(`fedgs.data.writer_split`), none of them a client; elsewhere a fixed seeded half of the
held-out test set (MNIST's t10k, the embedded digits' held-out 10%).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedgs.metrics.classifier import DomainClassifier, accuracy, load_or_train_classifier
from fedgs.metrics.scores import GeneratorScores, score_generator

if TYPE_CHECKING:
    from fedgs.data import FederatedDataset

Arrays = tuple[torch.Tensor, torch.Tensor]
HALF_SPLIT_SEED = 20_240_617  # fixed: the halves must not depend on a run's seed
CLASSIFIER_EPOCHS = 10  # the classifier half is small (FEMNIST digits: ~4,500 images)


def evaluation_halves(
    dataset: FederatedDataset, test: Arrays | None = None
) -> tuple[Arrays, Arrays]:
    """(classifier half, reference half) of the dataset's evaluation images (``test``: its
    `test_arrays`, when already read; FEMNIST's halves are then views of them, not copies)."""
    images, labels = dataset.test_arrays() if test is None else test
    split = dataset.info.get("writer_split")
    if split:  # FEMNIST: stored classifier writers first
        cut = int(split["classifier_rows"])
        return (images[:cut], labels[:cut]), (images[cut:], labels[cut:])
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(HALF_SPLIT_SEED))
    first, second = order[: len(order) // 2], order[len(order) // 2 :]
    return (images[first], labels[first]), (images[second], labels[second])


def split_record(dataset: FederatedDataset) -> dict[str, Any]:
    """What a run and a report print about where the real images of every score came from."""
    split = dataset.info.get("writer_split")
    if split:
        return {
            "evaluation_images": "FEMNIST evaluation writers (never clients)",
            "rule": split["rule"],
            "training_writers_total": split["training_writers"],
            "clients": dataset.num_clients,
            "evaluation_writers": split["evaluation_writers"],
            "classifier_writers": len(split["classifier_writer_ids"]),
            "reference_writers": len(split["reference_writer_ids"]),
            "classifier_images": split["classifier_rows"],
            "reference_images": split["reference_rows"],
        }
    source = "official t10k test set" if dataset.name == "mnist" else "held-out test split"
    return {
        "evaluation_images": f"{dataset.name} {source} (never a client's training data)",
        "rule": f"classifier / reference halves: seeded permutation ({HALF_SPLIT_SEED})",
        "clients": dataset.num_clients,
        "evaluation_total_images": dataset.num_test_images,
    }


class GeneratorEvaluator:
    """Holds the domain classifier and a fixed real reference set (evaluation images only)."""

    def __init__(
        self,
        classifier: DomainClassifier,
        real_images: torch.Tensor,
        num_classes: int,
        num_samples: int = 2000,
        seed: int = 0,
        classifier_test_accuracy: float | None = None,
        split: dict[str, Any] | None = None,
    ) -> None:
        self.classifier = classifier
        self.classifier_test_accuracy = classifier_test_accuracy
        self.real_images = real_images
        self.num_classes = num_classes
        self.split = split or {}
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(num_classes, (num_samples,), generator=generator)

    @classmethod
    def for_dataset(
        cls, dataset: FederatedDataset, num_samples: int = 2000, cache_dir: Path | None = None
    ) -> GeneratorEvaluator:
        """The evaluator of a federated dataset (classifier cached by the source's data)."""
        classifier = evaluation_classifier(dataset, cache_dir)
        _, reference = evaluation_halves(dataset)
        return cls(
            classifier,
            reference[0][:num_samples],
            dataset.num_classes,
            num_samples,
            classifier_test_accuracy=accuracy(classifier, *reference),
            split=split_record(dataset),
        )

    def record(self) -> dict[str, Any]:
        """The instrument's description, written next to a run's scores."""
        return {
            "classifier_test_accuracy": self.classifier_test_accuracy,
            "writer_split": self.split,
        }

    def score(self, sample: Callable[[torch.Tensor], torch.Tensor]) -> GeneratorScores:
        """Scores of ``sample(labels) -> images`` on the evaluator's fixed label set."""
        return score_generator(self.classifier, sample(self.labels), self.labels, self.real_images)


def evaluation_classifier(
    dataset: FederatedDataset, cache_dir: Path | None = None, test: Arrays | None = None
) -> DomainClassifier:
    """The domain classifier of the evaluation images' classifier half, cached on disk
    (``test``: the dataset's `test_arrays`, when already read)."""
    key = hashlib.sha256(f"{dataset.source_fingerprint}|evaluation-half".encode()).hexdigest()
    classifier_half, _ = evaluation_halves(dataset, test)
    return load_or_train_classifier(
        key, *classifier_half, dataset.num_classes, cache_dir=cache_dir, epochs=CLASSIFIER_EPOCHS
    )
