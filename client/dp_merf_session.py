"""One writer's side of DP-MERF: its one release, noised here, paid in its own ledger.

A query is served in this order (under the client's lock, ``fedgs.client.gate``): decode the
public feature map it asks for, refuse it if this writer has released before (one release per
writer: DP-MERF is one-shot) or if the release would take the writer past its budget, compute
the mean embedding over all of the writer's images in one pass, clip and noise it
(``fedgs.privacy.mean_embedding``), record the release in the ledger and save it, and only then
hand the reply back. The reply holds the noised matrix, the writer's identity and the public
policy values applied: no image or label count, no norm, nothing else computed from the data.
"""

from __future__ import annotations

from dp_accounting import dp_event
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused, client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy.events import mean_embedding_event
from fedgs.privacy.mean_embedding import release, writer_embedding
from fedgs.privacy.random_features import RandomFeatures
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.protocols import common, dp_merf
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for

STRATEGY = "dp-merf"


class DpMerfSession:
    """The writer's data, its ledger on disk, and its one answer."""

    def __init__(self, config: RunConfig, partition_id: int) -> None:
        self.config = config
        self.merf = config.dp_merf()
        self.partition_id = partition_id
        self.client_id = client_id_of(config, partition_id)
        self.dataset = dataset_for(config)
        self.store = ClientStateStore(state_dir_for(config))
        saved = self.store.load(self.client_id)
        self.ledger = ReleaseLedger.from_json(saved["ledger"]) if saved else ReleaseLedger()

    def answer(self, content: RecordDict) -> RecordDict:
        spec = dp_merf.decode_query(content)
        event = mean_embedding_event(self.merf.noise_multiplier)
        self._check_once_and_budget(event)
        images, labels = self.dataset.client_train(self.partition_id)
        matrix = writer_embedding(RandomFeatures(spec), images, labels, self.dataset.num_classes)
        released = release(matrix, self.merf.clip_norm, self.merf.noise_multiplier)
        self.ledger.record(self.client_id, event)
        self.store.save(self.client_id, {"ledger": self.ledger.to_json()})  # paid, then sent
        used: dict[str, str | int | float] = {
            "strategy": STRATEGY,
            "noise-multiplier": released.noise_multiplier,
            "clip-norm": released.clip_norm,
            "delta": self.config.delta,
        }
        payload = {dp_merf.EMBEDDING: dp_merf.encode_embedding(released, self.config.wire_dtype)}
        return common.reply_content(payload, self.client_id, self.partition_id, used)

    def _check_once_and_budget(self, event: dp_event.DpEvent) -> None:
        """Refuse a second release (one-shot), and one the writer's budget cannot pay."""
        if self.ledger.paid(self.client_id, self.client_id) > 0:
            raise RequestRefused(
                "this writer has already released its mean embedding: dp-merf asks each writer once"
            )
        c = self.config
        budget = c.client_budget_epsilon
        if budget > 0 and self.ledger.would_exceed(
            self.client_id, event, budget, c.delta, c.accountant
        ):
            cost = self.ledger.epsilon(self.client_id, c.delta, c.accountant, extra=event)
            raise RequestRefused(
                f"privacy budget: this release costs epsilon {cost:.3f} (untrusted server, "
                f"{c.accountant}, delta={c.delta:g}), above this writer's budget of {budget:g}"
            )
