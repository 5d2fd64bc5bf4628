"""Snapshots: ``snapshot-every N`` keeps the generator every N steps as a run directory of its own,
at the epsilon paid by then, so one run scores every epsilon it passes through. Through Flower's
real simulation engine.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from flower_apps import simulate
from privacy_boundary_server_apps import SMALL, gswgan_server_app

from fedgs.client.app import build_client_app
from fedgs.evaluation.generator_loader import load_generator
from fedgs.evaluation.run_files import RunFiles
from fedgs.run_config import RunConfig


def test_a_negative_snapshot_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="snapshot-every must be >= 0"):
        RunConfig.from_user_config(SMALL, {"snapshot-every": -1})


def _epsilon(run_dir: Path) -> float:
    return RunFiles.open(run_dir).privacy["untrusted_server"]["epsilon"]


@pytest.mark.slow
def test_every_snapshot_is_a_scorable_run_at_the_epsilon_of_its_step(tmp_path: Path) -> None:
    # 4 clients, 2 per step: each step is half a round, so epsilon grows from step 2 to step 4
    config = RunConfig.from_user_config(
        SMALL,
        {
            "run-dir": str(tmp_path),
            "clients-per-step": 2,
            "steps": 5,
            "checkpoint-every": 100,
            "snapshot-every": 2,
            "client-sampling": "least-queried",
        },
    )
    simulate(gswgan_server_app(config), build_client_app(config.to_user_config()), nodes=4)

    folders = sorted((tmp_path / "snapshots").iterdir())
    assert [f.name for f in folders] == ["step_000002", "step_000004"]  # 5 is not a multiple
    epsilons = []
    for folder, step in zip(folders, (2, 4), strict=True):
        run = RunFiles.open(folder)
        assert run.privacy["steps"] == step
        with (folder / "metrics.csv").open(newline="") as handle:
            assert [int(row["step"]) for row in csv.DictReader(handle)] == list(range(1, step + 1))
        assert run.config == json.loads((tmp_path / "config.json").read_text())  # the run's
        assert (folder / "samples" / f"step_{step:06d}.png").stat().st_size > 0
        epsilons.append(_epsilon(folder))
    # least-queried: every client answered once by step 2, twice by step 4
    assert 0 < epsilons[0] < epsilons[1] <= _epsilon(tmp_path)

    # each snapshot holds the generator of its step, not the final one
    weights = [load_generator(p).model.state_dict() for p in (*folders, tmp_path)]
    for earlier, later in zip(weights, weights[1:], strict=False):
        assert any(not torch.equal(earlier[k], later[k]) for k in earlier)
