"""The ServerApp a deployment runs: fedgs' own, on a grid that notices replies promptly.

Flower's ``send_and_receive`` sleeps 3 s between checks for replies; a GS-WGAN step waits for
one reply, so that sleep alone was ~1.5 s of every step on average. ``server_app`` runs
``fedgs.server.app:app`` unchanged on :class:`PromptGrid`, which checks every 50 ms (one small
HTTPS request to the SuperLink), and its reply objects are pulled without Flower's 1 s first
backoff (fedgs.deploy.flower_waits). It begins checking only after most of the shortest recent
round trip: earlier checks cannot find a reply and each costs the SuperLink CPU that the nodes'
critics, on the same cores in a local deployment, are waiting for. In a local deployment the
SuperLink rings the run's bell when a reply arrives (fedgs.deploy.doorbell): the grid then
checks at once, and otherwise every 0.25 s. The ClientApp needs no wrapper: see
:mod:`fedgs.deploy.superexec` for how its processes start warm.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Iterable

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from fedgs.deploy.doorbell import RUN_BELL_ENV, Doorbell, run_bell
from fedgs.deploy.flower_waits import bound_object_pulls, shorten_object_pulls

POLL_INTERVAL = 0.05
BELL_FALLBACK = 0.25  # s between checks when the SuperLink rings for replies
QUIET_SHARE = 0.8  # of the shortest recent round trip, before the first check for replies
RECENT_ROUND_TRIPS = 5
MIN_OBJECT_PULL = 1.0  # s a reply's objects may take to arrive, even past the deadline


class PromptGrid(Grid):
    """Flower's grid, except that ``send_and_receive`` polls every ``interval`` seconds (with
    the run's ``bell``: when it rings, else every ``BELL_FALLBACK`` s), from ``QUIET_SHARE`` of
    the shortest of the last round trips on."""

    def __init__(
        self, grid: Grid, interval: float = POLL_INTERVAL, bell: Doorbell | None = None
    ) -> None:
        self._grid = grid
        self._interval = interval
        self._round_trips: deque[float] = deque(maxlen=RECENT_ROUND_TRIPS)
        self._bell = bell

    def set_run(self, run):  # type: ignore[no-untyped-def]
        self._grid.set_run(run)

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return self._grid.run

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[no-untyped-def]
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self._grid.get_node_ids()

    def get_nodes(self):  # type: ignore[no-untyped-def]
        return self._grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        started = time.monotonic()
        waiting = set(self.push_messages(messages))
        deadline = math.inf if timeout is None else started + timeout
        quiet = QUIET_SHARE * min(self._round_trips, default=0.0)
        time.sleep(max(0.0, min(started + quiet, deadline) - time.monotonic()))
        replies: list[Message] = []
        while waiting:
            received = self._pull_within(waiting, deadline)
            replies += received
            waiting -= {m.metadata.reply_to_message_id for m in received}
            if not waiting or time.monotonic() >= deadline:
                break
            if self._bell is None:
                time.sleep(self._interval)
            else:  # a reply rings it; silence: check again after the fallback
                self._bell.wait(min(BELL_FALLBACK, max(0.0, deadline - time.monotonic())))
        if not waiting:
            self._round_trips.append(time.monotonic() - started)
        return replies

    def _pull_within(self, waiting: set[str], deadline: float) -> list[Message]:
        """The replies ready now; a reply whose objects never come (its node died while
        uploading them) ends as Flower's error reply by the deadline, not 180 s later."""
        if not math.isfinite(deadline):
            return list(self.pull_messages(waiting))
        previous = bound_object_pulls(max(MIN_OBJECT_PULL, deadline - time.monotonic()))
        try:
            return list(self.pull_messages(waiting))
        finally:
            bound_object_pulls(previous)


server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    from fedgs.server.app import app

    shorten_object_pulls()  # replies' objects are fetched 20 ms, not 1 s, after a miss
    prefix = os.environ.get(RUN_BELL_ENV)
    bell = Doorbell(run_bell(prefix, grid.run.run_id)) if prefix else None
    try:
        app(PromptGrid(grid, bell=bell), context)
    finally:
        if bell is not None:
            bell.close()
