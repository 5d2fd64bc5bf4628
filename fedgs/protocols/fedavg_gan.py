"""The Fed-Avg GAN wire protocol (trusted server).

Down, message type ``train.fedavggan``: ArrayRecord ``critic`` (D's state dict: parameters and
buffers), ArrayRecord ``fakes`` (n_D batches, ``fedgs.protocols.common``).
Up: ArrayRecord ``delta``: D_after - D_before for every *parameter* of D and nothing else, clipped
by the client to the run's bound S (the server clips again: it trusts no client to have done it);
with the identity and policy records every reply carries.
Every array is checked against the receiver's own copy of the network: same names, same shapes,
finite values. Float payloads may be float32, float16 or bfloat16 (``fedgs.wire``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import ArrayRecord

from fedgs import wire
from fedgs.algorithms import ALGORITHMS
from fedgs.protocols.common import ProtocolError, array_values, arrays_record

QUERY = ALGORITHMS["fedavg-gan"].query
CRITIC, DELTA = "critic", "delta"


def encode_arrays(arrays: Mapping[str, np.ndarray], wire_dtype: str) -> ArrayRecord:
    return arrays_record({name: wire.encode(values, wire_dtype) for name, values in arrays.items()})


def decode_arrays(
    payload: ArrayRecord, expected: Mapping[str, tuple[int, ...]], what: str
) -> dict[str, np.ndarray]:
    """float32 arrays with exactly the ``expected`` names and shapes, all finite."""
    if set(payload) != set(expected):
        missing, extra = sorted(set(expected) - set(payload)), sorted(set(payload) - set(expected))
        raise ProtocolError(
            f"{what} arrays do not match the network: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    decoded = {}
    for name, shape in expected.items():
        try:
            values = wire.decode(array_values(payload[name]))
        except wire.WireFormatError as error:
            raise ProtocolError(f"{what} '{name}': {error}") from error
        if values.shape != tuple(shape):
            raise ProtocolError(f"{what} '{name}' has shape {values.shape}, expected {shape}")
        if not np.isfinite(values).all():
            raise ProtocolError(f"{what} '{name}' has non-finite values")
        decoded[name] = values
    return decoded
