"""The DP-MERF strategy: ask every writer once for its noised mean embedding, then fit G.

Each round asks up to clients-per-step nodes among those online that were never asked (nor
their writer charged: a resumed run never asks a writer twice), charges each one release
(``mean_embedding_event``) as the query is sent, checks every reply (``valid_replies``: sender,
claimed writer, policy used, then the exact array) and adds the release to the trainer's sum.
At the run's last round the server fits G to the mean of the releases received
(post-processing). Nothing a reply says about itself enters the ledger or the metrics.

Under secure aggregation (``SecureDpMerfStrategy``) each round is one cohort of writers never
asked, as even in size as the writers left allow (2,824 writers at clients-per-step 100: 29
cohorts of 97-98), each charged the secure step's event (replace-one) when sent; the server sees
only the cohort's sum, noised by the survivors' shares of a distributed discrete Gaussian
(``SecureSteps``), and adds it to the trainer's sum with the survivors' count.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.events import mean_embedding_event
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.protocols import common, dp_merf
from fedgs.run_config import SecAggSettings
from fedgs.server.online import online_nodes
from fedgs.server.replies import (
    ChargingStrategy,
    Exchange,
    NodeIdentities,
    StepOutcome,
)
from fedgs.server.secure_exchange import SecureSteps
from fedgs.training.dp_merf import MerfTrainer

logger = logging.getLogger("fedgs.server")


class DpMerfStrategy(ChargingStrategy):
    """One-shot private mean embeddings in the shape of a Flower strategy."""

    trainer: MerfTrainer
    ledger: ReleaseLedger

    def __init__(
        self,
        trainer: MerfTrainer,
        ledger: ReleaseLedger,
        sampler: np.random.Generator,
        clients_per_step: int,
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
        node_wait: float = 600.0,
        on_release: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        super().__init__(trainer, ledger, sampler, wire_dtype, identities, node_wait)
        self.clients_per_step = clients_per_step
        self.on_release = on_release  # the run saves the released embedding before G is fitted
        self.final = False  # set by the run before its last round: fit G after its replies
        self._asked: set[int] = set()  # nodes asked by this process (the ledger: any run)
        self._pending: set[int] = set()  # this round's nodes, until their replies are in

    def summary(self) -> None:
        c = self.trainer.config
        logger.info(
            "DP-MERF: %d writer(s) per round, D=%d, bandwidth=%.3g, C=%.3g, sigma=%.3g",
            self.clients_per_step,
            c.features,
            c.bandwidth,
            c.clip_norm,
            c.noise_multiplier,
        )

    def asked(self) -> dict[str, float | int | str]:
        return {"strategy": "dp-merf", "noise-multiplier": self.trainer.config.noise_multiplier}

    def unasked(self, nodes: list[int]) -> list[int]:
        """Nodes never asked whose writer (or node label) has paid nothing."""
        return [
            n
            for n in nodes
            if n not in self._asked
            and self.ledger.paid(self.identities.client_of(n), self.identities.label(n)) == 0
        ]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The round's queries, each charged one release as it is sent."""
        candidates = self.unasked(online_nodes(grid, self.node_wait))
        m = min(self.clients_per_step, len(candidates))
        nodes = [candidates[i] for i in sorted(self.sampler.choice(len(candidates), m, False))]
        self._asked.update(nodes)
        self._pending = set(nodes)
        self.charge(nodes, mean_embedding_event(self.trainer.config.noise_multiplier))
        return [
            Message(
                dp_merf.encode_query(self.trainer.spec, server_round),
                dst_node_id=node,
                message_type=dp_merf.QUERY,
            )
            for node in nodes
        ]

    def decode(self, reply: Message) -> np.ndarray:
        c, trainer = self.trainer.config, self.trainer
        record = common.required(reply.content, dp_merf.EMBEDDING, "reply")
        shape = (trainer.spec.dimension, trainer.num_classes)
        bound = dp_merf.plausible_magnitude(c.clip_norm, c.noise_multiplier)
        return dp_merf.decode_embedding(record, shape, bound)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        outcome = StepOutcome(sampled=len(self._pending))
        unanswered = set(self._pending)
        norms = []
        for _, released in self.valid_replies(replies, unanswered, outcome):
            self.trainer.add(released)
            norms.append(float(np.linalg.norm(released)))
        outcome.close(unanswered, server_round)
        self._pending = set()
        answered = len(norms)
        dropped = outcome.sampled - answered - outcome.no_reply
        self.ledger.record_outcomes(answered, dropped, outcome.no_reply)
        loss = self._fit() if self.final else None
        mean_norm = float(np.mean(norms)) if norms else None
        return self.finish(outcome, answered, received_norm_mean=mean_norm, generator_loss=loss)

    def _fit(self) -> float | None:
        """G fitted to the released mean embedding (nothing to fit when nobody answered)."""
        target = self.trainer.released()
        if target is None:
            logger.warning("dp-merf: no writer answered: G stays untrained")
            return None
        if self.on_release is not None:
            self.on_release(target)
        logger.info(
            "dp-merf: fitting G to the mean of %d releases (%d steps)",
            self.trainer.replies,
            self.trainer.config.generator_steps,
        )
        return self.trainer.fit(target)


class SecureDpMerfStrategy(DpMerfStrategy):
    """DP-MERF under secure aggregation: the server sees only each cohort's noisy sum."""

    def __init__(
        self,
        trainer: MerfTrainer,
        ledger: ReleaseLedger,
        sampler: np.random.Generator,
        clients_per_step: int,
        secure: tuple[SecAggSettings, DistributedNoiseParams],
        wire_dtype: str = "float32",
        identities: NodeIdentities | None = None,
        node_wait: float = 600.0,
        on_release: Callable[[np.ndarray], None] | None = None,
    ) -> None:
        super().__init__(
            trainer,
            ledger,
            sampler,
            clients_per_step,
            wire_dtype,
            identities,
            node_wait,
            on_release,
        )
        self._steps = SecureSteps(*secure)

    def summary(self) -> None:
        super().summary()
        settings = self._steps.settings
        logger.info(
            "secure aggregation: cohorts of up to %d, m_min=%d, t=%d, %d-bit sums of %d values",
            self.clients_per_step,
            settings.min_survivors,
            settings.threshold,
            settings.bits,
            self._steps.noise.padded_dimension,
        )

    def cohort(self, candidates: list[int]) -> list[int]:
        """This round's cohort: a uniform draw of the writers left, sized so that the cohorts
        left split them evenly (no small last cohort, which SecAgg+'s m_min would refuse);
        full cohorts where even ones would fall below m_min (the last few writers are then
        never asked, and the round that would ask them says why)."""
        left = len(candidates)
        if not left:
            return []
        cohorts = math.ceil(left / self.clients_per_step)
        even = left // cohorts >= self._steps.settings.min_survivors
        m = math.ceil(left / cohorts) if even else min(self.clients_per_step, left)
        return [candidates[i] for i in sorted(self.sampler.choice(left, m, False))]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The cohort's queries made secure, each writer charged one secure step as it is
        sent (a cohort SecAgg+ cannot run with asks no one and charges nothing)."""
        nodes = self.cohort(self.unasked(online_nodes(grid, self.node_wait)))
        cohort = self._steps.start(server_round, nodes)
        self._pending = set(cohort)
        if not cohort:
            return []
        self._asked.update(cohort)
        self.charge(cohort, step_event(self._steps.noise, REPLACE_ONE))
        contents = {node: dp_merf.encode_query(self.trainer.spec, server_round) for node in cohort}
        return self._steps.queries(contents, dp_merf.QUERY)

    def exchange(self, grid: Grid, messages: list[Message], timeout: float) -> Exchange:
        return self._steps.exchange(grid, messages, timeout, self.check_reply)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The decoded sum over the survivors into the trainer's sum (nothing when the round
        aborted or asked no one); G fitted after the last round."""
        outcome, released, total = self._steps.released()
        self._pending = set()
        answered = 0
        if released is not None and total is not None:
            answered = len(released.survivors)
            shape = (self.trainer.spec.dimension, self.trainer.num_classes)
            self.trainer.add(total.reshape(shape), answered)
        self.ledger.record_outcomes(
            answered, outcome.sampled - answered - outcome.no_reply, outcome.no_reply
        )
        loss = self._fit() if self.final else None
        return self.finish(outcome, answered, generator_loss=loss)
