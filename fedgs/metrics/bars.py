"""The quality bars a generator must pass, and which figures beat a control.

Only figures a lookup table of real images cannot reach are bars: downstream accuracy (a
classifier trained on 5 images per class does not generalise to new writers) and recall and
coverage (a few images per class cover little of the real variety). Label agreement, precision,
density and FID are reported but are no bar: a lookup table of real images does as well as any
generator on them. The memorisation share is a privacy check, reported beside the bars.
"""

from __future__ import annotations

from typing import Any

# figure -> (direction, bar); "max": higher is better
BARS: dict[str, tuple[str, float]] = {
    "cnn_calibrated": ("max", 0.8),
    "mlp_calibrated": ("max", 0.8),
    "recall": ("max", 0.5),
    "coverage": ("max", 0.5),
}
# every figure compared with the controls, with its direction
DIRECTIONS: dict[str, str] = {
    "cnn_accuracy": "max",
    "cnn_calibrated": "max",
    "mlp_accuracy": "max",
    "mlp_calibrated": "max",
    "precision": "max",
    "recall": "max",
    "density": "max",
    "coverage": "max",
    "fid_domain": "min",
    "fid_per_class_median": "min",
    "intra_class_diversity": "max",
    "label_agreement": "max",
    "near_copy_share": "min",
}


def better(figure: str, value: float, than: float) -> bool:
    """Whether ``value`` is strictly better than ``than`` for ``figure``."""
    return value > than if DIRECTIONS[figure] == "max" else value < than


def passes(row: dict[str, Any]) -> dict[str, bool]:
    """Figure -> whether ``row`` meets that quality bar."""
    return {
        figure: (row[figure] >= bar if direction == "max" else row[figure] <= bar)
        for figure, (direction, bar) in BARS.items()
    }


def beats(row: dict[str, Any], control: dict[str, Any]) -> dict[str, bool]:
    """Figure -> whether ``row`` beats ``control`` on it (a figure means something only there)."""
    return {f: better(f, row[f], control[f]) for f in DIRECTIONS if f in row and f in control}
