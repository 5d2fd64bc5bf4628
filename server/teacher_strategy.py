"""What the teacher-ensemble strategies share: m teachers per step, one query, validated votes.

Per step the strategy samples m nodes uniformly without replacement (every node online when fewer
than m are: a node died or left; none online, it waits up to ``node_wait`` s for one), records a
privacy cost for each of them as it sends them the same query (conservative: a teacher whose
reply is lost or dropped is charged too, so the server's ledger never falls below a client's
own), checks every reply (an error, a malformed or implausible vote, another client's name or a
policy other than asked is dropped and logged) and hands the valid votes to the subclass's noisy
aggregation. Nothing else is read from a reply. With no valid vote the step trains nothing.

A step with fewer teachers than m keeps its privacy meaning: a teacher's cost
(``teacher_events``) is its own vote's sensitivity against noise of a fixed scale on the vote
sum, whatever the number of teachers, and the ledger charges only the teachers asked (no
amplification by sampling is claimed). What the count changes is the signal against the same
noise (utility), and DataLens' threshold, beta times the teachers asked: a public count.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterable
from typing import Any

import numpy as np
from dp_accounting import dp_event
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.protocols import common
from fedgs.server.online import online_nodes, warn_if_short
from fedgs.server.replies import (
    NodeIdentities,
    ServerScoredStrategy,
    StepOutcome,
    check_policy_used,
    expected_replies,
)

logger = logging.getLogger("fedgs.server")


class TeacherStrategy(ServerScoredStrategy):
    """Sampling, messaging, validation and cost recording; subclasses aggregate the votes."""

    message_type = ""
    name = ""
    strategy = ""  # the run-config name a reply's policy must match
    node_wait = 600.0  # s a step waits for a node while none is online (a run: reply-timeout)

    def __init__(
        self,
        ledger: TeacherLedger,
        sampler: np.random.Generator,
        teachers_per_step: int,
        identities: NodeIdentities | None = None,
    ) -> None:
        if teachers_per_step < 1:
            raise ValueError(f"teachers per step must be >= 1, got {teachers_per_step}")
        self.ledger = ledger
        self.sampler = sampler
        self.teachers_per_step = teachers_per_step
        self.identities = identities or NodeIdentities()
        self._pending: set[int] = set()
        self.last_outcome: StepOutcome | None = None

    # --- what a subclass provides
    @abstractmethod
    def query(self, server_round: int) -> dict[str, ArrayRecord]:
        """This step's query (the same for every sampled teacher)."""

    @abstractmethod
    def decode(self, reply: Message) -> Any:
        """A reply's votes, or ProtocolError: the only thing taken from a reply."""

    @abstractmethod
    def step_event(self) -> dp_event.DpEvent:
        """What a teacher whose votes enter this step's aggregate pays."""

    @abstractmethod
    def aggregate(self, votes: list[Any], sampled: int) -> dict[str, float | None]:
        """Noisy aggregation of the valid votes and the server's training step; returns the
        step's diagnostics (metrics columns)."""

    @abstractmethod
    def skip(self) -> dict[str, float | None]:
        """No valid vote this step: drop what was pending, train nothing."""

    # --- the shared step
    def summary(self) -> None:
        logger.info("%s: %d teacher(s) per step", self.name, self.teachers_per_step)

    def sample_nodes(self, grid: Grid, server_round: int = 0) -> list[int]:
        """The step's teachers among the nodes online now (``online_nodes``: waits when none
        is)."""
        nodes = online_nodes(grid, self.node_wait)
        warn_if_short(server_round, len(nodes), self.teachers_per_step, "teachers-per-step")
        return self.choose(nodes)

    def choose(self, nodes: list[int]) -> list[int]:
        """m of the available nodes, uniformly without replacement; every one of them when fewer
        than m are online (each is charged as it is sent, and the step goes on)."""
        m = min(self.teachers_per_step, len(nodes))
        chosen = self.sampler.choice(len(nodes), size=m, replace=False)
        return [nodes[i] for i in chosen]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        nodes = self.sample_nodes(grid, server_round)
        self._pending = set(nodes)
        step = self.step_event()
        for node in nodes:  # paid when asked, before the query leaves
            client = self.identities.client_of(node)
            if client is None:
                self.ledger.record_unattributed(self.identities.label(node), step)
            else:
                self.ledger.record(client, step)
        records = self.query(server_round)
        return [
            Message(
                common.query_content(records, server_round),
                dst_node_id=node,
                message_type=self.message_type,
            )
            for node in nodes
        ]

    def _validate(self, reply: Message) -> Any:
        """The reply's votes; binds its node to its client (moving the node's earlier charges)."""
        node = reply.metadata.src_node_id
        self.ledger.attribute(self.identities.label(node), self.identities.learn(reply))
        check_policy_used(reply, {"strategy": self.strategy})
        return self.decode(reply)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        outcome = StepOutcome(sampled=len(self._pending))
        votes = []
        for reply in expected_replies(replies, self._pending, outcome):
            try:
                votes.append(self._validate(reply))
            except (common.ProtocolError, ValueError, TypeError) as error:
                outcome.drop(reply.metadata.src_node_id, error)
        outcome.close(self._pending, server_round)
        self._pending = set()
        diagnostics = self.aggregate(votes, outcome.sampled) if votes else self.skip()
        outcome.answered = len(votes)
        outcome.dropped = outcome.sampled - outcome.answered
        self.last_outcome = outcome
        return None, outcome.metrics(**diagnostics)
