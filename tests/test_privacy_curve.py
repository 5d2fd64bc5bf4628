"""The privacy-utility curve (issue 21, goal 3): one line per strategy and threat model sorted by
epsilon, the controls as levels, a run without noise as the non-private bound; drawn by
``fedgs report`` from evaluated runs and by benchmarks/score_run.py from its rows, with one
plotting function. Runs and evaluations are files written in-process: nothing is trained."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from evaluation_runs import CONTROL_LEVELS, make_run, without_noise, write_evaluation

from fedgs.evaluation.plots import (
    CURVE_CONTROLS,
    Control,
    CurvePoint,
    _curve_panel,
    privacy_utility,
    read_curve_csv,
)
from fedgs.evaluation.privacy_figures import curve_epsilon, headline, run_figures
from fedgs.evaluation.report import write_report
from fedgs.evaluation.run_files import RunFiles

CONTROLS = CONTROL_LEVELS
GSWGAN = "GS-WGAN (untrusted server)"
FEDAVG = "Fed-Avg GAN (trusted server)"


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _score_run():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "score_run.py"
    spec = importlib.util.spec_from_file_location("score_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_curve_csv_is_one_sorted_series_per_strategy_with_controls(tmp_path: Path) -> None:
    points = [
        CurvePoint("g-big", GSWGAN, "untrusted-server", 1000.0, 0.30, 0.25),
        CurvePoint("f-none", FEDAVG, "trusted-server", math.inf, 0.70, 0.60),
        CurvePoint("g-small", GSWGAN, "untrusted-server", 10.0, 0.20, 0.15),
        CurvePoint("f-mid", FEDAVG, "trusted-server", 50.0, 0.10, None),
    ]
    controls = [Control(n, a, a) for n, a in CONTROLS.items()]
    assert privacy_utility(points, controls, tmp_path / "curve") == tmp_path / "curve.png"
    assert (tmp_path / "curve.png").stat().st_size > 0
    rows = _csv(tmp_path / "curve.csv")
    runs = [(r["kind"], r["series"], r["name"], r["epsilon"]) for r in rows[:4]]
    assert runs == [
        ("run", FEDAVG, "f-mid", "50.0"),
        ("non-private", FEDAVG, "f-none", "inf"),
        ("run", GSWGAN, "g-small", "10.0"),
        ("run", GSWGAN, "g-big", "1000.0"),
    ]
    assert rows[0]["mlp"] == "" and rows[1]["cnn"] == "0.7"
    levels = {r["name"]: float(r["cnn"]) for r in rows[4:] if r["kind"] == "control"}
    assert levels == {n: a for n, a in CONTROLS.items() if n != "flat grey"}


def test_seeds_of_one_setting_are_drawn_as_their_mean_and_each_seed() -> None:
    """Two seeds of gs-e10 (same run name) and two of the no-noise run: the line passes through
    the mean of each setting, every seed is a dot, the star sits at the non-private mean."""
    points = [
        CurvePoint("gs-e10", GSWGAN, "untrusted-server", 10.0, 0.10, None),
        CurvePoint("gs-e10", GSWGAN, "untrusted-server", 12.0, 0.20, None),
        CurvePoint("gs-e100", GSWGAN, "untrusted-server", 100.0, 0.30, None),
        CurvePoint("gs-free", GSWGAN, "untrusted-server", math.inf, 0.50, None),
        CurvePoint("gs-free", GSWGAN, "untrusted-server", math.inf, 0.70, None),
    ]
    fig, ax = plt.subplots()
    _curve_panel(ax, points, [], "cnn")
    by_marker = {line.get_marker(): line for line in ax.lines}
    curve, dots, star = by_marker["o"], by_marker["."], by_marker["*"]
    assert list(curve.get_xdata()) == [11.0, 100.0]
    assert list(curve.get_ydata()) == pytest.approx([0.15, 0.30])
    assert list(dots.get_ydata()) == [0.10, 0.20, 0.30, 0.50, 0.70]
    assert list(star.get_ydata()) == pytest.approx([0.60])
    assert "mean of seeds" in curve.get_label()
    plt.close(fig)


def test_one_seed_per_setting_draws_no_dots() -> None:
    points = [
        CurvePoint("a", GSWGAN, "untrusted-server", 10.0, 0.10, None),
        CurvePoint("b", GSWGAN, "untrusted-server", 100.0, 0.30, None),
    ]
    fig, ax = plt.subplots()
    _curve_panel(ax, points, [], "cnn")
    assert [line.get_marker() for line in ax.lines] == ["o"]
    assert ax.lines[0].get_label() == GSWGAN
    plt.close(fig)


def test_no_accuracy_draws_nothing(tmp_path: Path) -> None:
    point = CurvePoint("g", GSWGAN, "untrusted-server", 3.0, None, None)
    assert privacy_utility([point], [], tmp_path / "curve") is None
    assert not (tmp_path / "curve.csv").exists()


def test_a_run_without_noise_has_infinite_epsilon(tmp_path: Path) -> None:
    run = RunFiles.open(without_noise(make_run(tmp_path / "fedavg", "fedavg-gan")))
    assert run.privacy["noise_multiplier"] == 0.0
    assert headline(run).epsilon == math.inf  # privacy.json holds Infinity
    assert curve_epsilon(run) == ("trusted-server", math.inf)
    noisy = RunFiles.open(make_run(tmp_path / "gswgan", "simulate"))
    assert curve_epsilon(noisy) == ("untrusted-server", headline(noisy).epsilon)


def test_a_secure_runs_headline_is_secure_aggregation_not_its_local_noise_figure(
    tmp_path: Path,
) -> None:
    """A secure run's report names secure aggregation as its headline; the untrusted-server
    block beside it is what a client's own noise share gives if that fails (local noise only):
    never the figure a table or curve places the run at."""
    path = make_run(tmp_path / "secure", "simulate") / "privacy.json"
    privacy = json.loads(path.read_text())
    privacy["headline"] = "secure-aggregation"
    base = {"accountant": "autodp-rdp", "neighbouring": "replace-one"}
    privacy["secure_aggregation"] = base | {"threat_model": "secure-aggregation", "epsilon": 9.98}
    privacy["secure_aggregation_ddg_rdp"] = base | {
        "threat_model": "secure-aggregation",
        "accountant": "ddg-rdp",
        "epsilon": 9.17,
    }
    privacy["untrusted_server"] |= {"epsilon": 4321.0, "local_noise_only": True}
    path.write_text(json.dumps(privacy))
    run = RunFiles.open(path.parent)
    assert (headline(run).epsilon, headline(run).accountant) == (9.98, "autodp-rdp")
    assert curve_epsilon(run) == ("secure-aggregation", 9.98)
    labels = {f.epsilon: f.label for f in run_figures(run)}
    assert labels[4321.0].startswith("local noise only")


def _scale_epsilon(run: Path, factor: float) -> Path:
    """The same run with a larger untrusted-server epsilon (as if it had run longer)."""
    path = run / "privacy.json"
    privacy = json.loads(path.read_text())
    privacy["untrusted_server"]["epsilon"] *= factor
    path.write_text(json.dumps(privacy))
    return run


def test_report_draws_the_curve_and_names_the_runs_it_skips(tmp_path: Path) -> None:
    small = make_run(tmp_path / "g-small", "simulate")
    big = _scale_epsilon(make_run(tmp_path / "g-big", "simulate"), 10.0)
    free = without_noise(make_run(tmp_path / "f-free", "fedavg-gan"))
    bare = make_run(tmp_path / "g-bare", "simulate")  # never evaluated
    for run, cnn in ((small, 0.2), (big, 0.3), (free, 0.8)):
        write_evaluation(run, cnn, cnn - 0.1, CONTROLS)
    out = tmp_path / "report.html"
    write_report([big, bare, free, small], out)
    page = out.read_text(encoding="utf-8")
    assert "g-bare: not drawn, no fedgs evaluate output." in page
    assert "Privacy-utility curve" in page and "control levels: from g-big" in page
    rows = _csv(tmp_path / "report_files" / "privacy_utility.csv")
    runs = [(r["kind"], r["series"], r["name"], float(r["cnn"])) for r in rows if r["series"]]
    assert runs == [
        ("non-private", FEDAVG, "f-free", 0.8),
        ("run", GSWGAN, "g-small", 0.2),
        ("run", GSWGAN, "g-big", 0.3),
    ]
    epsilons = {r["name"]: float(r["epsilon"]) for r in rows if r["series"]}
    assert epsilons["g-big"] == pytest.approx(10 * epsilons["g-small"])
    assert math.isinf(epsilons["f-free"])
    assert {r["name"]: float(r["mlp"]) for r in rows if r["kind"] == "control"} == {
        n: a for n, a in CONTROLS.items() if n != "flat grey"
    }


def test_report_flags_a_run_scored_against_other_controls(tmp_path: Path) -> None:
    first = make_run(tmp_path / "first", "simulate")
    other = make_run(tmp_path / "other", "simulate")
    write_evaluation(first, 0.2, 0.1, CONTROLS)
    write_evaluation(other, 0.3, 0.2, CONTROLS | {"lookup k=5": 0.5})
    write_report([first, other], tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "other: its evaluation&#x27;s controls differ from the drawn ones" in page


def test_score_run_rows_carry_numbers_and_draw_the_same_curve(tmp_path: Path, capsys) -> None:
    score_run = _score_run()
    run = make_run(tmp_path / "gswgan", "simulate")
    fields = score_run.privacy_fields(str(run))
    figure = headline(RunFiles.open(run))
    assert fields["epsilon_value"] == figure.epsilon and math.isfinite(fields["epsilon_value"])
    assert (fields["threat_model"], fields["strategy"]) == ("untrusted-server", "gswgan")
    assert fields["seed"] == 0  # the table tells seeds of one setting apart
    assert fields["epsilon"].startswith(f"{figure.epsilon:.4g} (untrusted-server")
    free = score_run.privacy_fields(str(without_noise(make_run(tmp_path / "f", "fedavg-gan"))))
    assert free["epsilon_value"] == math.inf and free["strategy"] == "fedavg-gan"
    # rows as --json writes and --rows reads them, with an older run row lacking the numbers
    rows = [
        {"name": "gswgan", "cnn_accuracy": 0.3, "mlp_accuracy": 0.2} | fields,
        {"name": "f", "cnn_accuracy": 0.8, "mlp_accuracy": 0.7} | free,
        {"name": "old", "cnn_accuracy": 0.5, "mlp_accuracy": 0.4, "epsilon": "12 (...)"},
        *(
            {"name": n, "cnn_accuracy": a, "mlp_accuracy": a, "epsilon": score_run.CONTROL}
            for n, a in CONTROLS.items()
        ),
    ]
    rows = json.loads(json.dumps(rows))
    assert score_run.curve(rows, tmp_path / "curve.png") == tmp_path / "curve.png"
    assert "old left out (no numeric epsilon)" in capsys.readouterr().out
    drawn = _csv(tmp_path / "curve.csv")
    assert [(r["kind"], r["series"], r["name"]) for r in drawn if r["series"]] == [
        ("non-private", FEDAVG, "f"),
        ("run", GSWGAN, "gswgan"),
    ]
    assert [r["name"] for r in drawn if r["kind"] == "control"] == [
        "real training writers",
        "lookup k=5",
        "lookup k=1",
        "public fonts",
        "untrained generator",
    ]


def test_an_earlier_figure_is_redrawn_with_new_runs(tmp_path: Path) -> None:
    """The CSV reads back as the figure's points and controls; --curve-from adds them to a new
    scoring's runs, its own controls replacing the CSV's only when it scored some."""
    score_run = _score_run()
    points = [
        CurvePoint("g", GSWGAN, "untrusted-server", 10.0, 0.2, None),
        CurvePoint("f", FEDAVG, "trusted-server", math.inf, 0.7, 0.6),
    ]
    controls = [Control(n, a, a) for n, a in CONTROLS.items() if n != "flat grey"]
    controls.sort(key=lambda c: CURVE_CONTROLS.index(c.name))  # the CSV's order
    privacy_utility(points, controls, tmp_path / "old")
    assert read_curve_csv(tmp_path / "old.csv") == (
        sorted(points, key=lambda p: p.series),
        controls,
    )
    new = {"name": "g", "cnn_accuracy": 0.4, "mlp_accuracy": 0.3, "epsilon": "1e8 (...)"}
    new |= {"epsilon_value": 1e8, "threat_model": "untrusted-server", "strategy": "gswgan"}
    score_run.curve([new], tmp_path / "new.png", tmp_path / "old.csv")
    redrawn, kept = read_curve_csv(tmp_path / "new.csv")
    assert [(p.run, p.epsilon) for p in redrawn] == [("f", math.inf), ("g", 10.0), ("g", 1e8)]
    assert kept == controls
    level = {"name": "lookup k=5", "cnn_accuracy": 0.1, "mlp_accuracy": 0.1}
    score_run.curve(
        [new, level | {"epsilon": score_run.CONTROL}], tmp_path / "n2.png", tmp_path / "old.csv"
    )
    assert read_curve_csv(tmp_path / "n2.csv")[1] == [Control("lookup k=5", 0.1, 0.1)]


def test_runs_in_one_table_column_are_one_setting_on_the_curve() -> None:
    """Seeds of a grid point live in folders of different names (e10-s0, e10-s1): with the
    table's column as their setting the curve passes through their mean, as the table's cell
    does, instead of zig-zagging between them; fails if `setting` were ignored."""
    points = [
        CurvePoint("e10-s0", GSWGAN, "untrusted-server", 9.98, 0.60, None, "10"),
        CurvePoint("e10-s1", GSWGAN, "untrusted-server", 9.98, 0.70, None, "10"),
        CurvePoint("e100-s0", GSWGAN, "untrusted-server", 99.9, 0.80, None, "100"),
    ]
    fig, ax = plt.subplots()
    _curve_panel(ax, points, [], "cnn")
    curve = next(line for line in ax.lines if line.get_marker() == "o")
    assert list(curve.get_ydata()) == pytest.approx([0.65, 0.80])
    plt.close(fig)


def test_the_report_gives_each_run_its_table_column_as_setting() -> None:
    from fedgs.evaluation.privacy_utility_table import BEYOND, Point
    from fedgs.evaluation.report import _curve_setting

    def point(epsilon: float) -> Point:
        return Point("r", GSWGAN, "gswgan", "untrusted-server", 0, epsilon, 0.5, 0.5, None)

    assert [_curve_setting(point(e)) for e in (0.9998, 2.999, 9.982, 99.94)] == [
        "1",
        "3",
        "10",
        "100",
    ]
    # far-apart epsilons beyond the grid and runs without noise keep their own names
    assert BEYOND != "" and _curve_setting(point(998.0)) == ""
    assert _curve_setting(point(math.inf)) == ""
