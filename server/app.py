"""The fedgs ServerApp: federated GS-WGAN or Fed-Avg GAN (run-config ``strategy``).

``app`` is what ``flwr run`` loads (settings from ``--run-config``); simulation runners build
their own with :func:`build_server_app`, whose overrides win over the run config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedgs.run_config import RunConfig
from fedgs.server.fedavg_run import FedAvgGANRun
from fedgs.server.run import GSWGANRun

RUNS = {"gswgan": GSWGANRun, "fedavg-gan": FedAvgGANRun}


def build_server_app(overrides: Mapping[str, Any] | None = None) -> ServerApp:
    fixed = dict(overrides or {})
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        config = RunConfig.from_user_config(context.run_config, fixed)
        RUNS[config.strategy](config).run(grid)

    return app


app = build_server_app()
