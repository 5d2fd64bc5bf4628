"""The deployed ServerApp's grid: it checks for replies every 50 ms, but only from most of the
shortest recent round trip on (checks before then cannot find a reply and load the SuperLink);
with the run's doorbell, when the SuperLink rings and otherwise every 0.25 s."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from types import SimpleNamespace

import pytest
from flwr.supercore.inflatable import inflatable_utils
from flwr.supercore.inflatable.inflatable_utils import ObjectPullError, ObjectUnavailableError

from fedgs.deploy import doorbell
from fedgs.server.deploy_app import BELL_FALLBACK, MIN_OBJECT_PULL, PromptGrid


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


@pytest.mark.skipif(not doorbell.available(), reason="abstract sockets: Linux only")
def test_with_a_bell_the_grid_checks_when_it_rings() -> None:
    name = uuid.uuid4().hex
    bell = doorbell.Doorbell(name)
    try:
        nodes = _SlowNodes(delay=4 * BELL_FALLBACK)
        grid = PromptGrid(nodes, bell=bell)  # type: ignore[arg-type]
        assert len(list(grid.send_and_receive([object()]))) == 1  # silence: the fallback
        assert 3 <= nodes.checks <= 6  # ~1 s / 0.25 s, not 1 s / 50 ms
        nodes.delay, nodes.checks = 60, 0
        grid = PromptGrid(nodes, bell=bell)  # type: ignore[arg-type]
        threading.Timer(0.5, lambda: (setattr(nodes, "delay", 0), doorbell.ring(name))).start()
        started = time.monotonic()
        assert len(list(grid.send_and_receive([object()], timeout=30))) == 1
        assert time.monotonic() - started < 20  # the ring, not the timeout, ended the wait
    finally:
        bell.close()


GIVE_UP = 30.0  # s


class _DeadUploader(_SlowNodes):
    """A node that died after its reply message reached the SuperLink but before the message's
    objects did: pulling the reply means Flower's ``pull_objects`` retrying an object that never
    becomes available (the real function, only the object fetch is fake)."""

    def pull_messages(self, message_ids: Iterable[str]) -> list[object]:
        self.checks += 1

        began = time.monotonic()

        def unavailable(object_id: str) -> bytes:
            if time.monotonic() - began > GIVE_UP:  # unbounded: fail the test, do not hang it
                raise RuntimeError(f"still pulling {object_id} after {GIVE_UP} s")
            raise ObjectUnavailableError(object_id)

        try:
            inflatable_utils.pull_objects(object_ids=["reply-content"], pull_object_fn=unavailable)
        except ObjectPullError:  # Flower's grid turns this into an error reply
            return [
                SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i))
                for i in message_ids
            ]
        return []


def test_a_reply_whose_objects_never_come_ends_by_the_timeout() -> None:
    """On Flower's own bound (7,200 s; the SuperLink drops the upload after 180 s) such a pull
    outlived the run's reply timeout: a deployed step once waited 184 s at a 60 s timeout."""
    before = inflatable_utils.pull_objects.__kwdefaults__["max_time"]
    grid = PromptGrid(_DeadUploader(delay=0))  # type: ignore[arg-type]
    started = time.monotonic()
    assert len(list(grid.send_and_receive([object()], timeout=1.5))) == 1  # the error reply
    assert time.monotonic() - started < 1.5 + MIN_OBJECT_PULL + 10  # Flower's backoff cap: 10 s
    assert inflatable_utils.pull_objects.__kwdefaults__["max_time"] == before  # put back
