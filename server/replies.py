"""What every fedgs strategy does the same way with a step's replies.

A step asks some nodes; a reply counts only if its node was asked this step and it carries
content. Everything else (an unexpected sender, an error reply, a node that never answered) is
dropped with a logged reason, and the step goes on with the others. A reply's claims about
itself are never used for accounting (every query was paid for when it was sent): a reply is
only checked against them, and dropped when it names a different client than its node did
before, or says it used a weaker policy than the server asked for (less noise, another batch
size or strategy). How the kept ones are decoded and aggregated stays with each strategy.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from dp_accounting import dp_event
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedgs.comm import message_bytes
from fedgs.protocols import common

if TYPE_CHECKING:
    from fedgs.privacy.client_ledger import ClientLedger

logger = logging.getLogger("fedgs.server")


@dataclass
class StepOutcome:
    """What one generator step achieved, for the metrics CSV and the progress bar.

    ``diagnostics`` are computed by the server from the payloads it received (post-processing
    of what was released), never taken from a reply's own statistics.
    """

    sampled: int
    answered: int = 0
    dropped: int = 0
    no_reply: int = 0
    diagnostics: list[dict[str, float]] = field(default_factory=list)
    drop_reasons: list[str] = field(default_factory=list)

    def metrics(self, **diagnostics: float | None) -> MetricRecord:
        """The step's counts and the strategy's ``diagnostics`` (None ones left out): what
        ``aggregate_train`` returns and the run's metrics row is made of."""
        counts = {
            "sampled": self.sampled,
            "answered": self.answered,
            "dropped": self.dropped,
            "no_reply": self.no_reply,
        }
        return MetricRecord(counts | {k: v for k, v in diagnostics.items() if v is not None})

    def mean(self, key: str) -> float | None:
        values = [m[key] for m in self.diagnostics if key in m]
        return float(np.mean(values)) if values else None

    def drop(self, node: int, reason: object) -> None:
        self.drop_reasons.append(f"node {node}: {reason}")

    def close(self, unanswered: Iterable[int], server_round: int, unit: str = "step") -> None:
        """Add the nodes that never answered to the drops, and log every drop of the step.

        A reply that arrives after the timeout is never read, but its query was paid when sent.
        """
        missing = sorted(unanswered)
        self.no_reply = len(missing)
        self.drop_reasons.extend(f"node {node}: no reply (paid when sent)" for node in missing)
        for reason in self.drop_reasons:
            logger.warning("%s %d: dropped reply from %s", unit, server_round, reason)


@dataclass
class Exchange:
    """What one step's round trips brought back, and the bytes they moved both ways."""

    replies: list[Message]
    bytes_down: int
    bytes_up: int


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


class NodeIdentities:
    """Which client each node said it holds, bound at its first reply (warm start or query).

    The binding only names the server's ledger entries: a query sent to a node not yet bound is
    recorded as unattributed and moved to the client when the node's first reply names it. A
    later reply naming another client is dropped (its query stays paid under the bound name).
    """

    def __init__(self) -> None:
        self._clients: dict[int, str] = {}

    def client_of(self, node: int) -> str | None:
        return self._clients.get(node)

    @staticmethod
    def label(node: int) -> str:
        """The ledger's name for an unbound node."""
        return f"node-{node}"

    def learn(self, reply: Message) -> str:
        """Bind the reply's node to the client it names; ProtocolError if it names another."""
        node = reply.metadata.src_node_id
        claimed = common.claimed_client(reply.content) or self.label(node)
        bound = self._clients.setdefault(node, claimed)
        if claimed != bound:
            raise common.ProtocolError(
                f"reply names client {claimed!r}, node {node} holds client {bound!r}"
            )
        return bound


def check_policy_used(reply: Message, asked: dict[str, float | int | str]) -> None:
    """ProtocolError when the reply says it applied a weaker policy than the server asked for.

    ``asked``: "strategy", "noise-multiplier" (the least acceptable), "batch-size" (exact). A
    reply without the record passes (clients from before it existed): its payload is validated
    on its own, and its query was paid for at the asked values either way.
    """
    used = reply.content.config_records.get(common.POLICY_USED)
    if used is None:
        return
    if "strategy" in asked and "strategy" in used and used["strategy"] != asked["strategy"]:
        raise common.ProtocolError(
            f"reply used strategy {used['strategy']!r}, asked {asked['strategy']!r}"
        )
    if "noise-multiplier" in asked and "noise-multiplier" in used:
        if not float(used["noise-multiplier"]) >= float(asked["noise-multiplier"]):
            raise common.ProtocolError(
                f"reply used noise multiplier {used['noise-multiplier']}, "
                f"asked for at least {asked['noise-multiplier']}"
            )
    if "batch-size" in asked and "batch-size" in used:
        if int(used["batch-size"]) != int(asked["batch-size"]):
            raise common.ProtocolError(
                f"reply used batch size {used['batch-size']}, asked {asked['batch-size']}"
            )


class ServerScoredStrategy(Strategy):
    """A fedgs strategy: its clients hold no evaluation job (samples are scored on the server),
    and every reply passes the same checks (``valid_replies``) before its payload is used."""

    def __init__(
        self,
        trainer: Any,
        ledger: Any,
        sampler: np.random.Generator,
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
        node_wait: float = 600.0,
    ) -> None:
        self.trainer = trainer
        self.ledger = ledger
        self.sampler = sampler
        self.wire_dtype = wire_dtype
        self.identities = identities or NodeIdentities()
        self.node_wait = node_wait  # s a step waits for a node while none is online
        self.last_outcome: StepOutcome | None = None

    @abstractmethod
    def asked(self) -> dict[str, float | int | str]:
        """The policy every query of the step asks for (``check_policy_used``)."""

    @abstractmethod
    def decode(self, reply: Message) -> Any:
        """A reply's payload, or ProtocolError: the only thing taken from a reply."""

    def learn(self, reply: Message) -> None:
        """Bind the reply's node to the client it names (ProtocolError if it names another)."""
        self.identities.learn(reply)

    def check_reply(self, reply: Message) -> None:
        """The reply names its node's client and the policy asked (ProtocolError otherwise):
        the checks every reply passes, plain or a secure query's."""
        self.learn(reply)
        check_policy_used(reply, self.asked())

    def exchange(self, grid: Grid, messages: list[Message], timeout: float) -> Exchange:
        """Send a step's queries and gather the replies: one round trip by default; a strategy
        whose step needs more (secure aggregation) runs them here, every byte counted."""
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        return Exchange(
            replies,
            sum(message_bytes(m) for m in messages),
            sum(message_bytes(r) for r in replies),
        )

    def valid_replies(
        self, replies: Iterable[Message], pending: set[int], outcome: StepOutcome
    ) -> Iterator[tuple[int, Any]]:
        """(node, payload) of each expected reply that names its node's client and the policy
        asked and decodes; any other is dropped into ``outcome`` with its reason."""
        for reply in expected_replies(replies, pending, outcome):
            node = reply.metadata.src_node_id
            try:
                self.check_reply(reply)
                payload = self.decode(reply)
            except (common.ProtocolError, ValueError, TypeError) as error:
                outcome.drop(node, error)
                continue
            yield node, payload

    def finish(
        self, outcome: StepOutcome, answered: int, **diagnostics: float | None
    ) -> tuple[None, MetricRecord]:
        """``aggregate_train``'s result: the step's counts (what was not answered was dropped)
        and diagnostics; the outcome is kept as ``last_outcome``."""
        outcome.answered = answered
        outcome.dropped = outcome.sampled - answered
        self.last_outcome = outcome
        return None, outcome.metrics(**diagnostics)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return None


class ChargingStrategy(ServerScoredStrategy):
    """A strategy whose ledger charges each client it queries (``ClientLedger``).

    A query is paid when sent: to the node's client when a reply has named it, else to the
    node's label (counting for every client), moved to the client at the node's first reply.
    """

    ledger: ClientLedger

    def charge(self, nodes: Iterable[int], event: dp_event.DpEvent) -> None:
        """One ``event`` to each node's client (unattributed while its client is unknown)."""
        for node in nodes:
            client = self.identities.client_of(node)
            if client is None:
                self.ledger.record_unattributed(self.identities.label(node), event)
            else:
                self.ledger.record(client, event)

    def learn(self, reply: Message) -> None:
        """Bind the reply's node to its client and move the node's earlier charges to it."""
        node = reply.metadata.src_node_id
        self.ledger.attribute(self.identities.label(node), self.identities.learn(reply))
