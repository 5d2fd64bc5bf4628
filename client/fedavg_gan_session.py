"""One client's side of Fed-Avg GAN: train the server's critic locally, reply with its delta.

The client keeps no state between rounds (D comes with every message). Its reply is the
parameter delta clipped to its policy's bound S, nothing else (a diverged delta is sent as a zero
delta of the same shapes, counted on the client's disk). Fed-Avg GAN's guarantee holds only
against a trusted server (the server adds the noise), so a client configured with its own
untrusted-server budget refuses these queries.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused, client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy.dp_fedavg import NonFiniteDeltaError, clip_delta
from fedgs.protocols import common, fedavg_gan
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

    def answer(self, content: RecordDict) -> RecordDict:
        if self.config.client_budget_epsilon > 0:
            raise RequestRefused(
                "this client has an untrusted-server privacy budget and Fed-Avg GAN sends "
                "unnoised critic deltas (its guarantee needs a trusted server)"
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
        names = list(result.delta)
        clipped = self._clipped([result.delta[n] for n in names])
        delta = fedavg_gan.encode_arrays(
            dict(zip(names, clipped, strict=True)), self.config.wire_dtype
        )
        used = {
            "strategy": "fedavg-gan",
            "clip-norm": self.fedavg.clip_norm,
            "batch-size": int(fakes.labels.shape[1]),
        }
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
