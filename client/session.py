"""One client's side of GS-WGAN: load its state, serve one request, save its state.

A request is served in this order (under the client's lock, see ``fedgs.client.gate``): validate
it, check the client's own privacy budget, train the critic, sanitize, record the query in the
client's ledger and persist critic and ledger, and only then hand the reply back. The reply holds
the SanitizedGradient's values, the client's identity and the public policy values it applied:
no loss, norm or other statistic of the private data.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedgs import protocol
from fedgs.client.state_store import ClientStateStore
from fedgs.device import resolve_device, secret_generator
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.events import gswgan_query_event
from fedgs.privacy.sanitizer import NonFiniteGradientError, SanitizedGradient, sanitize
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for
from fedgs.training.critic import PrivateCritic

logger = logging.getLogger(__name__)


class RequestRefused(ValueError):
    """The client will not serve this request; the message is the reason sent back."""


def client_id_of(config: RunConfig, partition_id: int) -> str:
    """The id of the writer this node holds; refused if the partition does not exist."""
    dataset = dataset_for(config)
    if not 0 <= partition_id < dataset.num_clients:
        raise RequestRefused(
            f"partition {partition_id} does not exist: the dataset has "
            f"{dataset.num_clients} clients"
        )
    return dataset.client_ids[partition_id]


def build_reply(
    payload: Mapping[str, ArrayRecord],
    client_id: str,
    partition_id: int,
    policy_used: Mapping[str, str | int | float],
) -> RecordDict:
    """Every reply's shape: the mechanism's payload, who answered, the public policy applied."""
    return RecordDict(
        {
            **payload,
            protocol.CLIENT: ConfigRecord(
                {protocol.CLIENT_ID: client_id, "partition-id": partition_id}
            ),
            protocol.POLICY_USED: ConfigRecord(dict(policy_used)),
        }
    )


@dataclass
class ClientSession:
    config: RunConfig
    partition_id: int
    critic_class: type[PrivateCritic] = PrivateCritic  # PATE-GAN teachers train theirs with BCE

    def __post_init__(self) -> None:
        self.client_id = client_id_of(self.config, self.partition_id)
        self.dataset = dataset_for(self.config)
        self.store = ClientStateStore(state_dir_for(self.config))
        self.gswgan = self.config.gswgan()
        # GS-WGAN computes on the configured device; teachers stay on the CPU
        gswgan = self.config.strategy == "gswgan" and self.critic_class is PrivateCritic
        self.device = resolve_device(self.config.device if gswgan else "cpu")
        self.critic = self.critic_class(
            *self.dataset.client_train(self.partition_id),
            self.dataset.num_classes,
            self.gswgan,
            seed=self.config.seed + self.partition_id,
            device=self.device,
        )
        saved = self.store.load(self.client_id)
        self.ledger = PrivacyLedger.from_json(saved["ledger"]) if saved else PrivacyLedger()
        self.warm_started = bool(saved["warm_started"]) if saved else False
        if saved:
            self.critic.load_state_dict(saved["critic_state"])

    def save(self) -> None:
        self.store.save(
            self.client_id,
            {
                "critic_state": self.critic.state_dict(),
                "ledger": self.ledger.to_json(),
                "warm_started": self.warm_started,
            },
        )

    def reply(
        self, payload: Mapping[str, ArrayRecord], policy_used: Mapping[str, str | int | float]
    ) -> RecordDict:
        return build_reply(payload, self.client_id, self.partition_id, policy_used)

    def warm_start(self, content: RecordDict) -> RecordDict:
        """Pre-train D_k non-privately; idempotent, so a restarted run does not redo it. Nothing
        trained here leaves the client: the reply says only that it is done."""
        steps = self.config.warm_start_steps
        if protocol.WARM_START_CONFIG in content:
            steps = int(content[protocol.WARM_START_CONFIG][protocol.STEPS])
        if steps < 0:
            raise RequestRefused(f"warm-start steps must be >= 0, got {steps}")
        if not self.warm_started:
            self.critic.warm_start(steps)
            self.warm_started = True
            self.save()
        return self.reply({}, {"strategy": self.config.strategy})

    def answer(self, content: RecordDict) -> RecordDict:
        """Critic steps on the server's fakes, then the sanitized gradient of the last batch."""
        if protocol.FAKES not in content:
            raise protocol.ProtocolError(f"query is missing the '{protocol.FAKES}' ArrayRecord")
        arrays = {key: array.numpy() for key, array in content[protocol.FAKES].items()}
        fakes = protocol.decode_fakes(arrays, self.dataset.num_classes)
        batch_size = int(fakes.labels.shape[1])
        sigma, delta, accountant = (
            self.gswgan.noise_multiplier,
            self.config.delta,
            self.config.accountant,
        )
        budget = self.config.client_budget_epsilon
        query = gswgan_query_event(sigma, batch_size)
        if budget > 0 and self.ledger.would_exceed(
            self.client_id, query, budget, delta, accountant
        ):
            spent = self.ledger.epsilon_untrusted(self.client_id, delta, accountant)
            raise RequestRefused(
                f"privacy budget exhausted: this client has spent epsilon {spent:.3f} (untrusted "
                f"server, {accountant}, delta={delta:g}) and one more "
                f"query would pass its budget of {budget:g}"
            )
        self.critic.train_on(fakes.pairs())
        sanitized = self._sanitized(fakes.images[-1], fakes.labels[-1])
        self.ledger.record(self.client_id, query)
        self.save()  # the cost is on disk before anything is released
        arrays_out = protocol.encode_gradient(sanitized, self.config.wire_dtype)
        used = {
            "strategy": "gswgan",
            "noise-multiplier": sanitized.noise_multiplier,
            "clip-norm": sanitized.clip_norm,
            "batch-size": batch_size,
            "delta": delta,
        }
        return self.reply(
            {protocol.SANITIZED: ArrayRecord({k: Array(v) for k, v in arrays_out.items()})}, used
        )

    def _sanitized(self, fake: torch.Tensor, labels: torch.Tensor) -> SanitizedGradient:
        """The critic's sanitized gradient; a diverged critic (NaN/inf) releases a zero signal
        with the same noise, so the wire does not tell the two apart. Counted here only."""
        noise = secret_generator(self.device)  # unpredictable to the server
        try:
            return self.critic.answer(fake, labels, noise)
        except NonFiniteGradientError as error:
            failures = self.store.count_failure(self.client_id)
            logger.warning(
                "client %s: diverged critic (%s), released zero signal plus noise (%d so far)",
                self.client_id,
                error,
                failures,
            )
            zeros = torch.zeros(fake.shape[0], protocol.PIXELS, device=self.device)
            return sanitize(zeros, self.gswgan.clip_norm, self.gswgan.noise_multiplier, noise)
