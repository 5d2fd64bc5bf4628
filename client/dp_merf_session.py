"""One writer's side of DP-MERF: its one release, noised here, paid in its own ledger.

A query is served in this order (under the client's lock, ``fedgs.client.gate``): decode the
public feature map it asks for, refuse it if this writer has released before (one release per
writer: DP-MERF is one-shot) or if the release would take the writer past its budget, compute
the mean embedding over all of the writer's images in one pass, clip and noise it
(``fedgs.privacy.mean_embedding``), record the release in the ledger and save it, and only then
hand the reply back. The reply holds the noised matrix, the writer's identity and the public
policy values applied: no image or label count, no norm, nothing else computed from the data.

A secure query (``fedgs.protocols.secagg``, checked by the gate against the node's policy) is
served the same way, but the clipped matrix is encoded with this writer's share of the cohort's
distributed discrete Gaussian (``fedgs.privacy.distributed_noise``) and goes back as a
``SecureContribution``, which ``fedgs.client.secure_node`` sends only masked; the ledger pays the
secure step's event (``distributed_accounting.step_event``, replace-one), still once per writer.
"""

from __future__ import annotations

from dp_accounting import dp_event
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused, SecureContribution, client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy import distributed_noise
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.events import mean_embedding_event
from fedgs.privacy.mean_embedding import clip, release, writer_embedding
from fedgs.privacy.random_features import FeatureSpec, RandomFeatures
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.protocols import common, dp_merf, secagg
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

    def answer(self, content: RecordDict) -> RecordDict | SecureContribution:
        """The writer's one release: noised here, or (a secure query) clipped and encoded with
        this writer's share of the cohort's distributed discrete Gaussian."""
        spec = dp_merf.decode_query(content)
        secure = secagg.read_setup(content) if secagg.is_secure(content) else None
        if secure is None:
            event = mean_embedding_event(self.merf.noise_multiplier)
        else:
            event = step_event(secure[1], REPLACE_ONE)
            self._check_dimension(spec, secure[1])
        self._check_once_and_budget(event)
        images, labels = self.dataset.client_train(self.partition_id)
        matrix = writer_embedding(RandomFeatures(spec), images, labels, self.dataset.num_classes)
        used: dict[str, str | int | float] = {"strategy": STRATEGY, "delta": self.config.delta}
        reply: RecordDict | SecureContribution
        if secure is None:
            released = release(matrix, self.merf.clip_norm, self.merf.noise_multiplier)
            used |= {
                "noise-multiplier": released.noise_multiplier,
                "clip-norm": released.clip_norm,
            }
            arrays = {dp_merf.EMBEDDING: dp_merf.encode_embedding(released, self.config.wire_dtype)}
            reply = common.reply_content(arrays, self.client_id, self.partition_id, used)
        else:
            _, noise, rotation_seed = secure
            vector = clip(matrix, self.merf.clip_norm).ravel()
            values = distributed_noise.encode(vector, noise, SecureRandom(), rotation_seed)
            used |= {
                "noise-multiplier": noise.sigma / (2 * self.merf.clip_norm),  # on the sum
                "clip-norm": self.merf.clip_norm,
                "m-min": noise.m_min,
            }
            reply = SecureContribution(
                values, common.reply_content({}, self.client_id, self.partition_id, used)
            )
        self.ledger.record(self.client_id, event)
        self.store.save(self.client_id, {"ledger": self.ledger.to_json()})  # paid, then sent
        return reply

    def _check_dimension(self, spec: FeatureSpec, noise: DistributedNoiseParams) -> None:
        """The secure noise must be for this writer's release: (D + 1) x its classes."""
        values = spec.dimension * self.dataset.num_classes
        if noise.dimension != values:
            raise RequestRefused(
                f"the noise is for {noise.dimension} values, this writer's release has {values}"
            )

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
