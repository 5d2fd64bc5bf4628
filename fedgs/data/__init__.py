"""Federated datasets for fedgs: every loader returns a `FederatedDataset`.

``load_federated("embedded")`` works offline right after ``pip install``;
``load_federated("femnist", dir)`` reads LEAF FEMNIST (one client per writer);
``load_federated("mnist", dir)`` splits MNIST IDX files into virtual clients.

Names are loaded on first use: the loaders import torch, ``datasets`` and pyarrow, which the
``fedgs`` command line should not pay for when it only needs `DATASET_NAMES` for its parser.
"""

from __future__ import annotations

from fedgs.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "names": "DATASET_NAMES",
        "errors": "DataError",
        "federated": "FederatedDataset",
        "load": "load_federated",
    },
)
