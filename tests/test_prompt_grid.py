"""The deployed ServerApp's grid: it checks for replies every 50 ms, but only from most of the
shortest recent round trip on (checks before then cannot find a reply and load the SuperLink)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from types import SimpleNamespace

from fedgs.server.deploy_app import PromptGrid


class _SlowNodes:
    """The two grid calls ``send_and_receive`` makes, for one message whose reply takes
    ``delay`` seconds; counts the checks for replies."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.checks = 0
        self._sent: dict[str, float] = {}

    def push_messages(self, messages: Iterable[object]) -> list[str]:
        ids = [f"m{len(self._sent) + k}" for k, _ in enumerate(messages)]
        self._sent |= dict.fromkeys(ids, time.monotonic())
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[object]:
        self.checks += 1
        now = time.monotonic()
        return [
            SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i))
            for i in message_ids
            if now - self._sent[i] >= self.delay
        ]


def test_checks_begin_after_most_of_the_shortest_round_trip() -> None:
    nodes = _SlowNodes(delay=0.5)
    grid = PromptGrid(nodes)  # type: ignore[arg-type]
    assert len(list(grid.send_and_receive([object()]))) == 1
    first = nodes.checks  # from the start: ~0.5 s / 50 ms
    nodes.checks = 0
    assert len(list(grid.send_and_receive([object()]))) == 1
    assert first >= 5
    assert nodes.checks <= first // 2  # quiet for 0.8 x 0.5 s, then a few checks


def test_a_timeout_still_ends_the_wait_and_is_not_a_round_trip() -> None:
    nodes = _SlowNodes(delay=60)
    grid = PromptGrid(nodes)  # type: ignore[arg-type]
    started = time.monotonic()
    assert list(grid.send_and_receive([object()], timeout=0.2)) == []
    assert time.monotonic() - started < 30
    nodes.delay = 0.3
    nodes.checks = 0
    assert len(list(grid.send_and_receive([object()]))) == 1
    assert nodes.checks >= 3  # no quiet period learnt from the timed-out round
