"""The GS-WGAN strategy: the generator stays on the server, clients answer with sanitized rows.

Per generator step it samples m nodes (uniformly, or the least-queried ones), records in the
privacy ledger one paid query per node *as it sends it* (at the sigma the run asks for and the
batch it sends; the run saves the ledger before the messages leave), validates the replies,
averages the sanitized gradients and takes an Adam step on G. A reply that
failed, does not pass validation, or claims a weaker policy or another client is dropped and
logged (its query stays paid); the step goes on with the others. Nothing a reply says about
itself enters the ledger or the metrics: the step's diagnostics are computed from the sanitized
rows received.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedgs.privacy import PrivacyLedger
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.events import gswgan_query_event
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.protocols import common, gswgan
from fedgs.run_config import SecAggSettings
from fedgs.server.online import online_nodes, warn_if_short
from fedgs.server.replies import (
    ChargingStrategy,
    Exchange,
    NodeIdentities,
    StepOutcome,
)
from fedgs.server.secure_exchange import SecureSteps
from fedgs.training.generator import GeneratorTrainer

logger = logging.getLogger("fedgs.server")


class GSWGANStrategy(ChargingStrategy):
    """Federated GS-WGAN in the shape of a Flower strategy (configure / aggregate per step)."""

    trainer: GeneratorTrainer
    ledger: PrivacyLedger

    def __init__(
        self,
        trainer: GeneratorTrainer,
        ledger: PrivacyLedger,
        sampler: np.random.Generator,
        clients_per_step: int = 1,
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
        least_queried: bool = False,
        node_wait: float = 600.0,
        secure: tuple[SecAggSettings, DistributedNoiseParams] | None = None,
    ) -> None:
        super().__init__(trainer, ledger, sampler, wire_dtype, identities, node_wait)
        self.clients_per_step = clients_per_step
        self.least_queried = least_queried
        self.secure = secure  # the SecAgg+ settings and the calibrated noise, when secure
        self._slots: dict[int, int] = {}  # node id -> index of its query in this step
        self._population = 0
        self._steps = SecureSteps(*secure) if secure is not None else None

    def summary(self) -> None:
        config = self.trainer.config
        logger.info(
            "GS-WGAN: %d client(s) per step, B=%d, n_dis=%d on %d fake batch(es), sigma=%.3g, "
            "C=%.3g",
            self.clients_per_step,
            config.batch_size,
            config.critic_steps,
            config.fakes_per_query,
            config.noise_multiplier,
            config.clip_norm,
        )

    def sample_nodes(self, grid: Grid, server_round: int = 0) -> list[int]:
        """The step's nodes among those online now (``online_nodes``: waits when none is)."""
        nodes = online_nodes(grid, self.node_wait)
        self._population = len(nodes)
        warn_if_short(server_round, len(nodes), self.clients_per_step, "clients-per-step")
        return self.choose(nodes)

    def choose(self, nodes: list[int]) -> list[int]:
        """m of the available nodes: uniformly without replacement, or (``least_queried``) the
        m whose clients paid the fewest queries so far, ties in random order (the ledger is the
        server's own record of what it sent: public under the untrusted-server model). With
        fewer than m nodes online (one died or left) the step asks every one: it is charged as
        sent, at its own size, and the run goes on."""
        m = min(self.clients_per_step, len(nodes))
        if not self.least_queried:
            return [nodes[i] for i in self.sampler.choice(len(nodes), size=m, replace=False)]
        paid = self._paid(nodes)
        order = np.lexsort((self.sampler.random(len(nodes)), paid))  # fewest first, ties random
        return [nodes[i] for i in order[:m]]

    def least_queried_worst_case(self, nodes: list[int]) -> list[int]:
        """Nodes whose one more query each bounds what the next least-queried step can charge:
        the rule asks m of the nodes at or below the m-th fewest paid queries (any of a tie),
        so every such node whose client is known, and m of those whose client is not yet (a
        step asks m nodes at most)."""
        m = self.clients_per_step
        if not nodes:
            return []
        paid = self._paid(nodes)
        boundary = sorted(paid)[min(m, len(nodes)) - 1]
        candidates = [node for node, count in zip(nodes, paid, strict=True) if count <= boundary]
        unknown = [node for node in candidates if self.identities.client_of(node) is None]
        beyond_m = set(unknown[m:])  # a set: this runs every step, over every node
        return [node for node in candidates if node not in beyond_m]

    def _paid(self, nodes: list[int]) -> list[int]:
        return [
            self.ledger.paid(self.identities.client_of(n), self.identities.label(n)) for n in nodes
        ]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Fake batches for the m sampled nodes. ``arrays`` is unused: G never leaves. With
        client codes on, a node's batches carry the code of its client's name once a reply named
        it (of its node label until then: one query per node under least-queried sampling)."""
        nodes = self.sample_nodes(grid, server_round)
        if self.secure is not None:
            return self._secure_queries(server_round, nodes)
        names = [self.identities.client_of(n) or self.identities.label(n) for n in nodes]
        queries = self.trainer.propose(len(nodes), names)
        self._slots = {node: k for k, node in enumerate(nodes)}
        self.record_sent(nodes)
        messages = []
        for node, query in zip(nodes, queries, strict=True):
            fakes = common.encode_fakes(query.images, query.labels, self.wire_dtype)
            content = common.query_content({common.FAKES: fakes}, server_round)
            messages.append(Message(content, dst_node_id=node, message_type=gswgan.QUERY))
        return messages

    def _secure_queries(self, server_round: int, nodes: list[int]) -> list[Message]:
        """One proposal for the whole cohort, each node's query made secure (``SecureSteps``);
        each client pays the secure step's event as its query is sent. A cohort SecAgg+ cannot
        run with asks no one and says why."""
        self._slots = {}
        cohort = self._steps.start(server_round, nodes)
        if not cohort:
            return []
        (query,) = self.trainer.propose(1)
        self._slots = {node: 0 for node in cohort}
        self.charge(cohort, step_event(self._steps.noise, REPLACE_ONE))
        contents = {}
        for node in cohort:
            fakes = common.encode_fakes(query.images, query.labels, self.wire_dtype)
            contents[node] = common.query_content({common.FAKES: fakes}, server_round)
        return self._steps.queries(contents, gswgan.QUERY)

    def exchange(self, grid: Grid, messages: list[Message], timeout: float) -> Exchange:
        """The usual round trip; with secure aggregation, the four of ``SecureExchange``."""
        if self.secure is None:
            return super().exchange(grid, messages, timeout)
        return self._steps.exchange(grid, messages, timeout, self.check_reply)

    def asked(self) -> dict[str, float | int | str]:
        """The policy every query of this run asks for (what the ledger charges)."""
        config = self.trainer.config
        return {
            "strategy": "gswgan",
            "noise-multiplier": config.noise_multiplier,
            "batch-size": config.batch_size,
        }

    def record_sent(self, nodes: list[int]) -> None:
        """Every query is paid when sent, at the asked sigma and the batch sent, and the step
        counts for the trusted-sampler figure: a reply lost to a timeout or a crash stays paid."""
        config = self.trainer.config
        self.charge(nodes, gswgan_query_event(config.noise_multiplier, config.batch_size))
        self.ledger.record_step(
            len(nodes), self._population, config.noise_multiplier, config.batch_size
        )

    def decode(self, reply: Message) -> torch.Tensor:
        config = self.trainer.config
        bound = gswgan.plausible_magnitude(config.clip_norm, config.noise_multiplier)
        record = common.required(reply.content, gswgan.SANITIZED, "reply")
        return gswgan.decode_gradient(record, config.batch_size, bound)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self.secure is not None:
            return self._aggregate_secure(server_round)
        outcome = StepOutcome(sampled=len(self._slots))
        gradients: list[torch.Tensor | None] = [None] * len(self._slots)
        unanswered = set(self._slots)
        for node, rows in self.valid_replies(replies, unanswered, outcome):
            gradients[self._slots[node]] = rows
            outcome.diagnostics.append({"received-row-norm": float(rows.norm(dim=1).mean())})
        outcome.close(unanswered, server_round)
        self._slots = {}
        answered = self.trainer.apply(gradients) // self.trainer.config.batch_size
        dropped = outcome.sampled - answered
        self.ledger.record_outcomes(answered, dropped - outcome.no_reply, outcome.no_reply)
        return self.finish(
            outcome, answered, received_row_norm_mean=outcome.mean("received-row-norm")
        )

    def _aggregate_secure(self, server_round: int) -> tuple[None, MetricRecord]:
        """G's step on the survivors' mean gradient: the decoded sum over their count, through
        the trainer's apply (nothing when the step aborted or asked no one)."""
        outcome, released, total = self._steps.released()
        self._slots = {}
        answered = 0
        if released is not None and total is not None:
            mean = torch.from_numpy(total / len(released.survivors)).float()
            self.trainer.apply([mean.view(self.trainer.config.batch_size, common.PIXELS)])
            answered = len(released.survivors)
        elif released is not None:
            self.trainer.apply([None])  # aborted: G unchanged, the proposal let go
        dropped = outcome.sampled - answered
        self.ledger.record_outcomes(answered, dropped - outcome.no_reply, outcome.no_reply)
        return self.finish(outcome, answered)
