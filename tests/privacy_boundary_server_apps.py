"""Flower apps for the server side of the privacy-boundary tests: clients whose replies make false
claims about themselves, and a server whose run is killed between sending a step and saving.

They live in an importable module (not a test file) so Ray actors can load them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flower_apps import rewriting_client_app
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.server.gswgan_run import GSWGANRun

# a GS-WGAN run small enough for a test: 4 embedded clients, tiny networks, one warm-start step
SMALL = {
    "num-clients": 4,
    "batch-size": 8,
    "critic-steps": 1,
    "generator-width": 4,
    "critic-width": 4,
    "warm-start-steps": 1,
    "eval-every": 0,
    "min-nodes": 4,
}

# partition id -> what its GS-WGAN replies claim about themselves (partition 0 is honest)
CLAIMS: dict[int, dict[str, Any]] = {
    1: {"noise-multiplier": 0.0},
    2: {"batch-size": 1},
    3: {common.CLIENT_ID: "someone-else"},
}


def _claiming(
    reply: Message, request: Message, claim: Mapping[str, Any], config: RunConfig
) -> Message:
    """The honest reply with the claim written into every place a server might read one: the
    policy-used record, a metrics record (what servers read before) and the client record."""
    content = RecordDict(dict(reply.content.items()))
    numbers = {k: v for k, v in claim.items() if k != common.CLIENT_ID}
    honest_metrics = reply.content.metric_records.get(common.METRICS, {})
    content[common.METRICS] = MetricRecord(dict(honest_metrics) | numbers)
    used = {
        "strategy": "gswgan",
        "noise-multiplier": config.noise_multiplier,
        "clip-norm": config.clip_norm,
        "batch-size": config.batch_size,
        "delta": config.delta,
    }
    content[common.POLICY_USED] = ConfigRecord(used | numbers)
    if common.CLIENT_ID in claim:
        identity = dict(reply.content[common.CLIENT]) | {common.CLIENT_ID: claim[common.CLIENT_ID]}
        content[common.CLIENT] = ConfigRecord(identity)
    return Message(content, reply_to=request)


def claiming_client_app(overrides: Mapping[str, Any]) -> ClientApp:
    """The real ClientApp; partitions in CLAIMS answer GS-WGAN queries with false claims."""
    config = RunConfig.from_user_config(overrides)

    def rewrite(reply: Message, request: Message, partition_id: int) -> Message:
        claim = CLAIMS.get(partition_id)
        return reply if claim is None else _claiming(reply, request, claim, config)

    return rewriting_client_app(overrides, rewrite)


class KilledBetweenSendAndSave(Exception):
    """Stands in for SIGKILL: the replies are in, nothing after them ran."""


class GridKilledAfterSend:
    """The real grid, except that its ``kill_at``-th send_and_receive delivers the step's
    queries and collects the replies (clients train, pay and persist their ledgers) and then
    the server process "dies" before it can do anything with them."""

    def __init__(self, grid: Grid, kill_at: int) -> None:
        self._grid = grid
        self._kill_at = kill_at
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def send_and_receive(self, messages: Iterable[Message], timeout: float | None = None):
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        self._calls += 1
        if self._calls == self._kill_at:
            raise KilledBetweenSendAndSave
        return replies


def gswgan_server_app(config: RunConfig, kill_at: int | None = None) -> ServerApp:
    """The real GS-WGAN run; with ``kill_at``, killed after that step's replies arrived."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run = GSWGANRun(config)
        if kill_at is None:
            run.run(grid)
            return
        try:
            run.run(GridKilledAfterSend(grid, kill_at))
        except KilledBetweenSendAndSave:
            pass

    return app
