"""One message to each of many nodes, a sliding window of them in flight at once.

The simulation engine runs one ClientApp per Ray actor (and a deployment one per SuperNode), so a
phase that asks every node (the warm start, the identification) keeps a window of messages in
flight: every actor stays busy until the last node, with no barrier between chunks, and each
message gets its own timeout. The caller reads what settled after each poll and may stop between
polls (a stop leaves the messages in flight to their nodes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from flwr.app import Message
from flwr.serverapp import Grid

IN_FLIGHT = 64  # messages queued in the engine at once: many more than actors, few enough to time


@dataclass(frozen=True)
class Settled:
    """What one poll settled: the replies, messages the link refused, messages timed out."""

    replies: list[Message]
    refused: int
    expired: int

    @property
    def count(self) -> int:
        return len(self.replies) + self.refused + self.expired


def ask_every_node(
    grid: Grid,
    nodes: Iterable[int],
    request: Callable[[int], Message],
    reply_timeout: float,
    in_flight: int = IN_FLIGHT,
) -> Iterator[Settled]:
    """Send ``request(node)`` to each of ``nodes``, ``in_flight`` at a time; yield what each
    poll settled until every message has a reply, was refused or timed out."""
    waiting, pending = list(nodes), {}  # message id -> when it was pushed
    pull_interval = getattr(grid, "pull_interval", 0.1)
    while waiting or pending:
        free = in_flight - len(pending)
        batch = [request(node) for node in waiting[:free]]
        del waiting[:free]
        now = time.monotonic()
        # The link refuses a message (unknown node, malformed) by leaving out or nulling its id.
        pushed = [message_id for message_id in grid.push_messages(batch) if message_id]
        pending |= dict.fromkeys(pushed, now)
        replies = list(grid.pull_messages(list(pending)))
        for reply in replies:
            pending.pop(reply.metadata.reply_to_message_id, None)
        expired = [message_id for message_id, at in pending.items() if now - at > reply_timeout]
        for message_id in expired:
            del pending[message_id]
        yield Settled(replies, len(batch) - len(pushed), len(expired))
        if not replies:
            time.sleep(pull_interval)
