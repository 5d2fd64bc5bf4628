"""One client's side of GS-WGAN: load its state, serve one request, save its state.

A request is served in this order: validate it, check the client's own privacy budget, train the
critic, sanitize, record the query in the client's ledger and persist critic and ledger, and only
then hand the reply back. The reply is built from a SanitizedGradient and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedgs import protocol
from fedgs.client.state_store import ClientStateStore
from fedgs.data import FederatedDataset, load_federated
from fedgs.device import resolve_device, secret_generator
from fedgs.privacy import PrivacyLedger
from fedgs.run_config import RunConfig
from fedgs.training.critic import PrivateCritic


class RequestRefused(ValueError):
    """The client will not serve this request; the message is the reason sent back."""


@lru_cache(maxsize=4)
def _dataset(
    name: str, data_dir: str, labels: str, num_clients: int, seed: int
) -> FederatedDataset:
    """Loaded once per process (Ray actors serve many clients; the data are memory-mapped)."""
    return load_federated(
        name, data_dir or None, labels=labels, num_clients=num_clients or None, seed=seed
    )


def dataset_for(config: RunConfig) -> FederatedDataset:
    return _dataset(config.dataset, config.data_dir, config.labels, config.num_clients, config.seed)


def state_dir_for(config: RunConfig) -> Path:
    return Path(config.state_dir) if config.state_dir else Path(config.run_dir) / "client-state"


@dataclass
class ClientSession:
    config: RunConfig
    partition_id: int
    critic_class: type[PrivateCritic] = PrivateCritic  # PATE-GAN teachers train theirs with BCE

    def __post_init__(self) -> None:
        self.dataset = dataset_for(self.config)
        if not 0 <= self.partition_id < self.dataset.num_clients:
            raise RequestRefused(
                f"partition {self.partition_id} does not exist: the dataset has "
                f"{self.dataset.num_clients} clients"
            )
        self.client_id = self.dataset.client_ids[self.partition_id]
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

    def _identity(self) -> ConfigRecord:
        return ConfigRecord({protocol.CLIENT_ID: self.client_id, "partition-id": self.partition_id})

    def warm_start(self, content: RecordDict) -> RecordDict:
        """Pre-train D_k non-privately; idempotent, so a restarted run does not redo it."""
        steps = self.config.warm_start_steps
        if protocol.WARM_START_CONFIG in content:
            steps = int(content[protocol.WARM_START_CONFIG][protocol.STEPS])
        if steps < 0:
            raise RequestRefused(f"warm-start steps must be >= 0, got {steps}")
        stats_steps, loss = 0, 0.0
        if not self.warm_started:
            stats = self.critic.warm_start(steps)
            stats_steps, loss = stats.steps, stats.loss
            self.warm_started = True
            self.save()
        return RecordDict(
            {
                protocol.METRICS: MetricRecord(
                    {"warm-start-steps": stats_steps, "critic-loss": loss}
                ),
                protocol.CLIENT: self._identity(),
            }
        )

    def answer(self, content: RecordDict) -> RecordDict:
        """Critic steps on the server's fakes, then the sanitized gradient of the last batch."""
        if protocol.FAKES not in content:
            raise protocol.ProtocolError(f"query is missing the '{protocol.FAKES}' ArrayRecord")
        arrays = {key: array.numpy() for key, array in content[protocol.FAKES].items()}
        fakes = protocol.decode_fakes(arrays, self.dataset.num_classes)
        batch_size = int(fakes.labels.shape[1])
        budget = self.config.client_budget_epsilon
        if budget > 0 and self.ledger.would_exceed(
            self.client_id,
            self.gswgan.noise_multiplier,
            batch_size,
            budget,
            self.config.delta,
            self.config.accountant,
        ):
            spent = self.ledger.epsilon_untrusted(
                self.client_id, self.config.delta, self.config.accountant
            )
            raise RequestRefused(
                f"privacy budget exhausted: this client has spent epsilon {spent:.3f} (untrusted "
                f"server, {self.config.accountant}, delta={self.config.delta:g}) and one more "
                f"query would pass its budget of {budget:g}"
            )
        stats = self.critic.train_on(fakes.pairs())
        noise = secret_generator(self.device)  # unpredictable to the server
        sanitized = self.critic.answer(fakes.images[-1], fakes.labels[-1], noise)
        self.ledger.record_query(self.client_id, self.gswgan.noise_multiplier, batch_size)
        self.save()  # the cost is on disk before anything is released
        norms = sanitized.pre_clip_norms
        arrays_out = protocol.encode_gradient(sanitized, self.config.wire_dtype)
        return RecordDict(
            {
                protocol.SANITIZED: ArrayRecord({k: Array(v) for k, v in arrays_out.items()}),
                protocol.METRICS: MetricRecord(
                    {
                        "critic-loss": stats.loss,
                        "wasserstein": stats.wasserstein,
                        "grad-norm-mean": float(norms.mean()),
                        "grad-norm-max": float(norms.max()),
                        "clipped-fraction": float((norms > sanitized.clip_norm).float().mean()),
                        "noise-multiplier": sanitized.noise_multiplier,
                        "batch-size": batch_size,
                        "queries-answered": self.ledger.query_counts()[self.client_id],
                    }
                ),
                protocol.CLIENT: self._identity(),
            }
        )
