"""What a run's config points at on this machine: its federated dataset and its client-state
folder. Core, not client code: the server reads the same dataset (evaluation, the number of
clients) and the warm start the same folder, and server/ never imports client/
(tests/test_layering.py)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fedgs.data import FederatedDataset, load_federated
from fedgs.run_config import RunConfig


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
