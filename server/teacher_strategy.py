"""What the teacher-ensemble strategies share: m teachers per step, one query, validated votes.

Per step the strategy samples m nodes uniformly without replacement, sends each the same query,
checks every reply (an error, a malformed or implausible vote is dropped and logged), records a
privacy cost for each teacher whose votes enter the aggregate, and hands the votes to the
subclass's noisy aggregation. With no valid vote the step trains nothing and costs nothing.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from fedgs import protocol
from fedgs.privacy.teacher_events import TeacherKind
from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.server.replies import ServerScoredStrategy, StepOutcome, expected_replies

logger = logging.getLogger("fedgs.server")


class TeacherStrategy(ServerScoredStrategy):
    """Sampling, messaging, validation and cost recording; subclasses aggregate the votes."""

    message_type = ""
    name = ""

    def __init__(
        self, ledger: TeacherLedger, sampler: np.random.Generator, teachers_per_step: int
    ) -> None:
        if teachers_per_step < 1:
            raise ValueError(f"teachers per step must be >= 1, got {teachers_per_step}")
        self.ledger = ledger
        self.sampler = sampler
        self.teachers_per_step = teachers_per_step
        self._pending: set[int] = set()
        self.last_outcome: StepOutcome | None = None

    # --- what a subclass provides
    @abstractmethod
    def query(self, server_round: int) -> dict[str, ArrayRecord]:
        """This step's query (the same for every sampled teacher)."""

    @abstractmethod
    def decode(self, reply: Message) -> Any:
        """A reply's votes, or ProtocolError: the only thing taken from a reply besides metrics."""

    @abstractmethod
    def step_kind(self) -> TeacherKind:
        """What a teacher whose votes enter this step's aggregate pays."""

    @abstractmethod
    def aggregate(self, votes: list[Any], sampled: int) -> None:
        """Noisy aggregation of the valid votes and the server's training step."""

    @abstractmethod
    def skip(self) -> None:
        """No valid vote this step: drop what was pending, train nothing."""

    # --- the shared step
    def summary(self) -> None:
        logger.info("%s: %d teacher(s) per step", self.name, self.teachers_per_step)

    def choose(self, nodes: list[int]) -> list[int]:
        """m of the available nodes, uniformly without replacement."""
        if len(nodes) < self.teachers_per_step:
            raise RuntimeError(
                f"{self.teachers_per_step} teachers per step requested, "
                f"{len(nodes)} nodes available"
            )
        chosen = self.sampler.choice(len(nodes), size=self.teachers_per_step, replace=False)
        return [nodes[i] for i in chosen]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        nodes = self.choose(sorted(grid.get_node_ids()))
        self._pending = set(nodes)
        records = self.query(server_round)
        return [
            Message(
                RecordDict({**records, "config": ConfigRecord({"step": server_round})}),
                dst_node_id=node,
                message_type=self.message_type,
            )
            for node in nodes
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        outcome = StepOutcome(sampled=len(self._pending))
        votes, voters = [], []
        for reply in expected_replies(replies, self._pending, outcome):
            node = reply.metadata.src_node_id
            try:
                votes.append(self.decode(reply))
            except (protocol.ProtocolError, ValueError, TypeError) as error:
                outcome.drop(node, error)
                continue
            client = reply.content.config_records.get(protocol.CLIENT, {})
            voters.append(str(client.get(protocol.CLIENT_ID, f"node-{node}")))
            outcome.client_metrics.append(
                dict(reply.content.metric_records.get(protocol.METRICS, {}))
            )
        outcome.close(self._pending, server_round)
        self._pending = set()
        if votes:
            kind = self.step_kind()
            for client_id in voters:  # the cost is recorded before the votes are used
                self.ledger.record(client_id, kind)
            self.aggregate(votes, outcome.sampled)
        else:
            self.skip()
        outcome.answered = len(votes)
        outcome.dropped = outcome.sampled - outcome.answered
        self.last_outcome = outcome
        return None, MetricRecord({"answered": outcome.answered, "dropped": outcome.dropped})
