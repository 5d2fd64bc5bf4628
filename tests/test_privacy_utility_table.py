"""The privacy-utility table of ``fedgs report``: one row per strategy and threat model, one
column per target epsilon (1, 3, 10, 100), each cell the mean of the seeds with each seed's
value, marked where it does not beat the lookup k=5 control; written as markdown and long-form
CSV next to the figure. Runs and evaluations are files written in-process: nothing is trained."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from evaluation_runs import CONTROL_LEVELS, make_run, without_noise, write_evaluation

from fedgs.evaluation.privacy_utility_table import (
    BEYOND,
    NO_NOISE,
    Level,
    Point,
    cell,
    column,
    notes,
    rows,
    shown_metrics,
)
from fedgs.evaluation.report import write_report

CONTROLS = {n: a for n, a in CONTROL_LEVELS.items() if n != "flat grey"}
LEVELS = [Level(n, a, a, a / 10) for n, a in CONTROLS.items()]
GSWGAN = "GS-WGAN (untrusted server)"
SECURE = "GS-WGAN (secure aggregation)"
FEDAVG = "Fed-Avg GAN (trusted server)"


def _point(run: str, epsilon: float, cnn: float, seed: int = 0, coverage: float | None = None):
    return Point(run, GSWGAN, "gswgan", "untrusted-server", seed, epsilon, cnn, cnn, coverage)


@pytest.mark.parametrize(
    ("epsilon", "expected"),
    [
        (0.5, "1"),
        (1.0, "1"),
        (1.02, "3"),  # over 1% above 1
        (2.9, "3"),
        (9.98, "10"),
        (10.05, "10"),
        (100.3, "100"),
        (101.5, BEYOND),
        (150.0, BEYOND),
        (math.inf, NO_NOISE),
    ],
)
def test_a_run_sits_at_the_smallest_target_within_one_percent(
    epsilon: float, expected: str
) -> None:
    # fails if the tolerance is dropped (10.05 -> 100), widened (1.02 -> 1), or if a run
    # without noise is averaged into the "> 100" column
    assert column(epsilon) == expected


def test_a_cell_is_the_mean_with_each_seed_and_counts_other_than_two() -> None:
    # fails if the mean, the per-seed values, the n marker or the lookup mark change
    assert cell([0.634, 0.668], 0.5, "cnn_accuracy") == "0.651 (0.634, 0.668)"
    assert cell([0.7], 0.5, "cnn_accuracy") == "0.700 (n=1)"
    assert cell([0.6, 0.7, 0.8], 0.5, "cnn_accuracy") == "0.700 (0.600, 0.700, 0.800; n=3)"
    assert cell([], 0.5, "cnn_accuracy") == ""


def test_a_mean_that_does_not_beat_the_lookup_table_is_marked() -> None:
    # fails if the mark is put on cells above the lookup, or left off one level with it (a tie
    # does not beat it), or if a cell is marked when there is no lookup control to compare with
    assert cell([0.60, 0.63], 0.62, "cnn_accuracy") == "0.615° (0.600, 0.630)"
    assert cell([0.62, 0.62], 0.62, "cnn_accuracy") == "0.620° (0.620, 0.620)"
    assert cell([0.63, 0.65], 0.62, "cnn_accuracy") == "0.640 (0.630, 0.650)"
    assert cell([0.1, 0.2], None, "cnn_accuracy") == "0.150 (0.100, 0.200)"


def test_rows_are_series_then_every_control_in_the_evaluations_order() -> None:
    # fails if a control is dropped or reordered (the lookup and public-fonts rows must show),
    # if two series share a row, or if seeds are not ordered by seed
    points = [
        _point("g10-s1", 10.05, 0.668, seed=1),
        _point("g10-s0", 9.98, 0.634, seed=0),
        _point("g1", 1.0, 0.30),
        Point("f", FEDAVG, "fedavg-gan", "trusted-server", 0, 3.0, 0.7, 0.6, None),
    ]
    table = rows(points, LEVELS, "cnn_accuracy")
    assert table[0] == [FEDAVG, "", "0.700 (n=1)", "", ""]
    assert table[1] == [GSWGAN, "0.300° (n=1)", "", "0.651 (0.634, 0.668)", ""]
    assert [r[0] for r in table[2:]] == [f"{n} (control)" for n in CONTROLS]
    assert table[4] == ["lookup k=5 (control)", *["0.620"] * 4]


def test_coverage_is_tabulated_when_measured_and_marked_against_the_lookups() -> None:
    # fails if coverage is shown for evaluations without it, or compared with the CNN lookup
    without = [_point("a", 10.0, 0.7), _point("b", 10.0, 0.7, seed=1)]
    assert [m for m, _ in shown_metrics(without)] == ["cnn_accuracy"]
    measured = [_point("a", 10.0, 0.7, coverage=0.05), _point("b", 10.0, 0.7, 1, 0.07)]
    assert [m for m, _ in shown_metrics(measured)] == ["cnn_accuracy", "coverage"]
    # lookup k=5's coverage is 0.062: a mean of 0.06 is marked, the CNN 0.7 > 0.62 is not
    assert rows(measured, LEVELS, "coverage")[0][3] == "0.060° (0.050, 0.070)"
    assert rows(measured, LEVELS, "cnn_accuracy")[0][3] == "0.700 (0.700, 0.700)"


def test_runs_of_one_cell_sharing_a_seed_are_named() -> None:
    # fails if two settings at one epsilon are averaged silently as if they were seeds
    points = [_point("m100-s0", 10.0, 0.6), _point("mK-s0", 9.98, 0.7), _point("s1", 3.0, 0.5)]
    assert notes(points, ["x: not in the table, no fedgs evaluate output."]) == [
        "x: not in the table, no fedgs evaluate output.",
        f"{GSWGAN} at ε 10: m100-s0, mK-s0 share seed 0, so they are different settings and "
        "the cell's mean mixes them.",
    ]


def _run(root: Path, epsilon: float, seed: int, cnn: float | None, secure: bool = False) -> Path:
    """A GS-WGAN run at ``epsilon`` (untrusted server, or secure aggregation as its headline)
    of ``seed``, evaluated with accuracy ``cnn`` (None: never evaluated)."""
    run = make_run(root, "simulate")
    privacy = json.loads((run / "privacy.json").read_text())
    privacy["untrusted_server"]["epsilon"] = epsilon
    if secure:
        base = {"accountant": "autodp-rdp", "neighbouring": "replace-one"}
        privacy["secure_aggregation"] = base | {"threat_model": "secure-aggregation"}
        privacy["secure_aggregation"]["epsilon"] = epsilon
        privacy["headline"] = "secure-aggregation"
    (run / "privacy.json").write_text(json.dumps(privacy))
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(config | {"seed": seed}))
    if cnn is not None:
        write_evaluation(run, cnn, cnn - 0.1, CONTROLS)
    return run


def _void(run: Path) -> Path:
    """The run's only guarantee voided (a fixed sampling seed): no epsilon of it holds."""
    privacy = json.loads((run / "privacy.json").read_text())
    privacy["untrusted_server"]["holds"] = False
    (run / "privacy.json").write_text(json.dumps(privacy))
    return run


def _evaluated(tmp_path: Path) -> list[Path]:
    """Two seeds of one GS-WGAN cell, a secure point and a run without noise, evaluated."""
    free = without_noise(make_run(tmp_path / "f-free", "fedavg-gan"))
    write_evaluation(free, 0.8, 0.7, CONTROLS)
    return [
        _run(tmp_path / "g10-s0", 9.98, 0, 0.634),
        _run(tmp_path / "g10-s1", 10.05, 1, 0.668),
        _run(tmp_path / "s3", 2.9, 0, 0.64, secure=True),
        free,
    ]


def test_report_writes_the_table_as_html_markdown_and_csv(tmp_path: Path) -> None:
    # fails if write_report stops writing either file, buckets or averages otherwise, loses a
    # control, or leaves out the note on a run without evaluation or without an epsilon
    runs = [
        *_evaluated(tmp_path),
        _run(tmp_path / "g1", 1.0, 0, 0.30),
        _run(tmp_path / "g100", 100.3, 0, 0.70),
        _run(tmp_path / "g150", 150.0, 0, 0.75),
        _run(tmp_path / "g-bare", 10.0, 0, None),
        _void(_run(tmp_path / "g-void", 10.0, 0, 0.5)),
    ]
    write_report(runs, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<h3>Privacy-utility table</h3>" in page
    assert "0.651 (0.634, 0.668)" in page
    md = (tmp_path / "report_files" / "privacy_utility_table.md").read_text(encoding="utf-8")
    lines = md.splitlines()
    assert "| strategy (threat model) | ε 1 | ε 3 | ε 10 | ε 100 | ε > 100 | no noise |" in lines
    assert f"| {FEDAVG} |  |  |  |  |  | 0.800 (n=1) |" in lines
    assert f"| {SECURE} |  | 0.640 (n=1) |  |  |  |  |" in lines
    assert (
        f"| {GSWGAN} | 0.300° (n=1) |  | 0.651 (0.634, 0.668) | 0.700 (n=1) | 0.750 (n=1) |  |"
        in lines
    )
    assert "| lookup k=5 (control) | 0.620 | 0.620 | 0.620 | 0.620 | 0.620 | 0.620 |" in lines
    assert "| public fonts (control) | 0.550 | 0.550 | 0.550 | 0.550 | 0.550 | 0.550 |" in lines
    assert "**coverage**" in md  # write_evaluation's rows carry coverage
    assert "- g-bare: not in the table, no fedgs evaluate output." in lines
    assert "- g-void: not in the table, no epsilon of it holds." in lines
    assert "g-void: not in the table, no epsilon of it holds." in page
    with (tmp_path / "report_files" / "privacy_utility_table.csv").open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [(r["series"], r["target_epsilon"], r["run"], r["seed"]) for r in table] == [
        (FEDAVG, NO_NOISE, "f-free", "0"),
        (SECURE, "3", "s3", "0"),
        (GSWGAN, "1", "g1", "0"),
        (GSWGAN, "10", "g10-s0", "0"),
        (GSWGAN, "10", "g10-s1", "1"),
        (GSWGAN, "100", "g100", "0"),
        (GSWGAN, BEYOND, "g150", "0"),
    ]
    row = table[3]
    assert (row["strategy"], row["threat_model"]) == ("gswgan", "untrusted-server")
    assert float(row["epsilon"]) == 9.98 and float(row["cnn"]) == 0.634
    assert float(row["mlp"]) == pytest.approx(0.534) and float(row["coverage"]) == 0.5


def _table_lines(assets: Path) -> list[str]:
    """The table rows of a report's markdown (its notes differ between reports)."""
    md = (assets / "privacy_utility_table.md").read_text(encoding="utf-8")
    return [line for line in md.splitlines() if line.startswith("|")]


def test_a_record_alone_redraws_the_table_its_runs_drew(tmp_path: Path) -> None:
    # the grid outlives its run folders: fails if the record loses a point, a seed, a control,
    # a figure or the no-noise column (an infinite epsilon JSON cannot hold as a number)
    write_report(_evaluated(tmp_path), tmp_path / "first.html")
    record = tmp_path / "first_files" / "privacy_utility_points.json"
    assert json.loads(record.read_text())["points"][0]["epsilon"] is None  # f-free, no noise
    write_report([], tmp_path / "again.html", recorded=record)
    assert _table_lines(tmp_path / "again_files") == _table_lines(tmp_path / "first_files")
    page = (tmp_path / "again.html").read_text(encoding="utf-8")
    assert "0.651 (0.634, 0.668)" in page and "control levels: from the record." in page
    again = tmp_path / "again_files" / "privacy_utility_points.json"
    assert json.loads(again.read_text()) == json.loads(record.read_text())


def test_a_run_given_again_replaces_its_recorded_point(tmp_path: Path) -> None:
    # fails if a re-evaluated run is counted twice (a cell of three) or its old figure is kept
    runs = [_run(tmp_path / "g10-s0", 9.98, 0, 0.634), _run(tmp_path / "g10-s1", 10.05, 1, 0.668)]
    write_report(runs, tmp_path / "first.html")
    record = tmp_path / "first_files" / "privacy_utility_points.json"
    write_evaluation(runs[0], 0.700, 0.600, CONTROLS)
    new = _run(tmp_path / "g1", 1.0, 0, 0.30)
    write_report([runs[0], new], tmp_path / "next.html", recorded=record)
    lines = _table_lines(tmp_path / "next_files")
    assert f"| {GSWGAN} | 0.300° (n=1) |  | 0.684 (0.700, 0.668) |  |" in lines
    page = (tmp_path / "next.html").read_text(encoding="utf-8")
    assert "g10-s0: recorded and given again; its folder&#x27;s evaluation is drawn." in page


def test_a_record_scored_against_other_controls_is_flagged(tmp_path: Path) -> None:
    # points scored against other controls (another split) must not pass as comparable
    write_report(
        [_run(tmp_path / "a0", 9.98, 0, 0.634), _run(tmp_path / "a1", 9.98, 1, 0.6)],
        tmp_path / "first.html",
    )
    record = tmp_path / "first_files" / "privacy_utility_points.json"
    other = _run(tmp_path / "b", 1.0, 0, None)
    write_evaluation(other, 0.3, 0.2, {n: a / 2 for n, a in CONTROLS.items()})
    write_report([other], tmp_path / "next.html", recorded=record)
    page = (tmp_path / "next.html").read_text()
    assert (
        "the record&#x27;s controls differ from the drawn ones by up to 0.470 (real training "
        "writers cnn accuracy 0.940 recorded, 0.470 drawn)" in page
    )
    fewer = _run(tmp_path / "c", 1.0, 0, None)
    write_evaluation(fewer, 0.3, 0.2, {"lookup k=5": 0.62})
    write_report([fewer], tmp_path / "fewer.html", recorded=record)
    assert "controls are not the drawn ones" in (tmp_path / "fewer.html").read_text()


def _record(tmp_path: Path) -> tuple[Path, dict]:
    write_report(
        [_run(tmp_path / "g0", 9.98, 0, 0.634), _run(tmp_path / "g1", 9.98, 1, 0.6)],
        tmp_path / "r.html",
    )
    path = tmp_path / "r_files" / "privacy_utility_points.json"
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r | {"format": "something else"}, "not a privacy-utility record"),
        (lambda r: r | {"points": [r["points"][0]] * 2}, "recorded twice"),
        (lambda r: r | {"points": [{**r["points"][0], "cnn": 0.6}]}, "unknown ['cnn']"),
        (lambda r: r | {"points": [{**r["points"][0], "cnn_accuracy": "0.6"}]}, "not a share"),
        (lambda r: r | {"points": [{**r["points"][0], "cnn_accuracy": 6.0}]}, "not a share"),
        (lambda r: r | {"points": [{**r["points"][0], "epsilon": -1}]}, "not positive"),
        (lambda r: r | {"points": [{**r["points"][0], "seed": "0"}]}, "not a whole number"),
        (lambda r: {k: v for k, v in r.items() if k != "controls"}, "controls"),
        (lambda r: r | {"controls": [{"name": "lookup k=5"}]}, "missing"),
    ],
)
def test_a_broken_record_is_refused_with_what_is_wrong(
    tmp_path: Path, change, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # a hand-edited record must not quietly become empty cells or a wrong mean
    from fedgs.cli import main

    path, record = _record(tmp_path)
    path.write_text(json.dumps(change(record)))
    assert main(["report", "--recorded", str(path), "--out", str(tmp_path / "x.html")]) == 2
    error = capsys.readouterr().err
    assert "fedgs report: error:" in error and message in error
    assert not (tmp_path / "x.html").exists()


def test_a_report_of_nothing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fedgs.cli import main

    assert main(["report", "--out", str(tmp_path / "x.html")]) == 2
    assert "give a run directory or a record" in capsys.readouterr().err
