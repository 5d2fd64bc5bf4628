"""Scores a generator against a dataset: the glue every runner uses at its checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from fedgs.metrics.classifier import DomainClassifier, accuracy, load_or_train_classifier
from fedgs.metrics.scores import GeneratorScores, score_generator

if TYPE_CHECKING:
    from fedgs.data import FederatedDataset


class GeneratorEvaluator:
    """Holds the dataset's domain classifier and a fixed real reference set for FID."""

    def __init__(
        self,
        classifier: DomainClassifier,
        real_images: torch.Tensor,
        num_classes: int,
        num_samples: int = 2000,
        seed: int = 0,
        classifier_test_accuracy: float | None = None,
    ) -> None:
        self.classifier = classifier
        self.classifier_test_accuracy = classifier_test_accuracy
        self.real_images = real_images
        self.num_classes = num_classes
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(num_classes, (num_samples,), generator=generator)

    @classmethod
    def for_dataset(
        cls, dataset: FederatedDataset, num_samples: int = 2000, cache_dir: Path | None = None
    ) -> GeneratorEvaluator:
        """The evaluator of a federated dataset: the classifier of its clients' training images
        (cached by the dataset's fingerprint), real test images as the FID reference."""
        classifier = load_or_train_classifier(
            dataset.fingerprint, *dataset.train_arrays(), dataset.num_classes, cache_dir=cache_dir
        )
        test = dataset.test_arrays()
        return cls(
            classifier,
            test[0][:num_samples],
            dataset.num_classes,
            num_samples,
            classifier_test_accuracy=accuracy(classifier, *test),
        )

    def score(self, sample: Callable[[torch.Tensor], torch.Tensor]) -> GeneratorScores:
        """Scores of ``sample(labels) -> images`` on the evaluator's fixed label set."""
        return score_generator(self.classifier, sample(self.labels), self.labels, self.real_images)
