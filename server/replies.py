"""What every fedgs strategy does the same way with a step's replies.

A step asks some nodes; a reply counts only if its node was asked this step and it carries
content. Everything else (an unexpected sender, an error reply, a node that never answered) is
dropped with a logged reason, and the step goes on with the others. Which replies cost privacy,
and how the kept ones are decoded and aggregated, stays with each strategy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

logger = logging.getLogger("fedgs.server")


@dataclass
class StepOutcome:
    """What one generator step achieved, for the metrics CSV and the progress bar."""

    sampled: int
    answered: int = 0
    dropped: int = 0
    client_metrics: list[dict[str, float]] = field(default_factory=list)
    drop_reasons: list[str] = field(default_factory=list)

    def mean(self, key: str) -> float | None:
        values = [m[key] for m in self.client_metrics if key in m]
        return float(np.mean(values)) if values else None

    def drop(self, node: int, reason: object) -> None:
        self.drop_reasons.append(f"node {node}: {reason}")

    def close(self, unanswered: Iterable[int], server_round: int, unit: str = "step") -> None:
        """Add the nodes that never answered to the drops, and log every drop of the step."""
        self.drop_reasons.extend(f"node {node}: no reply" for node in sorted(unanswered))
        for reason in self.drop_reasons:
            logger.warning("%s %d: dropped reply from %s", unit, server_round, reason)


def expected_replies(
    replies: Iterable[Message], pending: set[int], outcome: StepOutcome
) -> Iterator[Message]:
    """The replies of nodes asked this step that carry content; the others go to ``outcome``.

    Each answering node leaves ``pending``, so what remains there at the end never answered
    (a second reply from the same node is unexpected).
    """
    for reply in replies:
        node = reply.metadata.src_node_id
        if node not in pending:
            outcome.drop(node, "unexpected reply")
            continue
        pending.discard(node)
        if reply.has_error():
            outcome.drop(node, reply.error.reason)
            continue
        yield reply


class ServerScoredStrategy(Strategy):
    """A strategy whose clients hold no evaluation job: samples are scored on the server."""

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return None
