"""The privacy-utility grid's record (results/privacy-utility/points.json): every recorded point
is a recipe of recipes/privacy-utility/ at a seed, placed in the column that recipe targets and
under the threat model its name says; benchmarks/privacy_utility_grid.sh skips what is recorded.
Nothing is trained here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_recipes import GRID_NAME

from fedgs.evaluation.privacy_figures import series_label
from fedgs.evaluation.privacy_utility_table import (
    Point,
    column,
    read_record,
    write_record,
)

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "privacy-utility" / "points.json"
GRID = ROOT / "benchmarks" / "privacy_utility_grid.sh"
RECIPES = {p.stem for p in (ROOT / "recipes" / "privacy-utility").glob("*.toml")}
NAME = re.compile(rf"(?P<recipe>{GRID_NAME.pattern})-s(?P<seed>\d)")  # <recipe>-s<seed>
MODELS = {"secure": "secure-aggregation", "local": "untrusted-server", "trusted": "trusted-server"}


def test_every_recorded_point_is_a_recipe_at_a_seed_in_its_column() -> None:
    # fails if a point is recorded under a name no recipe has (the grid script would run it
    # again), in another epsilon column or threat model than its recipe's, or twice
    record = read_record(RECORD)
    assert record.points, "the grid's record holds no point"
    assert {c.name for c in record.levels} >= {"lookup k=5", "public fonts"}
    for point in record.points:
        name = NAME.fullmatch(point.run)
        assert name, f"{point.run}: not <recipe>-s<seed>"
        assert name["recipe"] in RECIPES, f"{point.run}: no recipe {name['recipe']}"
        assert point.seed == int(name["seed"])
        assert point.strategy == name["strategy"]
        assert point.threat_model == MODELS[name["model"]]
        assert point.series == series_label(point.strategy, point.threat_model)
        assert column(point.epsilon) == name["epsilon"], f"{point.run}: epsilon {point.epsilon}"


def _point(run: str) -> Point:
    name = NAME.fullmatch(run)
    model = MODELS[name["model"]]
    strategy = name["strategy"]
    return Point(run, series_label(strategy, model), strategy, model, 0, 1.0, 0.1, 0.1, 0.0)


def _path() -> str:
    """This interpreter's scripts folder first: the script calls ``fedgs`` and ``python``."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def _grid(record: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(GRID), str(out / "no-data"), str(out / "runs")],
        cwd=ROOT,
        env=os.environ | {"RECORD": str(record), "PATH": _path()} | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_grid_script_skips_every_recorded_point(tmp_path: Path) -> None:
    # with every recipe recorded at both seeds nothing is trained (the data folder does not
    # exist, so a run it started would fail); fails if the script and the record name points
    # differently
    record = tmp_path / "points.json"
    write_record([_point(f"{r}-s{s}") for r in sorted(RECIPES) for s in (0, 1)], [], record)
    done = _grid(record, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("in the record") == 2 * len(RECIPES)


@pytest.mark.parametrize("only", ["dp-merf-local-e1", "fedavg-gan-trusted-e3"])
def test_the_grid_script_fails_loudly_on_a_point_it_cannot_train(tmp_path: Path, only: str) -> None:
    # a missing point is trained; with no data the run fails and so does the script (set -e),
    # before any record is written
    record = tmp_path / "points.json"
    write_record([], [], record)
    before = record.read_text()
    done = _grid(record, tmp_path, ONLY=only, SEEDS="0")
    assert done.returncode != 0
    assert f"{only}-s0: training" in done.stdout and "recorded" not in done.stdout
    assert record.read_text() == before
