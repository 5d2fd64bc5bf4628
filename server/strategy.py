"""The GS-WGAN strategy: the generator stays on the server, clients answer with sanitized rows.

Per generator step it samples m nodes uniformly, sends each a fresh fake batch (plus the extra
batches for the client's critic steps), validates the replies, records in the privacy ledger
exactly the queries that were answered, averages the sanitized gradients and takes an Adam step
on G (ALGORITHMS.md s.1). A reply that failed or does not pass validation is dropped and logged;
the step goes on with the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from fedgs import protocol
from fedgs.privacy import PrivacyLedger
from fedgs.server.replies import ServerScoredStrategy, StepOutcome, expected_replies
from fedgs.training.generator import GeneratorTrainer

logger = logging.getLogger("fedgs.server")


class GSWGANStrategy(ServerScoredStrategy):
    """Federated GS-WGAN in the shape of a Flower strategy (configure / aggregate per step)."""

    def __init__(
        self,
        trainer: GeneratorTrainer,
        ledger: PrivacyLedger,
        sampler: np.random.Generator,
        clients_per_step: int = 1,
        wire_dtype: str = "float32",
    ) -> None:
        self.trainer = trainer
        self.ledger = ledger
        self.sampler = sampler
        self.clients_per_step = clients_per_step
        self.wire_dtype = wire_dtype
        self._slots: dict[int, int] = {}  # node id -> index of its query in this step
        self._population = 0
        self.last_outcome: StepOutcome | None = None

    def summary(self) -> None:
        config = self.trainer.config
        logger.info(
            "GS-WGAN: %d client(s) per step, B=%d, n_dis=%d, sigma=%.3g, C=%.3g",
            self.clients_per_step,
            config.batch_size,
            config.critic_steps,
            config.noise_multiplier,
            config.clip_norm,
        )

    def sample_nodes(self, grid: Grid) -> list[int]:
        nodes = sorted(grid.get_node_ids())
        self._population = len(nodes)
        return self.choose(nodes)

    def choose(self, nodes: list[int]) -> list[int]:
        """m of the available nodes, uniformly without replacement."""
        if len(nodes) < self.clients_per_step:
            raise RuntimeError(
                f"{self.clients_per_step} clients per step requested, {len(nodes)} nodes available"
            )
        chosen = self.sampler.choice(len(nodes), size=self.clients_per_step, replace=False)
        return [nodes[i] for i in chosen]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Fake batches for m uniformly sampled nodes. ``arrays`` is unused: G never leaves."""
        nodes = self.sample_nodes(grid)
        queries = self.trainer.propose(len(nodes))
        self._slots = {node: k for k, node in enumerate(nodes)}
        messages = []
        for node, query in zip(nodes, queries, strict=True):
            fakes = protocol.encode_fakes(query.images, query.labels, self.wire_dtype)
            content = RecordDict(
                {
                    protocol.FAKES: ArrayRecord({k: Array(v) for k, v in fakes.items()}),
                    "config": ConfigRecord({"step": server_round}),
                }
            )
            messages.append(Message(content, dst_node_id=node, message_type=protocol.QUERY))
        return messages

    def _record_cost(self, reply: Message, metrics: dict[str, float]) -> None:
        """A reply with content means the client released a sanitized batch: it paid."""
        config = self.trainer.config
        client = reply.content.config_records.get(protocol.CLIENT, {})
        client_id = str(client.get(protocol.CLIENT_ID, f"node-{reply.metadata.src_node_id}"))
        sigma = float(metrics.get("noise-multiplier", config.noise_multiplier))
        batch = int(metrics.get("batch-size", config.batch_size))
        self.ledger.record_query(client_id, sigma, batch)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        config = self.trainer.config
        outcome = StepOutcome(sampled=len(self._slots))
        gradients: list[torch.Tensor | None] = [None] * len(self._slots)
        bound = protocol.plausible_magnitude(config.clip_norm, config.noise_multiplier)
        unanswered = set(self._slots)
        for reply in expected_replies(replies, unanswered, outcome):
            node = reply.metadata.src_node_id
            metrics = dict(reply.content.metric_records.get(protocol.METRICS, {}))
            self._record_cost(reply, metrics)
            try:
                record = reply.content.array_records.get(protocol.SANITIZED)
                if record is None:
                    raise protocol.ProtocolError(f"reply has no '{protocol.SANITIZED}' ArrayRecord")
                arrays = {k: a.numpy() for k, a in record.items()}
                gradients[self._slots[node]] = protocol.decode_gradient(
                    arrays, config.batch_size, bound
                )
            except (protocol.ProtocolError, ValueError, TypeError) as error:
                outcome.drop(node, error)
                continue
            outcome.client_metrics.append(metrics)
        outcome.close(unanswered, server_round)
        self._slots = {}
        outcome.answered = self.trainer.apply(gradients) // config.batch_size
        outcome.dropped = outcome.sampled - outcome.answered
        self.ledger.record_step(
            outcome.sampled, self._population, config.noise_multiplier, config.batch_size
        )
        self.last_outcome = outcome
        return None, MetricRecord({"answered": outcome.answered, "dropped": outcome.dropped})
