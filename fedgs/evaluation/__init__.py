"""Evaluation of finished runs: downstream utility, Inception FID, plots and HTML reports.

``fedgs evaluate RUN_DIR`` and ``fedgs report RUN_DIR...`` are built from these modules. Names
are loaded on first use: most of them import torch, scikit-learn or matplotlib, which the
``fedgs`` parser must not pay for.
"""

from __future__ import annotations

from fedgs.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "names": "CLASSIFIER_NAMES",
        "run_files": "RunError RunFiles",
        "generator_loader": "LoadedGenerator load_generator",
        "utility": "UtilityRow utility_table",
        "evaluate": "EvaluationOptions evaluate_run evaluate_runs",
        "report": "write_report",
    },
)
