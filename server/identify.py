"""The identification: before the first paid query, each node names the client it holds.

A run with a target epsilon and a per-client ledger stops before any step that could take a
client past the target, and a node whose client it has not learned may hold anyone: its lost
reply would count for every client (``fedgs.server.target_stop``). Strategies whose warm start
binds every node need nothing more; the others (Fed-Avg GAN under secure aggregation, a run
resumed after its warm start) ask each unbound node once. The reply names the client and carries
nothing computed from its data (``fedgs.client.gate``), so it costs no privacy.
"""

from __future__ import annotations

import logging

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from tqdm.auto import tqdm

from fedgs import stopping
from fedgs.algorithms import IDENTIFY
from fedgs.protocols import common
from fedgs.server.every_node import ask_every_node
from fedgs.server.replies import NodeIdentities

logger = logging.getLogger("fedgs.server")


def _request(node: int) -> Message:
    return Message(RecordDict(), dst_node_id=node, message_type=IDENTIFY)


def identify_clients(grid: Grid, identities: NodeIdentities, reply_timeout: float) -> int:
    """Ask every node not yet bound in ``identities`` which client it holds; the number left
    unbound (no reply, an error, a reply naming another client than its node's earlier one):
    their queries count as unknown nodes' in the target stop, which is safe."""
    nodes = [node for node in sorted(grid.get_node_ids()) if identities.client_of(node) is None]
    unbound, first_error = 0, ""
    with tqdm(total=len(nodes), desc="identification", unit="node", disable=not nodes) as bar:
        for settled in ask_every_node(grid, nodes, _request, reply_timeout):
            stopping.check("stopped in the identification")
            errors = [f"no reply in {reply_timeout:g} s"] * settled.expired
            errors += ["refused by the link"] * settled.refused
            for reply in settled.replies:
                if reply.has_error():
                    errors.append(reply.error.reason)
                    continue
                try:
                    identities.learn(reply)
                except common.ProtocolError as error:
                    errors.append(str(error))
            unbound += len(errors)
            first_error = first_error or next(iter(errors), "")
            if settled.count:
                bar.update(settled.count)
    if unbound:
        logger.warning(
            "identification: %d of %d nodes unbound (first: %s)", unbound, len(nodes), first_error
        )
    return unbound
