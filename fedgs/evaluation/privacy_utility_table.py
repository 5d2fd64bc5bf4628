"""The privacy-utility table: one row per strategy and threat model, one column per target
epsilon (1, 3, 10, 100), each cell the mean of the seeds with each seed's value; the controls
below as levels.

A figure shows the trend, but results documents quote numbers: this table is what they paste.
Only runs of one strategy under one threat model have comparable epsilons, so only they share a
row; a figure that the five-image lookup table also reaches is marked, since it is not a result.
Functions over points, no run folder read here: ``fedgs report`` reads the runs and calls them.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedgs.evaluation.quality_table import LOOKUP, NOT_BEATING
from fedgs.metrics.bars import better

TARGETS = (1.0, 3.0, 10.0, 100.0)
TOLERANCE = 0.01  # an epsilon of 10.05 was budgeted as 10: accountants round differently
BEYOND = "> 100"
NO_NOISE = "no noise"
ALL_COLUMNS = (*(f"{t:g}" for t in TARGETS), BEYOND, NO_NOISE)
SEEDS = 2  # the seeds planned per cell; a cell with any other count says so
METRICS = (
    ("cnn_accuracy", "CNN accuracy on the evaluation writers"),
    ("coverage", "coverage"),
)
CSV_HEADER = (
    "series",
    "strategy",
    "threat_model",
    "target_epsilon",
    "run",
    "seed",
    "epsilon",
    "cnn",
    "mlp",
    "coverage",
)


@dataclass(frozen=True)
class Point:
    """One evaluated run with the epsilon that places it (inf: trained without noise)."""

    run: str
    series: str
    strategy: str
    threat_model: str
    seed: int | None
    epsilon: float
    cnn_accuracy: float | None
    mlp_accuracy: float | None
    coverage: float | None


@dataclass(frozen=True)
class Level:
    """A control's figures: a reference level in every column (a control has no epsilon)."""

    name: str
    cnn_accuracy: float | None
    mlp_accuracy: float | None
    coverage: float | None


def column(epsilon: float) -> str:
    """The smallest target the epsilon does not exceed by more than TOLERANCE; BEYOND above the
    last, NO_NOISE for a run without noise (it must not be averaged with a private one)."""
    if math.isinf(epsilon):
        return NO_NOISE
    for target in TARGETS:
        if epsilon <= target * (1 + TOLERANCE):
            return f"{target:g}"
    return BEYOND


def columns(points: Sequence[Point]) -> list[str]:
    """Every target, then BEYOND and NO_NOISE only when a run sits there."""
    used = {column(p.epsilon) for p in points}
    return [c for c in ALL_COLUMNS if c in used or c not in (BEYOND, NO_NOISE)]


def header(points: Sequence[Point]) -> list[str]:
    return ["strategy (threat model)", *(_heading(c) for c in columns(points))]


def _heading(key: str) -> str:
    return key if key == NO_NOISE else f"ε {key}"


def _cell_points(points: Sequence[Point], series: str, key: str, metric: str) -> list[Point]:
    """The runs of one cell that have the figure, in seed order (runs without a seed last)."""
    chosen = [
        p
        for p in points
        if p.series == series and column(p.epsilon) == key and getattr(p, metric) is not None
    ]
    return sorted(chosen, key=_by_seed)


def _by_seed(point: Point) -> tuple[bool, int, str]:
    return point.seed is None, point.seed or 0, point.run


def cell(values: Sequence[float], lookup: float | None, metric: str) -> str:
    """``mean (seed, seed)``: the mean marked when it does not beat ``lookup``, the runs
    counted when they are not SEEDS; empty when no run has the figure."""
    if not values:
        return ""
    mean = sum(values) / len(values)
    mark = NOT_BEATING if lookup is not None and not better(metric, mean, lookup) else ""
    detail = [", ".join(f"{v:.3f}" for v in values)] if len(values) > 1 else []
    if len(values) != SEEDS:
        detail.append(f"n={len(values)}")
    return f"{mean:.3f}{mark} ({'; '.join(detail)})"


def rows(points: Sequence[Point], levels: Sequence[Level], metric: str) -> list[list[str]]:
    """One row per series (sorted, as the figure's legend), then one per control in the
    evaluation's order with its level in every column, so a column reads against it."""
    lookup = next((getattr(c, metric) for c in levels if c.name == LOOKUP), None)
    keys = columns(points)
    out = []
    for series in sorted({p.series for p in points}):
        values = (
            [getattr(p, metric) for p in _cell_points(points, series, k, metric)] for k in keys
        )
        out.append([series, *(cell(v, lookup, metric) for v in values)])
    for level in levels:
        value = getattr(level, metric)
        out.append([f"{level.name} (control)", *(_level(value) for _ in keys)])
    return out


def _level(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def shown_metrics(points: Sequence[Point]) -> list[tuple[str, str]]:
    """The CNN table always; coverage only when some evaluation measured it."""
    return [
        (key, title)
        for key, title in METRICS
        if key == "cnn_accuracy" or any(getattr(p, key) is not None for p in points)
    ]


def notes(points: Sequence[Point], left_out: Sequence[str]) -> list[str]:
    """The runs not in the table (``left_out``, said by the caller), then every cell whose runs
    share a seed: those are different settings, not seeds of one, and their mean mixes them."""
    out = list(left_out)
    groups: dict[tuple[str, str, int], list[str]] = {}
    for p in points:
        if p.seed is not None:
            groups.setdefault((p.series, column(p.epsilon), p.seed), []).append(p.run)
    for (series, key, seed), runs in groups.items():
        if len(runs) > 1:
            out.append(
                f"{series} at {_heading(key)}: {', '.join(runs)} share seed {seed}, so they are "
                "different settings and the cell's mean mixes them."
            )
    return out


def legend(levels: Sequence[Level]) -> str:
    """What a cell, a column and a mark mean."""
    text = (
        "Each cell: the mean over the runs in it, then each run's value in seed order; n = the "
        f"number of runs when it is not {SEEDS}. A run sits in the column of the smallest target "
        f"epsilon it does not exceed by more than {TOLERANCE:.0%} (its own threat model's "
        f"epsilon); '{BEYOND}': above the last target; '{NO_NOISE}': trained without noise. "
    )
    if any(c.name == LOOKUP for c in levels):
        return text + (
            f"{NOT_BEATING} = the mean does not beat the {LOOKUP} control (a five-image-per-class "
            "lookup table reaches it too, so it is not a result)."
        )
    return text + f"No {LOOKUP} control in the evaluations: nothing is marked."


def markdown(points: Sequence[Point], levels: Sequence[Level], left_out: Sequence[str]) -> str:
    """The tables (CNN accuracy, then coverage when measured), the legend and the notes, ready
    to paste into a results document."""
    parts = []
    for metric, title in shown_metrics(points):
        head = header(points)
        lines = [
            f"**{title}**",
            "",
            "| " + " | ".join(head) + " |",
            "| --- |" + " ---: |" * (len(head) - 1),
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows(points, levels, metric)]
        parts.append("\n".join(lines))
    parts.append(legend(levels))
    if listed := notes(points, left_out):
        parts.append("\n".join(f"- {n}" for n in listed))
    return "\n\n".join(parts) + "\n"


def csv_rows(points: Sequence[Point]) -> list[list[object]]:
    """Long form, one line per run (series, then target, then seed): what the cells average."""
    ordered = sorted(
        points, key=lambda p: (p.series, ALL_COLUMNS.index(column(p.epsilon)), _by_seed(p))
    )
    return [
        [
            p.series,
            p.strategy,
            p.threat_model,
            column(p.epsilon),
            p.run,
            "" if p.seed is None else p.seed,
            p.epsilon,
            *("" if v is None else v for v in (p.cnn_accuracy, p.mlp_accuracy, p.coverage)),
        ]
        for p in ordered
    ]


def write(
    points: Sequence[Point], levels: Sequence[Level], left_out: Sequence[str], stem: Path
) -> tuple[Path, Path]:
    """``stem``.md (the tables) and ``stem``.csv (every run, long form)."""
    md, table = stem.with_suffix(".md"), stem.with_suffix(".csv")
    md.write_text(markdown(points, levels, left_out), encoding="utf-8")
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADER)
        writer.writerows(csv_rows(points))
    return md, table
