"""Federated datasets for fedgs: every loader returns a `FederatedDataset`.

``load_federated("embedded")`` works offline right after ``pip install``;
``load_federated("femnist", dir)`` reads LEAF FEMNIST (one client per writer);
``load_federated("mnist", dir)`` splits MNIST IDX files into virtual clients.
"""

from fedgs.data.errors import DataError
from fedgs.data.federated import FederatedDataset
from fedgs.data.load import DATASET_NAMES, load_federated

__all__ = ["DATASET_NAMES", "DataError", "FederatedDataset", "load_federated"]
