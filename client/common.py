"""What every client session shares: the refusal it raises, the writer a node holds, and the
secure contribution a session (GS-WGAN's, Fed-Avg GAN's) hands to the node's secure-aggregation
layer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import RecordDict

from fedgs.data.errors import DataError
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for


class RequestRefused(ValueError):
    """The client will not serve this request; the message is the reason sent back."""


class DataRefused(RequestRefused):
    """The node's data cannot serve the run config's dataset (a missing folder, fewer writers
    than num-clients, ...). Whose fault that is needs both sides, so the reason names only the
    run config's choice; the data error, which may name the node's paths, is its ``__cause__``,
    for the node's log."""


class NodeConfigError(RequestRefused):
    """The node's own config (``flower-supernode --node-config``) is missing or wrong: the node
    refuses every request until its operator fixes it; the server is not at fault."""


@dataclass(frozen=True)
class SecureContribution:
    """A query answered for secure aggregation: ``values`` (the encoded, share-noised residues
    mod 2^bits, uint64) leave the node only masked, in SecAgg+'s masked input, so they are kept
    out of any RecordDict; ``reply`` holds the public records (identity, policy used)."""

    values: np.ndarray
    reply: RecordDict


def client_id_of(config: RunConfig, partition_id: int) -> str:
    """The id of the writer this node holds; refused if the partition does not exist or the
    node's data cannot serve the run config's dataset (``DataRefused``)."""
    try:
        dataset = dataset_for(config)
    except DataError as error:
        raise DataRefused(
            f"this node's data cannot serve dataset {config.dataset!r} (labels "
            f"{config.labels!r}, num-clients {config.num_clients}): see the node's log"
        ) from error
    if not 0 <= partition_id < dataset.num_clients:  # how many the node holds is its own
        raise RequestRefused(
            f"partition {partition_id} does not exist in this node's data for dataset "
            f"{config.dataset!r} (run config num-clients {config.num_clients})"
        )
    return dataset.client_ids[partition_id]
