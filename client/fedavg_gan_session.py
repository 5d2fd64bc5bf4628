"""One client's side of Fed-Avg GAN: train the server's critic locally, reply with its delta.

The client keeps no state between rounds (D comes with every message). Its reply is the
parameter delta clipped to its policy's bound S, nothing else (a diverged delta is sent as a zero
delta of the same shapes, counted on the client's disk). Fed-Avg GAN's guarantee holds only
against a trusted server (the server adds the noise), so a client configured with its own
untrusted-server budget refuses these queries.

A secure query (``fedgs.protocols.secagg``, checked by the gate against the node's policy) is
answered with the same clipped delta, flattened over all of the critic's parameters and encoded
with this client's share of the distributed discrete Gaussian; it goes back as a
``SecureContribution`` that ``fedgs.client.secure_node`` sends only masked. The client keeps no
ledger (no state at all): the server's per-client ledger is the record, and the policy's check
of each query (clip S, the sum's noise, m_min, t) is what bounds it, so a budget still refuses.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused, SecureContribution, client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy import distributed_noise
from fedgs.privacy.dp_fedavg import NonFiniteDeltaError, clip_delta
from fedgs.privacy.randomness import SecureRandom
from fedgs.protocols import common, fedavg_gan, secagg
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for
from fedgs.training.fedavg_gan import build_critic, local_critic_delta

logger = logging.getLogger(__name__)


class FedAvgClient:
    def __init__(self, config: RunConfig, partition_id: int) -> None:
        self.config = config
        self.fedavg = config.fedavg_gan()
        self.client_id = client_id_of(config, partition_id)
        self.dataset = dataset_for(config)
        self.partition_id = partition_id

    def answer(self, content: RecordDict) -> RecordDict | SecureContribution:
        """The clipped critic delta: in the clear, or (a secure query) encoded for SecAgg+."""
        if self.config.client_budget_epsilon > 0:
            raise RequestRefused(
                "this client has an untrusted-server privacy budget and Fed-Avg GAN clients keep "
                "no ledger to enforce it (in the clear they send unnoised critic deltas, whose "
                "guarantee needs a trusted server)"
            )
        weights_record = common.required(content, fedavg_gan.CRITIC, "query")
        fakes_record = common.required(content, common.FAKES, "query")
        critic = build_critic(self.fedavg, self.dataset.num_classes)
        expected = {name: tuple(t.shape) for name, t in critic.state_dict().items()}
        weights = fedavg_gan.decode_arrays(weights_record, expected, "critic")
        critic.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        fakes = common.decode_fakes(fakes_record, self.dataset.num_classes)
        images, labels = self.dataset.client_train(self.partition_id)
        step = common.query_step(content)
        rng = torch.Generator().manual_seed(self.config.seed * 1_000_003 + self.partition_id + step)

        def real_batch() -> tuple[torch.Tensor, torch.Tensor]:
            idx = torch.randint(images.shape[0], (fakes.labels.shape[1],), generator=rng)
            return images[idx], labels[idx]

        result = local_critic_delta(critic, real_batch, fakes.pairs(), self.fedavg)
        names = list(result.delta)  # the critic's named_parameters order, as the server's
        clipped = self._clipped([result.delta[n] for n in names])
        used: dict[str, str | int | float] = {
            "strategy": "fedavg-gan",
            "clip-norm": self.fedavg.clip_norm,
            "batch-size": int(fakes.labels.shape[1]),
        }
        if secagg.is_secure(content):
            _, noise, rotation_seed = secagg.read_setup(content)
            vector = np.concatenate([a.ravel() for a in clipped])
            if vector.size != noise.dimension:
                raise RequestRefused(
                    f"the noise is for {noise.dimension} values, this critic has {vector.size}"
                )
            values = distributed_noise.encode(vector, noise, SecureRandom(), rotation_seed)
            used |= {"noise-multiplier": noise.sigma / self.fedavg.clip_norm, "m-min": noise.m_min}
            reply = common.reply_content({}, self.client_id, self.partition_id, used)
            return SecureContribution(values, reply)
        delta = fedavg_gan.encode_arrays(
            dict(zip(names, clipped, strict=True)), self.config.wire_dtype
        )
        return common.reply_content(
            {fedavg_gan.DELTA: delta}, self.client_id, self.partition_id, used
        )

    def _clipped(self, delta: list[np.ndarray]) -> list[np.ndarray]:
        """The delta clipped to S; a diverged one (NaN/inf) becomes a zero delta of the same
        shapes, so the wire does not tell the two apart. Counted on the client's disk only."""
        try:
            return clip_delta(delta, self.fedavg.clip_norm)[0]
        except NonFiniteDeltaError as error:
            failures = ClientStateStore(state_dir_for(self.config)).count_failure(self.client_id)
            logger.warning(
                "client %s: diverged critic delta (%s), released a zero delta (%d so far)",
                self.client_id,
                error,
                failures,
            )
            return [np.zeros(np.shape(a), dtype=np.float64) for a in delta]
