"""`fedgs centralized`: the single-process runner writes the same outputs as the Flower one."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from fedgs.cli import main


def test_centralized_run_writes_metrics_and_privacy(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "centralized",
            "--num-clients",
            "4",
            "--steps",
            "3",
            "--warm-start-steps",
            "1",
            "--batch-size",
            "8",
            "--critic-steps",
            "2",
            "--generator-width",
            "4",
            "--critic-width",
            "4",
            "--eval-every",
            "0",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert str(out / "privacy.json") in capsys.readouterr().out
    with (out / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    assert all(float(r["epsilon_untrusted"]) > 0 for r in rows)
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["queries"]["total"] == 3 and privacy["steps"] == 3
    assert privacy["untrusted_server"]["epsilon"] == float(rows[-1]["epsilon_untrusted"])


def test_centralized_rejects_bad_settings(tmp_path: Path, capsys) -> None:
    code = main(
        [
            "centralized",
            "--num-clients",
            "2",
            "--clients-per-step",
            "3",
            "--eval-every",
            "0",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 2
    assert "exceeds clients" in capsys.readouterr().out
