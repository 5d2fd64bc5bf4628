"""``fedgs debug-scenario`` end to end on a few embedded writers: real Flower runs, tiny models."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fedgs.cli import main

TINY = [
    "--num-clients", "8", "--holdout-fraction", "0.25",
    "--steps", "2", "--warm-start-steps", "0", "--critic-steps", "1", "--batch-size", "8",
    "--generator-width", "4", "--critic-width", "4", "--eval-every", "0",
    "--detect-samples", "40", "--ray-cpus", "1", "--threads", "1",
    "--grouping-epsilon", "0",  # the exact grouping; the private one: test_private_grouping.py
]  # fmt: skip


@pytest.mark.slow
def test_scenario_runs_end_to_end_and_reports(tmp_path: Path, capsys) -> None:
    out = tmp_path / "scenario"
    assert main(["debug-scenario", *TINY, "--out", str(out)]) == 0
    assert "inverted share of samples" in capsys.readouterr().out

    with (out / "writers.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    population = [r for r in rows if r["role"] == "population"]
    assert len(rows) == 8 and len(population) == 6
    assert sum(int(r["bug"]) for r in population) == 3  # exactly half of the population

    summary = json.loads((out / "summary.json").read_text())
    table = summary["split"]["confusion"]
    for group in ("suspected", "normal"):
        members = [r for r in population if r["group"] == group]
        assert table[group]["total"] == len(members) > 0
        assert table[group]["with bug"] == sum(int(r["bug"]) for r in members)
        # the group's dataset holds exactly its writers, and the run trained on it
        run = json.loads((out / f"gan-{group}" / "config.json").read_text())
        assert run["dataset"] == "saved" and run["num_nodes"] == len(members)
        privacy = summary["privacy"][group]
        assert privacy["steps"] == 2
        assert privacy["epsilons"]["untrusted_server"]["epsilon"] > 0
    # a clean classifier cannot read inverted digits: the suspected group holds the buggy ones
    assert table["suspected"]["with bug"] == table["suspected"]["total"]
    assert table["normal"]["with bug"] == 0
    detection = summary["detection"]
    assert detection["sanity"] == {"clean": 0.0, "inverted": 1.0}
    assert detection["real_group"] == {"suspected": 1.0, "normal": 0.0}
    assert set(detection["generated"]) == {"suspected", "normal"}
    assert set(detection["profile"]) == set(detection["legibility"]) == {"suspected", "normal"}
    for profile in (*detection["profile"].values(), *detection["untrained"].values()):
        assert abs(profile["inverted"] + profile["normal"] + profile["undecided"] - 1) < 1e-9
    assert detection["margin_rule"] in {"met", "half", "not met"}
    assert (out / "samples_side_by_side.png").stat().st_size > 0
    report = (out / "REPORT.md").read_text()
    assert f"**{detection['margin_rule']}**" in report
    assert "| suspected |" in report and "untrusted server" in report
    # the grouping by per-writer accuracy is not privacy-accounted, and both files say so
    assert "Not privacy-accounted" in summary["split"]["privacy"]
    assert summary["split"]["privacy"] in report

    # a second run never mixes its outputs into a finished one
    assert main(["debug-scenario", *TINY, "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().out
