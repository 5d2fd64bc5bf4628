"""Evaluation basics: a domain classifier, IS, domain-classifier FID, label agreement, grids."""

from fedgs.metrics.classifier import DomainClassifier, load_or_train_classifier
from fedgs.metrics.grid import save_class_grid
from fedgs.metrics.scores import (
    GeneratorScores,
    frechet_distance,
    inception_score,
    label_agreement,
    score_generator,
)

__all__ = [
    "DomainClassifier",
    "GeneratorScores",
    "frechet_distance",
    "inception_score",
    "label_agreement",
    "load_or_train_classifier",
    "save_class_grid",
    "score_generator",
]
