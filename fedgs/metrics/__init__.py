"""Evaluation basics: a domain classifier, IS, domain-classifier FID, label agreement, grids.

Names are loaded on first use: the grids import torchvision, which code that only scores (or
only imports `fedgs.metrics.evaluator`) should not pay for.
"""

from __future__ import annotations

from fedgs.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "DomainClassifier": "classifier",
    "load_or_train_classifier": "classifier",
    "save_class_grid": "grid",
    "GeneratorScores": "scores",
    "frechet_distance": "scores",
    "has_ink": "scores",
    "inception_score": "scores",
    "label_agreement": "scores",
    "label_hits": "scores",
    "score_generator": "scores",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
