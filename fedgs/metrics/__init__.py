"""Evaluation basics: a domain classifier, IS, domain-classifier FID, label agreement, grids.

Names are loaded on first use: the grids import torchvision, which code that only scores (or
only imports `fedgs.metrics.evaluator`) should not pay for.
"""

from __future__ import annotations

from fedgs.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "classifier": "DomainClassifier load_or_train_classifier",
        "grid": "save_class_grid",
        "scores": (
            "GeneratorScores frechet_distance has_ink inception_score label_agreement label_hits "
            "score_generator"
        ),
    },
)
