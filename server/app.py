"""The fedgs ServerApp: federated GS-WGAN driven from the run config.

``app`` is what ``flwr run`` loads (settings from ``--run-config``); simulation runners build
their own with :func:`build_server_app`, whose overrides win over the run config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedgs.run_config import RunConfig
from fedgs.server.run import GSWGANRun


def build_server_app(overrides: Mapping[str, Any] | None = None) -> ServerApp:
    fixed = dict(overrides or {})
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        GSWGANRun(RunConfig.from_user_config(context.run_config, fixed)).run(grid)

    return app


app = build_server_app()
