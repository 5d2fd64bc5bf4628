"""What every client session shares: the refusal it raises and the writer a node holds."""

from __future__ import annotations

from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for


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
