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
from typing import Any, Protocol

import numpy as np
from dp_accounting import dp_event
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.protocols import common
from fedgs.server.online import online_nodes, warn_if_short
from fedgs.server.replies import ChargingStrategy, NodeIdentities, StepOutcome

logger = logging.getLogger("fedgs.server")


class TeacherSettings(Protocol):
    """What the template reads of a strategy's settings."""

    @property
    def teachers_per_step(self) -> int: ...


class TeacherStrategy(ChargingStrategy):
    """Sampling, messaging, validation and cost recording; subclasses aggregate the votes."""

    message_type = ""
    name = ""
    strategy = ""  # the run-config name a reply's policy must match
    ledger: TeacherLedger

    def __init__(
        self,
        trainer: Any,
        ledger: TeacherLedger,
        sampler: np.random.Generator,
        settings: TeacherSettings,
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
    ) -> None:
        """``node_wait`` (s a step waits while no node is online) is set by the run:
        reply-timeout."""
        teachers_per_step = settings.teachers_per_step
        if teachers_per_step < 1:
            raise ValueError(f"teachers per step must be >= 1, got {teachers_per_step}")
        super().__init__(trainer, ledger, sampler, wire_dtype, identities)
        self.settings = settings
        self.teachers_per_step = teachers_per_step
        self._pending: set[int] = set()
        self.step_event()  # validates the noise before the first step

    # --- what a subclass provides
    @abstractmethod
    def query(self, server_round: int) -> dict[str, ArrayRecord]:
        """This step's query (the same for every sampled teacher)."""

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
        self.charge(nodes, self.step_event())  # paid when asked, before the query leaves
        records = self.query(server_round)
        return [
            Message(
                common.query_content(records, server_round),
                dst_node_id=node,
                message_type=self.message_type,
            )
            for node in nodes
        ]

    def asked(self) -> dict[str, float | int | str]:
        return {"strategy": self.strategy}

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        outcome = StepOutcome(sampled=len(self._pending))
        votes = [vote for _, vote in self.valid_replies(replies, self._pending, outcome)]
        outcome.close(self._pending, server_round)
        self._pending = set()
        diagnostics = self.aggregate(votes, outcome.sampled) if votes else self.skip()
        return self.finish(outcome, len(votes), **diagnostics)
