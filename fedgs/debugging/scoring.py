"""Step 3 of the scenario: score writers by a clean classifier's accuracy, split them in groups.

The modeller sees only these accuracies (computed on the device, in a deployment), never the
images or who has the bug; the confusion table against the ground truth says how well the
accuracy split found the buggy writers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedgs.metrics.classifier import DomainClassifier, predict_in_batches

SUSPECTED, UNASSIGNED, NORMAL = "suspected", "unassigned", "normal"
GROUPS = (SUSPECTED, UNASSIGNED, NORMAL)


def writer_accuracies(
    model: DomainClassifier, images: torch.Tensor, labels: torch.Tensor, counts: np.ndarray
) -> np.ndarray:
    """Accuracy on each writer's images (rows grouped by writer, ``counts`` per writer)."""
    if int(np.sum(counts)) != images.shape[0]:
        raise ValueError(f"counts add up to {int(np.sum(counts))}, not {images.shape[0]} images")
    if np.any(np.asarray(counts) <= 0):
        raise ValueError("every writer needs at least one image to be scored")
    probs, _ = predict_in_batches(model, images)
    correct = (probs.argmax(1) == labels).double().numpy()
    owner = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(owner, weights=correct, minlength=len(counts)) / np.asarray(counts)


@dataclass(frozen=True)
class Thresholds:
    """Writers at or below ``suspect_max`` are suspected, at or above ``normal_min`` normal."""

    suspect_max: float
    normal_min: float
    source: str  # how they were chosen, for the report

    def __post_init__(self) -> None:
        if not self.suspect_max < self.normal_min:
            raise ValueError(
                f"the suspected bound ({self.suspect_max:.4f}) must be below the normal bound "
                f"({self.normal_min:.4f}); with quantiles, many tied accuracies can cause this: "
                "widen the gap or give accuracies"
            )


def choose_thresholds(
    accuracies: np.ndarray,
    suspect_quantile: float,
    normal_quantile: float,
    suspect_max: float | None = None,
    normal_min: float | None = None,
) -> Thresholds:
    """Given accuracies win; otherwise each bound is that quantile of the writers' accuracies
    (the papers' 88.2% / 93.9% fit the full dataset, not a smaller population)."""
    if not 0.0 <= suspect_quantile < normal_quantile <= 1.0:
        raise ValueError(
            "quantiles must satisfy 0 <= suspect < normal <= 1, got "
            f"{suspect_quantile} and {normal_quantile}"
        )
    low = float(np.quantile(accuracies, suspect_quantile)) if suspect_max is None else suspect_max
    high = float(np.quantile(accuracies, normal_quantile)) if normal_min is None else normal_min
    source = ", ".join(
        f"{name} {'given' if given is not None else f'= quantile {q:g}'}"
        for name, given, q in (
            ("suspected bound", suspect_max, suspect_quantile),
            ("normal bound", normal_min, normal_quantile),
        )
    )
    return Thresholds(low, high, source)


def assign_groups(accuracies: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """One of `GROUPS` per writer; both real groups must be non-empty to train a GAN on each."""
    groups = np.full(len(accuracies), UNASSIGNED, dtype=object)
    groups[accuracies <= thresholds.suspect_max] = SUSPECTED
    groups[accuracies >= thresholds.normal_min] = NORMAL
    for name in (SUSPECTED, NORMAL):
        if not np.any(groups == name):
            raise ValueError(f"no writer falls in the {name} group with {thresholds}")
    return groups


def confusion(groups: np.ndarray, buggy: np.ndarray) -> dict[str, dict[str, int]]:
    """Group -> {"with bug", "without bug", "total"}: how the split matches the ground truth."""
    table = {}
    for name in GROUPS:
        members = groups == name
        with_bug = int(np.count_nonzero(members & buggy))
        total = int(np.count_nonzero(members))
        table[name] = {"with bug": with_bug, "without bug": total - with_bug, "total": total}
    return table


def confusion_markdown(table: dict[str, dict[str, int]]) -> str:
    """The confusion table as a markdown table, with a total row."""
    columns = ("with bug", "without bug", "total")
    lines = ["| group | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for name, row in table.items():
        lines.append(f"| {name} | " + " | ".join(str(row[c]) for c in columns) + " |")
    totals = [sum(row[c] for row in table.values()) for c in columns]
    lines.append("| all writers | " + " | ".join(map(str, totals)) + " |")
    return "\n".join(lines)


def heldout_threshold(model: DomainClassifier, images: torch.Tensor, labels: torch.Tensor) -> float:
    """The private grouping's accuracy threshold, from the modeller's held-out writers alone:
    midway between the classifier's accuracy on their clean images and on the same images
    inverted. No population writer's data enters it, so it costs no epsilon."""

    def accuracy(x: torch.Tensor) -> float:
        probs, _ = predict_in_batches(model, x)
        return float((probs.argmax(1) == labels).double().mean())

    return (accuracy(images) + accuracy(-images)) / 2.0
