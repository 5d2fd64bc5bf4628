"""Evaluation of finished runs: downstream utility, Inception FID, plots and HTML reports.

``fedgs evaluate RUN_DIR`` and ``fedgs report RUN_DIR...`` are built from these modules. Names
are loaded on first use: most of them import torch, scikit-learn or matplotlib, which the
``fedgs`` parser must not pay for.
"""

from __future__ import annotations

from fedgs.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "CLASSIFIER_NAMES": "names",
    "RunError": "run_files",
    "RunFiles": "run_files",
    "LoadedGenerator": "generator_loader",
    "load_generator": "generator_loader",
    "UtilityRow": "utility",
    "utility_table": "utility",
    "EvaluationOptions": "evaluate",
    "evaluate_run": "evaluate",
    "evaluate_runs": "evaluate",
    "write_report": "report",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
