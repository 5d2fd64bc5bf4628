"""A secure GS-WGAN run through Flower's real simulation engine (Ray), the real ClientApp on
every node (issue 42): each step's cohort answers through SecAgg+ and G moves on the sum."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from flower_apps import simulate
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedgs.client.app import build_client_app
from fedgs.run_config import RunConfig
from fedgs.server.gswgan_run import GSWGANRun

SETTINGS = {
    "num-clients": 6,
    "batch-size": 8,
    "critic-steps": 1,
    "generator-width": 4,
    "critic-width": 4,
    "warm-start-steps": 0,
    "eval-every": 0,
    "min-nodes": 6,
    "steps": 3,
    "clients-per-step": 5,
    "secure-aggregation": True,
    "secagg-min-survivors": 4,
}


def _server_app(config: RunConfig, kept: dict) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run = GSWGANRun(config)
        kept["before"] = [p.detach().clone() for p in run.trainer.generator.parameters()]
        run.run(grid)
        kept["after"] = [p.detach().clone() for p in run.trainer.generator.parameters()]

    return app


@pytest.mark.slow
def test_a_secure_run_through_the_real_engine(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(SETTINGS, {"run-dir": str(tmp_path)})
    kept: dict = {}
    simulate(_server_app(config, kept), build_client_app(config.to_user_config()), nodes=6)
    with (tmp_path / "metrics.csv").open() as rows:
        steps = list(csv.DictReader(rows))
    assert [int(r["step"]) for r in steps] == [1, 2, 3]
    for row in steps:
        assert (row["sampled"], row["answered"], row["dropped"]) == ("5", "5", "0")
        assert float(row["epsilon_secure_aggregation"]) > 0
    assert any(not torch.equal(a, b) for a, b in zip(kept["before"], kept["after"], strict=True))
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["headline"] == "secure-aggregation"
    secure = report["secure_aggregation"]
    assert (secure["threat_model"], secure["accountant"], secure["neighbouring"]) == (
        "secure-aggregation",
        "autodp-rdp",
        "replace-one",
    )
    assert secure["epsilon"] == float(steps[-1]["epsilon_secure_aggregation"])
    assert report["secure_aggregation_ddg_rdp"]["accountant"] == "ddg-rdp"
    assert report["untrusted_server"]["local_noise_only"] is True
    assert report["queries"]["total"] == 15  # five paid per step, all bound to their clients
