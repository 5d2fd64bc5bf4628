"""A GS-WGAN ServerApp whose grid loses the replies of some nodes, for the target-stop tests.

It lives in an importable module (not a test file) so Ray actors can load it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from fedgs.run_config import RunConfig
from fedgs.server.gswgan_run import GSWGANRun


class LosingGrid:
    """The real grid, except that the replies of the ``silent`` lowest node ids never arrive:
    their clients answer and pay, the server hears nothing (a timeout or a crash, as it sees
    it), so it never learns their clients and their queries stay unattributed."""

    def __init__(self, grid: Grid, silent: int) -> None:
        self._grid = grid
        self._silent = silent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(
        self, messages: Iterable[Message], timeout: float | None = None
    ) -> list[Message]:
        return self._heard(self._grid.send_and_receive(messages, timeout=timeout))

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The identification's and the warm start's replies: the same nodes are silent."""
        return self._heard(self._grid.pull_messages(message_ids))

    def _heard(self, replies: Iterable[Message]) -> list[Message]:
        silent = set(sorted(self._grid.get_node_ids())[: self._silent])
        return [r for r in replies if r.metadata.src_node_id not in silent]


def losing_server_app(config: RunConfig, silent: int) -> ServerApp:
    """The real GS-WGAN run on a grid that loses the replies of ``silent`` nodes."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        GSWGANRun(config).run(LosingGrid(grid, silent))  # type: ignore[arg-type]

    return app
