"""Classifier names of the downstream-utility table, importable without scikit-learn or torch.

The order is the paper's Table A1 (GS-WGAN, appendix C.3): the two torch networks, then the
scikit-learn classifiers alphabetically; XGBoost is added when the package is installed.
"""

from __future__ import annotations

TORCH_CLASSIFIERS: tuple[str, ...] = ("mlp", "cnn")
SKLEARN_CLASSIFIERS: tuple[str, ...] = (
    "adaboost",
    "bagging",
    "bernoulli-nb",
    "decision-tree",
    "gaussian-nb",
    "gradient-boosting",
    "lda",
    "linear-svc",
    "logistic-regression",
    "random-forest",
)
OPTIONAL_CLASSIFIERS: tuple[str, ...] = ("xgboost",)
CLASSIFIER_NAMES: tuple[str, ...] = (
    *TORCH_CLASSIFIERS,
    *SKLEARN_CLASSIFIERS,
    *OPTIONAL_CLASSIFIERS,
)
