"""Several runs scored in one table with the controls: ``fedgs evaluate RUN... --json FILE``.

A batch is every run of one invocation on one data split (one instrument), each run's row named
after its folder and carrying its headline epsilon as text and as numbers (``epsilon_value``,
inf for a run without noise; ``threat_model``; ``strategy``; ``seed``), then the controls' rows
(``epsilon`` = `CONTROL`). ``--json`` writes ``{"instrument": record, "rows": rows}``;
benchmarks/score_run.py reads such files back (``--rows``) and draws the privacy-utility figure
from rows (`curve`) with `fedgs report`'s plotting function.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedgs.evaluation.plots import Control, CurvePoint, privacy_utility, read_curve_csv
from fedgs.evaluation.privacy_figures import curve_epsilon, headline, series_label
from fedgs.evaluation.quality_table import markdown
from fedgs.evaluation.run_files import RunFiles

if TYPE_CHECKING:
    from fedgs.evaluation.evaluate import EvaluationResult

CONTROL = "— (control)"  # a control row's epsilon text
EXTRA_COLUMNS = ("seed", "epsilon")  # printed after the sampler's name


def epsilon_text(run: RunFiles) -> str:
    figure = headline(run)
    if figure is None or figure.epsilon is None:
        return "none"
    return f"{figure.epsilon:.4g} ({figure.threat_model}, {figure.accountant}, δ {figure.delta:g})"


def privacy_fields(run_dir: str | Path) -> dict[str, Any]:
    """A run row's privacy columns: the text the table prints and the numbers the curve places
    the run by (epsilon_value None when no epsilon of the run holds, inf without noise)."""
    run = RunFiles.open(run_dir)
    placed = curve_epsilon(run)
    model, value = placed if placed else (None, None)
    text = "∞ (no noise: non-private)" if value == math.inf else epsilon_text(run)
    fields = {"epsilon": text, "epsilon_value": value, "threat_model": model}
    return fields | {"strategy": run.strategy, "seed": run.setting("seed")}


def run_row(result: EvaluationResult) -> dict[str, Any]:
    """The run's instrument row, named after its folder, with its privacy columns."""
    return result.quality["run"] | {"name": result.run.name} | privacy_fields(result.run.root)


def control_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row | {"epsilon": CONTROL} for row in rows]


def batches(results: list[EvaluationResult]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(instrument record, rows) per data split, in the order the splits first appear: the runs
    scored on it, then its controls (none when they were not scored)."""
    grouped: dict[int, tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for result in results:
        key = id(result.split)
        if key not in grouped:
            quality = result.quality
            grouped[key] = (quality["instrument"], [], control_rows(quality["controls"]))
        grouped[key][1].append(run_row(result))
    return [(record, runs + controls) for record, runs, controls in grouped.values()]


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of a batch (runs and controls, seed and epsilon columns)."""
    return markdown(rows, extra=EXTRA_COLUMNS)


def write_json(path: Path, record: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"instrument": record, "rows": rows}, indent=1))


def earlier_rows(path: Path, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of an earlier --json file, if the same instrument scored them: same options and
    writer split (its "real" calibration accuracies may differ in the last digits when they were
    retrained; each row keeps the calibration it was scored with)."""
    earlier = json.loads(Path(path).read_text())
    if any(earlier["instrument"][key] != record[key] for key in ("options", "split")):
        raise ValueError(f"{path}: scored by another instrument ({earlier['instrument']})")
    return earlier["rows"]


def curve(rows: list[dict[str, Any]], out: Path, earlier: Path | None = None) -> Path | None:
    """The privacy-utility figure of ``rows`` (and of the ``earlier`` figure's CSV); a run row
    without a numeric epsilon (none holds, or a file written before rows carried one) is left
    out, said so."""
    points, controls = read_curve_csv(earlier) if earlier else ([], [])
    if any(row["epsilon"] == CONTROL for row in rows):  # these rows' controls win
        controls = []
    for row in rows:
        if row["epsilon"] == CONTROL:
            controls.append(Control(row["name"], row["cnn_accuracy"], row["mlp_accuracy"]))
        elif row.get("epsilon_value") is None:
            print(f"--curve: {row['name']} left out (no numeric epsilon)", flush=True)
        else:
            series = series_label(row["strategy"], row["threat_model"])
            point = (row["epsilon_value"], row["cnn_accuracy"], row["mlp_accuracy"])
            points.append(CurvePoint(row["name"], series, row["threat_model"], *point))
    return privacy_utility(points, controls, out.with_suffix(""))
