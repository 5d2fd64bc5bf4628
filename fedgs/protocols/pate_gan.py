"""The PATE-GAN wire protocol (trusted aggregator).

Down, message type ``train.pategan``: ArrayRecord ``fakes`` (n_T batches the teacher trains on)
and ArrayRecord ``ballot`` (n_S batches it votes on), both in the fake-batch
format (``fedgs.protocols.common``). Every sampled teacher gets the same batches.
Up: ArrayRecord ``votes`` with ``real``: uint8, the n_S * B real/fake votes as bits (1 = real,
numpy bit order, zero padded): 4 bytes per 32 samples, with the identity and policy records
every reply carries.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord

from fedgs.algorithms import ALGORITHMS
from fedgs.protocols.common import ProtocolError, array_values, arrays_record

QUERY = ALGORITHMS["pate-gan"].query
BALLOT = "ballot"
VOTES, REAL = "votes", "real"


def encode_real_votes(real: np.ndarray) -> ArrayRecord:
    """Pack a flat boolean vote vector (True = real)."""
    return arrays_record({REAL: np.packbits(np.asarray(real, dtype=bool).reshape(-1))})


def decode_real_votes(record: ArrayRecord, samples: int) -> np.ndarray:
    """The server's check of a reply: exact key, dtype, size and zero padding."""
    if set(record) != {REAL}:
        raise ProtocolError(f"votes must hold exactly the '{REAL}' array, got {sorted(record)}")
    packed = array_values(record[REAL])
    if packed.dtype != np.uint8 or packed.shape != ((samples + 7) // 8,):
        raise ProtocolError(
            f"'{REAL}' must be uint8 of shape {((samples + 7) // 8,)}, "
            f"got {packed.dtype} {packed.shape}"
        )
    bits = np.unpackbits(packed)
    if bits[samples:].any():
        raise ProtocolError("vote padding bits must be zero")
    return bits[:samples].astype(bool)
