"""Evaluation basics: a domain classifier, IS, domain-classifier FID, label agreement, grids.

Names are loaded on first use: the grids import torchvision, which code that only scores (or
only imports `fedgs.metrics.evaluator`) should not pay for.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "DomainClassifier": "classifier",
    "load_or_train_classifier": "classifier",
    "save_class_grid": "grid",
    "GeneratorScores": "scores",
    "frechet_distance": "scores",
    "inception_score": "scores",
    "label_agreement": "scores",
    "score_generator": "scores",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
