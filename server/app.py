"""The fedgs ServerApp: GS-WGAN, Fed-Avg GAN, DataLens or PATE-GAN (run-config ``strategy``).

``app`` is what ``flwr run`` loads (settings from ``--run-config``); simulation runners build
their own with :func:`build_server_app`, whose overrides win over the run config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedgs.algorithms import algorithm
from fedgs.run_config import RunConfig


def build_server_app(
    overrides: Mapping[str, Any] | None = None, grid_poll_seconds: float | None = None
) -> ServerApp:
    """``grid_poll_seconds``: how often the simulation's in-memory grid pulls replies."""
    fixed = dict(overrides or {})
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        if grid_poll_seconds is not None and hasattr(grid, "pull_interval"):
            grid.pull_interval = grid_poll_seconds  # the simulation's in-memory grid only
        config = RunConfig.from_user_config(context.run_config, fixed)
        algorithm(config.strategy).run_class()(config).run(grid)

    return app


app = build_server_app()
