"""One step's secure aggregation over a Flower grid: the query round trip, then SecAgg+'s three.

The strategy's secure queries carry the SecAgg+ setup (``fedgs.protocols.secagg``); each reply
that passes the strategy's checks (its node's client, the policy used) gives its node's
advertised keys. Then share keys, masked input and unmask travel as ``train.secagg`` messages to
the nodes still alive, each round trip bounded by the reply timeout: exactly four per step, so a
step never waits longer than four timeouts. A node that does not answer a stage, answers with
an error, or answers something malformed drops out with a logged reason, and SecAgg+ takes its
masks off. Too few survivors (below m_min) abort the step: no sum is released, and every query
stays paid (it was charged when sent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from fedgs.comm import message_bytes
from fedgs.protocols import common, secagg
from fedgs.secagg import SecAggAbort, ServerSession
from fedgs.secagg.server import DONE
from fedgs.server.replies import Exchange, StepOutcome, expected_replies

logger = logging.getLogger("fedgs.server")


@dataclass
class SecureSum:
    """What a secure step released: the sum mod 2^k of the survivors' inputs (None when the
    step aborted) and the survivors."""

    total: np.ndarray | None
    survivors: list[int]
    aborted: str = ""


class SecureExchange:
    """Drive one ``ServerSession`` through a step's four round trips.

    ``check``: the strategy's checks of a query reply (its client, the policy it used), raising
    ProtocolError, ValueError or TypeError to drop it; ``outcome`` gathers every drop's reason.
    """

    def __init__(
        self,
        session: ServerSession,
        check: Callable[[Message], None],
        outcome: StepOutcome,
        step: int,
    ) -> None:
        self.session = session
        self.check = check
        self.outcome = outcome
        self.step = step
        self.silent: set[int] = set()  # nodes that did not answer a round trip
        self._logged: set[int] = set()  # nodes whose SecAgg+ rejection is in ``outcome``

    def run(self, grid: Grid, queries: list[Message], timeout: float) -> tuple[Exchange, SecureSum]:
        """The query replies and the bytes of all round trips; the sum, or why there is none."""
        down = sum(message_bytes(m) for m in queries)
        replies = list(grid.send_and_receive(queries, timeout=timeout))
        up = sum(message_bytes(r) for r in replies)
        try:
            self._receive(self._keys(replies, {m.metadata.dst_node_id for m in queries}))
            while self.session.stage != DONE:
                messages = [
                    Message(
                        secagg.stage_content(message), dst_node_id=node, message_type=secagg.SECAGG
                    )
                    for node, message in self.session.messages().items()
                ]
                down += sum(message_bytes(m) for m in messages)
                answers = list(grid.send_and_receive(messages, timeout=timeout))
                up += sum(message_bytes(r) for r in answers)
                self._receive(
                    self._stage_replies(answers, {m.metadata.dst_node_id for m in messages})
                )
        except SecAggAbort as abort:
            for node in self.session.alive:
                self.outcome.drop(node, f"secure aggregation aborted, nothing released: {abort}")
            self.outcome.close(self.silent, self.step)
            return Exchange(replies, down, up), SecureSum(None, [], str(abort))
        total, survivors = self.session.result()
        # a survivor silent at the unmask still has its input in the sum: no drop
        for node in sorted(self.silent & set(survivors)):
            logger.warning(
                "step %d: node %d sent no unmask reply (its input is in the sum)", self.step, node
            )
        self.outcome.close(self.silent - set(survivors), self.step)
        return Exchange(replies, down, up), SecureSum(total, survivors)

    def _keys(self, replies: Iterable[Message], asked: set[int]) -> dict[int, object]:
        """Each query reply's advertised keys, once it passed the strategy's checks."""
        keys: dict[int, object] = {}
        pending = set(asked)
        for reply in expected_replies(replies, pending, self.outcome):
            node = reply.metadata.src_node_id
            try:
                self.check(reply)
                keys[node] = secagg.read_stage(reply.content)
            except (common.ProtocolError, ValueError, TypeError) as error:
                self.outcome.drop(node, error)
        self.silent |= pending
        return keys

    def _stage_replies(self, replies: Iterable[Message], asked: set[int]) -> dict[int, object]:
        """Each stage reply's message; an error reply or a malformed one drops its node."""
        read: dict[int, object] = {}
        pending = set(asked)
        for reply in expected_replies(replies, pending, self.outcome):
            node = reply.metadata.src_node_id
            try:
                read[node] = secagg.read_stage(reply.content)
            except (common.ProtocolError, ValueError, TypeError) as error:
                self.outcome.drop(node, f"secure aggregation {self.session.stage}: {error}")
        self.silent |= pending
        return read

    def _receive(self, replies: dict[int, object]) -> None:
        """Hand the stage's replies to SecAgg+ and log the ones it rejected."""
        try:
            self.session.receive(replies)
        finally:
            for node, reason in self.session.rejected.items():
                if node not in self._logged:
                    self._logged.add(node)
                    self.outcome.drop(node, f"secure aggregation rejected {reason}")
