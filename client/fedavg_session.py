"""One client's side of Fed-Avg GAN: train the server's critic locally, reply with its delta.

The client keeps no state between rounds (D comes with every message). Its reply is the
parameter delta clipped to the run's bound S, nothing else. Fed-Avg GAN's guarantee holds only
against a trusted server (the server adds the noise), so a client configured with its own
untrusted-server budget (``client-budget-epsilon``) refuses these queries.
"""

from __future__ import annotations

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedgs import protocol, protocol_fedavg
from fedgs.client.session import RequestRefused, dataset_for
from fedgs.privacy.dp_fedavg import clip_delta
from fedgs.run_config import RunConfig
from fedgs.training.fedavg_gan import build_critic, local_critic_delta


class FedAvgClient:
    def __init__(self, config: RunConfig, partition_id: int) -> None:
        self.config = config
        self.fedavg = config.fedavg_gan()
        self.dataset = dataset_for(config)
        if not 0 <= partition_id < self.dataset.num_clients:
            raise RequestRefused(
                f"partition {partition_id} does not exist: the dataset has "
                f"{self.dataset.num_clients} clients"
            )
        self.partition_id = partition_id
        self.client_id = self.dataset.client_ids[partition_id]

    def answer(self, content: RecordDict) -> RecordDict:
        if self.config.client_budget_epsilon > 0:
            raise RequestRefused(
                "this client has an untrusted-server privacy budget and Fed-Avg GAN sends "
                "unnoised critic deltas (its guarantee needs a trusted server)"
            )
        for key in (protocol_fedavg.CRITIC, protocol.FAKES):
            if key not in content:
                raise protocol.ProtocolError(f"query is missing the '{key}' ArrayRecord")
        critic = build_critic(self.fedavg, self.dataset.num_classes)
        expected = {name: tuple(t.shape) for name, t in critic.state_dict().items()}
        weights = protocol_fedavg.decode_arrays(
            {k: a.numpy() for k, a in content[protocol_fedavg.CRITIC].items()}, expected, "critic"
        )
        critic.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        fakes = protocol.decode_fakes(
            {k: a.numpy() for k, a in content[protocol.FAKES].items()}, self.dataset.num_classes
        )
        images, labels = self.dataset.client_train(self.partition_id)
        step = int(content.config_records.get("config", {}).get("step", 0))
        rng = torch.Generator().manual_seed(self.config.seed * 1_000_003 + self.partition_id + step)

        def real_batch() -> tuple[torch.Tensor, torch.Tensor]:
            idx = torch.randint(images.shape[0], (fakes.labels.shape[1],), generator=rng)
            return images[idx], labels[idx]

        result = local_critic_delta(critic, real_batch, fakes.pairs(), self.fedavg)
        names = list(result.delta)
        clipped, norm = clip_delta([result.delta[n] for n in names], self.fedavg.clip_norm)
        delta = protocol_fedavg.encode_arrays(
            dict(zip(names, clipped, strict=True)), self.config.wire_dtype
        )
        return RecordDict(
            {
                protocol_fedavg.DELTA: ArrayRecord({k: Array(v) for k, v in delta.items()}),
                protocol.METRICS: MetricRecord(
                    {
                        "critic-loss": result.loss,
                        "wasserstein": result.wasserstein,
                        "delta-norm": norm,
                    }
                ),
                protocol.CLIENT: ConfigRecord(
                    {protocol.CLIENT_ID: self.client_id, "partition-id": self.partition_id}
                ),
            }
        )
