"""A client's private critic on disk: load it, warm-start it, save it, sign its replies.

GS-WGAN clients and the DataLens and PATE-GAN teachers each keep one (a WGAN critic, or PATE-GAN's
real/fake classifier) between requests; their sessions build on this one. It also carries the
client's GS-WGAN ledger, saved with the critic so both reach the disk together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flwr.app import ArrayRecord, RecordDict

from fedgs.client.common import RequestRefused, client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.device import resolve_device
from fedgs.privacy import PrivacyLedger
from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for
from fedgs.training.critic import PrivateCritic


@dataclass
class CriticSession:
    config: RunConfig
    partition_id: int
    critic_class: type[PrivateCritic] = PrivateCritic  # PATE-GAN teachers train theirs with BCE

    def __post_init__(self) -> None:
        self.client_id = client_id_of(self.config, self.partition_id)
        self.dataset = dataset_for(self.config)
        self.store = ClientStateStore(state_dir_for(self.config))
        self.gswgan = self.config.gswgan()
        self.device = resolve_device(self.compute_device())
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

    def compute_device(self) -> str:
        """Teachers' critics train on the CPU; GS-WGAN's session overrides this."""
        return "cpu"

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
        return common.reply_content(payload, self.client_id, self.partition_id, policy_used)

    def warm_start(self, content: RecordDict) -> RecordDict:
        """Pre-train D_k non-privately; idempotent, so a restarted run does not redo it. Nothing
        trained here leaves the client: the reply says only that it is done."""
        steps = common.warm_start_steps(content)
        if steps is None:
            steps = self.config.warm_start_steps
        if steps < 0:
            raise RequestRefused(f"warm-start steps must be >= 0, got {steps}")
        if not self.warm_started:
            self.critic.warm_start(steps)
            self.warm_started = True
            self.save()
        return self.reply({}, {"strategy": self.config.strategy})
