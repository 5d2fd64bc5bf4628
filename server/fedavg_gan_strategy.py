"""The Fed-Avg GAN strategy: DP-FedAvg on the server's critic, then generator steps.

Per round it Poisson-samples nodes (each with q = m / K), sends each D's weights and fresh fake
batches, clips every client's delta to S, sums, adds N(0, (z S)^2), divides by m (fixed
denominator, ``fedgs.privacy.dp_fedavg``), applies it to D with the server learning rate and
trains G for n_G steps. A failed or malformed reply, or one naming another
client or a policy other than asked, is dropped and logged; the round's privacy cost is the same
either way (one noised release) and is recorded when the round's messages are sent. The round's
diagnostics (received delta norms, the fraction clipped) are computed by the server from the
deltas it received: under this trusted-server model the server sees them unnoised anyway.

``SecureFedAvgGANStrategy`` is DP-FedAvg with distributed noise, which needs no trusted server:
each round asks a fixed cohort of m nodes drawn uniformly without replacement (the server knows
the cohort, so no sampling amplification is claimed); each client clips its delta to S, encodes
it with its share of the distributed discrete Gaussian (the sum carries std z S, DP-FedAvg's
central noise) and answers through SecAgg+ (``SecureSteps``). Each client of the cohort is
charged one secure step (add/remove-one) when the round is sent; the server learns only the
sum, which it decodes, divides by the survivors and applies as the round's mean delta. No
per-client diagnostics: the server never sees a delta.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedgs.privacy import FedAvgLedger, PrivacyLedger
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.dp_fedavg import clip_delta, noisy_mean
from fedgs.privacy.threat_models import ADD_REMOVE
from fedgs.protocols import common, fedavg_gan
from fedgs.run_config import SecAggSettings
from fedgs.server.online import online_nodes, warn_if_short
from fedgs.server.replies import (
    ChargingStrategy,
    Exchange,
    NodeIdentities,
    ServerScoredStrategy,
    StepOutcome,
)
from fedgs.server.secure_exchange import SecureSteps
from fedgs.training.fedavg_gan import FedAvgGANTrainer, critic_weights

logger = logging.getLogger("fedgs.server")


class FedAvgGANStrategy(ServerScoredStrategy):
    """Fed-Avg GAN in the shape of a Flower strategy (configure / aggregate per round)."""

    trainer: FedAvgGANTrainer
    ledger: FedAvgLedger

    def __init__(
        self,
        trainer: FedAvgGANTrainer,
        ledger: FedAvgLedger,
        sampler: np.random.Generator,
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
        node_wait: float = 600.0,
    ) -> None:
        super().__init__(trainer, ledger, sampler, wire_dtype, identities, node_wait)
        self._pending: set[int] = set()
        self._population = 0
        # the critic's parameter shapes: what a reply's delta must have
        self._shapes = {n: tuple(p.shape) for n, p in trainer.critic.named_parameters()}

    @property
    def population(self) -> int:
        """K: the nodes available at the last sampling."""
        return self._population

    def summary(self) -> None:
        c = self.trainer.config
        logger.info(
            "Fed-Avg GAN: %d expected clients per round, n_D=%d, n_G=%d, S=%.3g, z=%.3g (%s)",
            c.clients_per_round,
            c.critic_steps,
            c.generator_steps,
            c.clip_norm,
            c.noise_multiplier,
            c.models,
        )

    def sample_nodes(self, grid: Grid) -> list[int]:
        """Each node independently with probability q = m / K (Poisson sampling), K the nodes
        online now (fewer than m: q = 1, every one; none: ``online_nodes`` waits for one)."""
        nodes = online_nodes(grid, self.node_wait)
        self._population = len(nodes)
        q = min(1.0, self.trainer.config.clients_per_round / len(nodes))
        return [n for n, u in zip(nodes, self.sampler.random(len(nodes)), strict=True) if u < q]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """D's weights and fresh fake batches for each Poisson-sampled node."""
        nodes = self.sample_nodes(grid)
        self._pending = set(nodes)
        # one noised release per round, answered or not: paid when the round is sent
        self.ledger.record_round(self.trainer.config.clients_per_round, self._population)
        critic = fedavg_gan.encode_arrays(critic_weights(self.trainer.critic), self.wire_dtype)
        messages = []
        for node in nodes:
            images, labels = self.trainer.propose()
            fakes = common.encode_fakes(images, labels, self.wire_dtype)
            content = common.query_content(
                {fedavg_gan.CRITIC: critic, common.FAKES: fakes}, server_round
            )
            messages.append(Message(content, dst_node_id=node, message_type=fedavg_gan.QUERY))
        return messages

    def asked(self) -> dict[str, float | int | str]:
        return {"strategy": "fedavg-gan", "batch-size": self.trainer.config.batch_size}

    def decode(self, reply: Message) -> tuple[list, float]:
        """The reply's delta clipped to S, and its norm as received (before the clip)."""
        record = common.required(reply.content, fedavg_gan.DELTA, "reply")
        delta = fedavg_gan.decode_arrays(record, self._shapes, "delta")
        return clip_delta([delta[name] for name in self._shapes], self.trainer.config.clip_norm)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        c = self.trainer.config
        outcome = StepOutcome(sampled=len(self._pending))
        clipped = []
        for _, (delta, norm) in self.valid_replies(replies, self._pending, outcome):
            clipped.append(delta)
            outcome.diagnostics.append(
                {"received-delta-norm": norm, "received-delta-clipped": float(norm > c.clip_norm)}
            )
        outcome.close(self._pending, server_round, unit="round")
        self._pending = set()
        expected = min(c.clients_per_round, self._population)
        shapes = list(self._shapes.values())
        mean = noisy_mean(clipped, shapes, c.clip_norm, c.noise_multiplier, expected)
        self.trainer.apply(dict(zip(self._shapes, mean, strict=True)))
        return self.finish(
            outcome,
            len(clipped),
            received_delta_norm_mean=outcome.mean("received-delta-norm"),
            received_delta_clipped_fraction=outcome.mean("received-delta-clipped"),
        )


class SecureFedAvgGANStrategy(ChargingStrategy, FedAvgGANStrategy):
    """Fed-Avg GAN under secure aggregation: the server sees only each cohort's noisy sum."""

    ledger: PrivacyLedger  # type: ignore[assignment]  # per client, as GS-WGAN's

    def __init__(
        self,
        trainer: FedAvgGANTrainer,
        ledger: PrivacyLedger,
        sampler: np.random.Generator,
        secure: tuple[SecAggSettings, DistributedNoiseParams],
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
        node_wait: float = 600.0,
    ) -> None:
        super().__init__(trainer, ledger, sampler, wire_dtype, identities, node_wait)
        self._steps = SecureSteps(*secure)

    def summary(self) -> None:
        super().summary()
        settings = self._steps.settings
        logger.info(
            "secure aggregation: a fixed cohort of %d, m_min=%d, t=%d, %d-bit sums of %d values",
            self.trainer.config.clients_per_round,
            settings.min_survivors,
            settings.threshold,
            settings.bits,
            self._steps.noise.padded_dimension,
        )

    def sample_nodes(self, grid: Grid, server_round: int = 0) -> list[int]:
        """m of the nodes online now, uniformly without replacement (fewer online: all)."""
        nodes = online_nodes(grid, self.node_wait)
        self._population = len(nodes)
        m = self.trainer.config.clients_per_round
        warn_if_short(server_round, len(nodes), m, "fedavg-clients-per-round")
        picked = self.sampler.choice(len(nodes), size=min(m, len(nodes)), replace=False)
        return [nodes[i] for i in picked]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """D's weights and fresh fake batches for each node of the cohort, made secure; each
        node's client pays one secure step (add/remove-one) as its query is sent."""
        cohort = self._steps.start(server_round, self.sample_nodes(grid, server_round))
        self._pending = set(cohort)
        if not cohort:
            return []
        self.charge(cohort, step_event(self._steps.noise, ADD_REMOVE))
        critic = fedavg_gan.encode_arrays(critic_weights(self.trainer.critic), self.wire_dtype)
        contents = {}
        for node in cohort:
            images, labels = self.trainer.propose()
            fakes = common.encode_fakes(images, labels, self.wire_dtype)
            contents[node] = common.query_content(
                {fedavg_gan.CRITIC: critic, common.FAKES: fakes}, server_round
            )
        return self._steps.queries(contents, fedavg_gan.QUERY)

    def exchange(self, grid: Grid, messages: list[Message], timeout: float) -> Exchange:
        return self._steps.exchange(grid, messages, timeout, self.check_reply)

    def asked(self) -> dict[str, float | int | str]:
        """As plain Fed-Avg GAN, and at least z on the sum (the clients' shares carry it)."""
        return super().asked() | {"noise-multiplier": self.trainer.config.noise_multiplier}

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The decoded sum over the survivors applied as the round's mean delta (nothing when
        the round aborted or asked no one: D and G unchanged)."""
        outcome, released, total = self._steps.released()
        self._pending = set()
        answered = 0
        if released is not None and total is not None:
            answered = len(released.survivors)
            ends = np.cumsum([int(np.prod(shape)) for shape in self._shapes.values()])[:-1]
            parts = np.split(total / answered, ends)
            mean = {
                name: part.reshape(shape).astype(np.float32)
                for (name, shape), part in zip(self._shapes.items(), parts, strict=True)
            }
            self.trainer.apply(mean)
        self.ledger.record_outcomes(
            answered, outcome.sampled - answered - outcome.no_reply, outcome.no_reply
        )
        return self.finish(outcome, answered)
