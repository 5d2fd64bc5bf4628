"""``fedgs report``: one self-contained HTML page for one run or a comparison of runs.

Everything is inside the page (images as data URIs, inline CSS), so it can be mailed or archived.
The figures it draws are also written next to it (FILE_files/, PNG + CSV). The instrument's
quality table (with its controls), utility tables and the memorisation figure appear when
``fedgs evaluate`` has been run on the run; the rest comes from the run directory itself.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fedgs.evaluation import plots, privacy_utility_table
from fedgs.evaluation.privacy_figures import (
    EpsilonFigure,
    all_figures,
    curve_epsilon,
    headline,
    series_label,
)
from fedgs.evaluation.privacy_utility_table import Level, Point, Record
from fedgs.evaluation.quality_table import LEGEND, NOT_BEATING, header, rows_text
from fedgs.evaluation.run_files import RunError, RunFiles

MAX_GRIDS = 4
_CSS = """
body { font-family: sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.3em 0; }
figure { display: inline-block; margin: 0.4em 1em 0.4em 0; }
figcaption { font-size: 0.8em; color: #555; }
section.run { border-top: 3px solid #446; margin-top: 2em; }
.note { color: #555; font-size: 0.85em; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "∞"
        return f"{value:.4g}"
    return "–" if value is None else str(value)


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{_e(_fmt(v))}</td>'
            if isinstance(v, int | float)
            else f"<td>{_e(_fmt(v))}</td>"
            for v in row
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _evaluation(run: RunFiles) -> dict[str, Any] | None:
    path = run.evaluation_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def _accuracy(evaluation: dict[str, Any], name: str) -> float | None:
    """The run's downstream accuracy: the instrument's row (always CNN and MLP), else the
    utility table of an evaluation written before the instrument."""
    if "quality" in evaluation:
        return evaluation["quality"]["run"][f"{name}_accuracy"]
    for row in evaluation.get("utility", []):
        if row["classifier"] == name:
            return row["synthetic_accuracy"]
    return None


def _scores(run: RunFiles, evaluation: dict[str, Any] | None) -> dict[str, Any]:
    """The best available scores: ``fedgs evaluate``'s, else the run's last logged ones."""
    if evaluation:
        return {"source": "fedgs evaluate"} | evaluation["scores"]
    logged = run.last_scores()
    return {"source": f"logged at step {int(logged['step'])}"} | logged if logged else {}


def _privacy_section(figures: Sequence[EpsilonFigure]) -> str:
    return "<h3>Privacy</h3>" + _table(
        ("figure", "epsilon", "delta", "threat model", "accountant", "neighbouring", "assumes"),
        (
            (f.label, f.epsilon, f.delta, f.threat_model, f.accountant, f.neighbouring, f.note)
            for f in figures
        ),
    )


def _quality_section(quality: dict[str, Any], run: RunFiles) -> str:
    """The instrument's table (this run and the controls), its real-data record and the
    memorisation figure."""
    rows = [quality["run"], *quality["controls"]]
    record = quality["instrument"]
    parts = [
        "<h3>Quality (evaluation writers only; controls in the same table)</h3>",
        _table(header(), rows_text(rows)),
        f'<p class="note">{_e(LEGEND)} A figure marked {_e(NOT_BEATING)} means nothing for '
        "this run; only figures that beat the lookup table do.</p>",
        "<h4>Where the real images came from</h4>",
        _table(("item", "value"), record["split"].items()),
        _table(
            ("downstream classifier", "trained on real training-writer images"),
            record["real"].items(),
        ),
    ]
    parts.append(
        _evaluation_figure(
            run,
            "closest_pairs",
            "memorisation check: the samples closest to a training image (top) and that "
            "training image (bottom), pixel distance above",
        )
    )
    return "\n".join(parts)


def _evaluation_figure(run: RunFiles, name: str, caption: str) -> str:
    """A figure ``fedgs evaluate`` wrote, embedded; empty when it was not written."""
    path = run.evaluation_dir / "plots" / f"{name}.png"
    return _img(path, caption) if path.exists() else ""


def _grids(run: RunFiles) -> str:
    grids = run.samples()
    if not grids:
        return '<p class="note">No sample grids were written (evaluation was off).</p>'
    step = max(1, math.ceil(len(grids) / MAX_GRIDS))
    chosen = sorted({*grids[::step], grids[-1]})
    return "<h3>Samples (one row per class)</h3>" + "".join(
        _img(p, p.stem.replace("_", " ")) for p in chosen
    )


def _run_section(run: RunFiles, label: str, figures: Sequence[EpsilonFigure], assets: Path) -> str:
    evaluation = _evaluation(run)
    parts = [
        f'<section class="run"><h2>{_e(label)}</h2>',
        f'<p class="note">{_e(run.root.resolve())} — strategy {_e(run.strategy)}, '
        f"{_e(run.runner)} runner, {_e(run.privacy.get('steps', run.privacy.get('rounds')))} "
        "generator steps</p>",
        _privacy_section(figures),
    ]
    scores = _scores(run, evaluation)
    if scores:
        parts.append("<h3>Scores</h3>" + _table(("score", "value"), scores.items()))
    if evaluation and "quality" in evaluation:
        parts.append(_quality_section(evaluation["quality"], run))
    if evaluation:
        parts.append(
            "<h3>Downstream utility (train on synthetic, test on real; Table A1 style)</h3>"
            + _table(
                ("classifier", "synthetic → real", "real → real", "calibrated", "train images"),
                (
                    (
                        r["classifier"],
                        r["synthetic_accuracy"],
                        r["real_accuracy"],
                        r["calibrated_accuracy"],
                        r["train_samples"],
                    )
                    for r in evaluation["utility"]
                ),
            )
        )
    else:
        parts.append(
            '<p class="note">No utility table: run <code>fedgs evaluate '
            f"{_e(run.root)}</code> first.</p>"
        )
    parts.append(_grids(run))
    parts.append("<h3>Figures</h3>")
    if curves := plots.training_curves(run, assets / f"{label}_training_curves"):
        parts.append(_img(curves, "training curves (from metrics.csv)"))
    parts.append(
        _evaluation_figure(
            run,
            "gradient_norms",
            "gradient norms before/after clipping: final generator vs a freshly "
            "warm-started critic (fedgs evaluate)",
        )
    )
    parts.append(
        "<h3>Configuration</h3>"
        + _table(
            ("key", "value"),
            (
                (k, json.dumps(v) if isinstance(v, dict | list) else v)
                for k, v in sorted(run.config.items())
            ),
        )
    )
    parts.append("</section>")
    return "\n".join(parts)


def _comparison(
    runs: Sequence[RunFiles],
    labels: Sequence[str],
    figures: Sequence[Sequence[EpsilonFigure]],
    assets: Path,
) -> str:
    rows, utilities = [], {}
    for run, label, run_figures in zip(runs, labels, figures, strict=True):
        evaluation = _evaluation(run)
        scores = _scores(run, evaluation)
        paper = next((f.epsilon for f in run_figures if f.threat_model == "paper"), None)
        guarantee = headline(run)
        epsilon = guarantee.epsilon if guarantee else None
        rows.append(
            (
                label,
                run.strategy,
                run.privacy.get("steps", run.privacy.get("rounds")),
                epsilon,
                guarantee.describe() if guarantee else "none",
                paper,
                scores.get("cnn_calibrated"),
                scores.get("mlp_calibrated"),
                scores.get("recall"),
                scores.get("coverage"),
                scores.get("near_copy_share"),
                scores.get("fid_domain"),
                scores.get("label_agreement"),
            )
        )
        for row in (evaluation or {}).get("utility", []):
            utilities.setdefault(row["classifier"], {})[label] = row["synthetic_accuracy"]
    parts = [
        "<h2>Comparison</h2>",
        '<p class="note">epsilon: each run\'s own guarantee under the strongest threat model it '
        "holds for (GS-WGAN: untrusted server, max over clients; Fed-Avg GAN: trusted server; "
        "teacher strategies: trusted aggregator); runs under different threat models are not "
        "directly comparable, so the privacy-utility curve draws one line per strategy and "
        "threat model, and a run without noise as the non-private bound. Paper-compatible: the "
        "GS-WGAN paper's figure for the setting, for comparison with its tables only.</p>",
        _table(
            (
                "run",
                "strategy",
                "steps",
                "epsilon",
                "threat model, accountant, delta, neighbouring",
                "paper-compatible epsilon",
                "CNN calibrated",
                "MLP calibrated",
                "recall",
                "coverage",
                "near-copy share",
                "domain FID",
                "label agreement",
            ),
            rows,
        ),
    ]
    if utilities:
        table = _table(
            ("classifier", *labels),
            ((c, *(v.get(n) for n in labels)) for c, v in utilities.items()),
        )
        parts.append("<h3>Downstream accuracy per classifier (synthetic → real)</h3>" + table)
    return "\n".join(parts)


def _levels(evaluation: dict[str, Any]) -> list[Level]:
    """The evaluation's controls, in its order (the table lists every one it scored)."""
    return [
        Level(r["name"], r["cnn_accuracy"], r["mlp_accuracy"], r.get("coverage"))
        for r in evaluation.get("quality", {}).get("controls", [])
    ]


def _coverage(evaluation: dict[str, Any]) -> float | None:
    """The instrument's coverage, else the score of an evaluation written before it."""
    row = evaluation.get("quality", {}).get("run", {})
    return row.get("coverage", evaluation.get("scores", {}).get("coverage"))


def _point(
    run: RunFiles, label: str, evaluation: dict[str, Any], placed: tuple[str, float]
) -> Point:
    model, epsilon = placed
    seed = run.setting("seed")
    return Point(
        run=label,
        series=series_label(run.strategy, model),
        strategy=run.strategy,
        threat_model=model,
        seed=None if seed is None else int(seed),
        epsilon=epsilon,
        cnn_accuracy=_accuracy(evaluation, "cnn"),
        mlp_accuracy=_accuracy(evaluation, "mlp"),
        coverage=_coverage(evaluation),
    )


@dataclass(frozen=True)
class _Placed:
    """What the privacy-utility curve and table are drawn from."""

    points: list[Point]  # every evaluated run with an epsilon that holds
    levels: list[Level]  # the first evaluated run's controls
    left_out: list[tuple[str, str]]  # (run, why) for every other run
    control_notes: list[str]  # where the controls come from, runs scored against other ones


def _placed(runs: Sequence[RunFiles], labels: Sequence[str], record: Record | None) -> _Placed:
    """Each run as a point or left out with the reason; controls from the first evaluation.
    A record's points come first; a run given again by its folder replaces its recorded point
    (a fresh evaluation wins) and a record's controls serve when no run brings its own."""
    points, levels, left_out, notes = [], [], [], []
    for run, label in zip(runs, labels, strict=True):
        evaluation = _evaluation(run)
        epsilon = curve_epsilon(run)
        if evaluation is None:
            left_out.append((label, "no fedgs evaluate output"))
        elif epsilon is None:
            left_out.append((label, "no epsilon of it holds"))
        else:
            points.append(_point(run, label, evaluation, epsilon))
            notes += _control_note(label, _levels(evaluation), levels)
            levels = levels or _levels(evaluation)
    if record is None:
        return _Placed(points, levels, left_out, notes)
    given = {p.run for p in points}
    kept = [p for p in record.points if p.run not in given]
    notes += [
        f"{p.run}: recorded and given again; its folder's evaluation is drawn."
        for p in record.points
        if p.run in given
    ]
    if not levels and record.levels:
        notes.append("control levels: from the record.")
    elif record.levels and record.levels != levels:
        notes.append(_record_controls_note(record.levels, levels))
    return _Placed(kept + points, levels or record.levels, left_out, notes)


def _record_controls_note(recorded: Sequence[Level], drawn: Sequence[Level]) -> str:
    """The record's controls against the drawn ones, with the largest difference: another
    split makes its points incomparable, while the same split scored on another machine moves
    the levels by a few thousandths (CPU training differs) and the reader can judge which."""
    mine = {level.name: level for level in drawn}
    gaps = [
        (abs(getattr(r, f) - getattr(mine[r.name], f)), r.name, f, getattr(r, f))
        for r in recorded
        if r.name in mine
        for f in ("cnn_accuracy", "mlp_accuracy", "coverage")
        if getattr(r, f) is not None and getattr(mine[r.name], f) is not None
    ]
    names = {level.name for level in recorded} != set(mine)
    if names or not gaps:
        return "the record's controls are not the drawn ones (its points are not comparable)."
    gap, name, figure, value = max(gaps, key=lambda g: g[0])  # the first of equal gaps
    drawn_value = getattr(mine[name], figure)
    return (
        f"the record's controls differ from the drawn ones by up to {gap:.3f} ({name} "
        f"{figure.replace('_', ' ')} {value:.3f} recorded, {drawn_value:.3f} drawn): points "
        "scored on another split are not comparable."
    )


def _privacy_utility(
    runs: Sequence[RunFiles], labels: Sequence[str], record: Record | None, assets: Path
) -> str:
    """The privacy-utility curve and table of the evaluated runs and the record's points, each
    naming the runs it could not place."""
    placed = _placed(runs, labels, record)
    drawn = [f"{label}: not drawn, {why}." for label, why in placed.left_out]
    listed = [f"{label}: not in the table, {why}." for label, why in placed.left_out]
    curve = _curve(placed.points, placed.levels, drawn + placed.control_notes, assets)
    return curve + "\n" + _utility_table(placed.points, placed.levels, listed, assets)


def _curve(
    points: Sequence[Point], levels: Sequence[Level], notes: Sequence[str], assets: Path
) -> str:
    """The privacy-utility figure and the notes on the runs it could not place and where its
    control levels come from."""
    figure = plots.privacy_utility(
        [
            plots.CurvePoint(
                p.run,
                p.series,
                p.threat_model,
                p.epsilon,
                p.cnn_accuracy,
                p.mlp_accuracy,
                _curve_setting(p),
            )
            for p in points
        ],
        [plots.Control(c.name, c.cnn_accuracy, c.mlp_accuracy) for c in levels],
        assets / "privacy_utility",
    )
    parts = ["<h3>Privacy-utility curve</h3>"]
    if figure:
        parts.append(_img(figure, "downstream accuracy against each run's epsilon"))
    if notes:
        parts.append(f'<p class="note">{"<br>".join(map(_e, notes))}</p>')
    return "\n".join(parts)


def _curve_setting(point: Point) -> str:
    """Which runs the curve averages: those of one of the table's epsilon columns (the seeds of
    a grid point, whatever their folders are called), as the table's cell does; runs beyond the
    last column or without noise by their own name (their epsilons may lie far apart)."""
    key = privacy_utility_table.column(point.epsilon)
    return "" if key in (privacy_utility_table.BEYOND, privacy_utility_table.NO_NOISE) else key


def _utility_table(
    points: Sequence[Point], levels: Sequence[Level], left_out: Sequence[str], assets: Path
) -> str:
    """The privacy-utility table (CNN accuracy, coverage when measured) as HTML, also written
    as privacy_utility_table.md and .csv next to the figure for results documents."""
    parts = ["<h3>Privacy-utility table</h3>"]
    if points:
        privacy_utility_table.write(points, levels, left_out, assets / "privacy_utility_table")
        for metric, title in privacy_utility_table.shown_metrics(points):
            rows = privacy_utility_table.rows(points, levels, metric)
            parts.append(
                f"<h4>{_e(title)}</h4>" + _table(privacy_utility_table.header(points), rows)
            )
        parts.append(
            f'<p class="note">{_e(privacy_utility_table.legend(levels))} Also in '
            f"{_e(assets.name)}/privacy_utility_table.md and .csv.</p>"
        )
    notes = privacy_utility_table.notes(points, left_out)
    if notes:
        parts.append(f'<p class="note">{"<br>".join(map(_e, notes))}</p>')
    return "\n".join(parts)


def _control_note(label: str, mine: list[Level], drawn: list[Level]) -> list[str]:
    """Controls are drawn from the first evaluated run; a run scored against other control
    levels (other writers or instrument settings) is flagged: its point is not comparable."""
    if not drawn and mine:
        return [f"control levels: from {label}'s evaluation."]
    if drawn and mine and mine != drawn:
        return [f"{label}: its evaluation's controls differ from the drawn ones (not comparable)."]
    return []


def _labels(runs: Sequence[RunFiles]) -> list[str]:
    """Folder names, numbered when two runs share one (their figures must not collide)."""
    names = [r.name for r in runs]
    if len(set(names)) == len(names):
        return names
    return [f"{i + 1}-{name}" for i, name in enumerate(names)]


def write_report(
    run_dirs: Sequence[str | Path], out: str | Path, recorded: str | Path | None = None
) -> Path:
    """Write the HTML page for ``run_dirs`` to ``out``; figures also go to ``out``'s _files/.
    ``recorded``: a privacy-utility record (an earlier report's) whose points join the curve and
    table, so a grid can outlive the folders of its runs."""
    record = None if recorded is None else privacy_utility_table.read_record(Path(recorded))
    if not run_dirs and record is None:
        raise RunError("nothing to report: give a run directory or a record")
    runs = [RunFiles.open(d) for d in run_dirs]
    labels = _labels(runs)
    out = Path(out)
    assets = out.with_name(f"{out.stem}_files")
    assets.mkdir(parents=True, exist_ok=True)
    figures = [all_figures(r) for r in runs]
    title = "fedgs report: " + ", ".join([*labels, *([str(recorded)] if recorded else [])])
    stamp = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    body = [f"<h1>{_e(title)}</h1>", f'<p class="note">generated {stamp} by fedgs report</p>']
    if len(runs) > 1:
        body.append(_comparison(runs, labels, figures, assets))
    if len(runs) > 1 or record is not None:
        body.append(_privacy_utility(runs, labels, record, assets))
    body += [
        _run_section(r, label, f, assets) for r, label, f in zip(runs, labels, figures, strict=True)
    ]
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
