"""Which nodes a step can ask: those online now, with a bounded wait when none is.

Every strategy draws a step's nodes from the ones the grid counts online at that moment; a node
that died or left stops being asked once the SuperLink (or the simulation) drops it, and a step
with fewer nodes than it wants asks them all (each query charged when sent) instead of failing.
"""

from __future__ import annotations

import logging
import time

from flwr.serverapp import Grid

logger = logging.getLogger("fedgs.server")
NODE_POLL = 0.5  # s between checks for a node while none is online


def online_nodes(grid: Grid, timeout: float) -> list[int]:
    """The nodes online now; when none is (every node died or left, and a restart may bring
    one back), after a wait of at most ``timeout`` s for one. Fails naming the wait."""
    deadline = time.monotonic() + timeout
    while not (nodes := sorted(grid.get_node_ids())):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no node online for {timeout:g} s (reply-timeout)")
        time.sleep(NODE_POLL)
    return nodes


def warn_if_short(server_round: int, online: int, wanted: int, option: str) -> None:
    """Say that a step asks fewer nodes than ``option`` = ``wanted`` (all ``online`` ones)."""
    if online < wanted:
        logger.warning(
            "step %d: %d node(s) online, fewer than %s = %d: asking %d",
            server_round,
            online,
            option,
            wanted,
            online,
        )
