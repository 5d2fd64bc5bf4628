"""The privacy-utility table: one row per strategy and threat model, one column per target
epsilon (1, 3, 10, 100), each cell the mean of the seeds with each seed's value; the controls
below as levels.

A figure shows the trend, but results documents quote numbers: this table is what they paste.
Only runs of one strategy under one threat model have comparable epsilons, so only they share a
row; a figure that the five-image lookup table also reaches is marked, since it is not a result.
Functions over points, no run folder read here: ``fedgs report`` reads the runs and calls them.

A grid takes longer than one machine keeps its run folders, so the points and controls are also
written as a record (``RECORD_NAME``) that a later report reads back and extends.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from fedgs.evaluation.quality_table import LOOKUP, NOT_BEATING
from fedgs.metrics.bars import better

TARGETS = (1.0, 3.0, 10.0, 100.0)
TOLERANCE = 0.01  # an epsilon of 10.05 was budgeted as 10: accountants round differently
BEYOND = "> 100"
NO_NOISE = "no noise"
ALL_COLUMNS = (*(f"{t:g}" for t in TARGETS), BEYOND, NO_NOISE)
RECORD_NAME = "privacy_utility_points.json"
RECORD_FORMAT = "fedgs privacy-utility record 1"
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
        for p in _ordered(points)
    ]


def _ordered(points: Sequence[Point]) -> list[Point]:
    """Series, then target, then seed: the long form's order, and the record's (a record kept
    in version control then changes by the lines of the points that changed)."""
    return sorted(
        points, key=lambda p: (p.series, ALL_COLUMNS.index(column(p.epsilon)), _by_seed(p))
    )


def write(
    points: Sequence[Point], levels: Sequence[Level], left_out: Sequence[str], stem: Path
) -> tuple[Path, Path, Path]:
    """``stem``.md (the tables), ``stem``.csv (every run, long form) and the record
    (RECORD_NAME beside them: points and controls, for a later report to extend)."""
    md, table = stem.with_suffix(".md"), stem.with_suffix(".csv")
    md.write_text(markdown(points, levels, left_out), encoding="utf-8")
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADER)
        writer.writerows(csv_rows(points))
    record = stem.with_name(RECORD_NAME)
    write_record(points, levels, record)
    return md, table, record


_Entry = TypeVar("_Entry", Point, Level)


class RecordError(ValueError):
    """The file is not a privacy-utility record; the message says what is wrong with it."""


@dataclass(frozen=True)
class Record:
    """Points and controls of evaluated runs whose folders may be gone."""

    points: list[Point]
    levels: list[Level]


def write_record(points: Sequence[Point], levels: Sequence[Level], path: Path) -> Path:
    """The points (with infinite epsilons as null: JSON has no infinity) and the controls."""
    payload = {
        "format": RECORD_FORMAT,
        "points": [_jsonable(asdict(p)) for p in _ordered(points)],
        "controls": [asdict(level) for level in levels],
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return path


def _jsonable(point: dict[str, object]) -> dict[str, object]:
    epsilon = point["epsilon"]
    return point | {"epsilon": None if epsilon == math.inf else epsilon}


def read_record(path: Path) -> Record:
    """What ``write_record`` wrote; a clear error for anything else (a hand-edited record
    with a missing figure or a misspelt field must not quietly become an empty cell)."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise RecordError(f"{path}: not readable as a privacy-utility record ({error})") from error
    if not isinstance(payload, dict) or payload.get("format") != RECORD_FORMAT:
        raise RecordError(f"{path}: not a privacy-utility record (format {RECORD_FORMAT!r})")
    try:
        points = [_record_point(p) for p in payload["points"]]
        levels = [_exact(Level, c) for c in payload["controls"]]
    except (KeyError, TypeError, ValueError) as error:
        raise RecordError(f"{path}: {error}") from error
    labels = [p.run for p in points]
    if len(set(labels)) != len(labels):
        raise RecordError(f"{path}: a run is recorded twice")
    return Record(points, levels)


def _record_point(entry: dict[str, Any]) -> Point:
    point = _exact(Point, entry)
    epsilon = math.inf if point.epsilon is None else float(point.epsilon)
    if not epsilon > 0:
        raise ValueError(f"run {point.run}: epsilon {point.epsilon} is not positive")
    if point.seed is not None and not isinstance(point.seed, int):
        raise ValueError(f"run {point.run}: seed {point.seed!r} is not a whole number")
    for name in ("cnn_accuracy", "mlp_accuracy", "coverage"):
        value = getattr(point, name)
        if value is not None and not (isinstance(value, int | float) and 0 <= value <= 1):
            raise ValueError(f"run {point.run}: {name} {value!r} is not a share in [0, 1]")
    return Point(**(asdict(point) | {"epsilon": epsilon}))


def _exact(kind: type[_Entry], entry: dict[str, Any]) -> _Entry:
    """``kind`` from exactly its fields: a missing or unknown key is an error."""
    names = {f.name for f in fields(kind)}
    if set(entry) != names:
        missing, unknown = sorted(names - set(entry)), sorted(set(entry) - names)
        raise ValueError(f"{kind.__name__} {entry}: missing {missing}, unknown {unknown}")
    return kind(**entry)
