"""The PATE-GAN wire protocol (trusted aggregator, ALGORITHMS.md s.6).

Down, message type ``train.pategan``: ArrayRecord ``fakes`` (n_T batches the teacher trains on)
and ArrayRecord ``ballot`` (n_S batches it votes on), both in ``fedgs.protocol``'s fake-batch
format. Every sampled teacher gets the same batches.
Up: ArrayRecord ``votes`` with ``real``: uint8, the n_S * B real/fake votes as bits (1 = real,
numpy bit order, zero padded): 4 bytes per 32 samples. Plus metrics and the client id.
"""

from __future__ import annotations

import numpy as np

from fedgs.algorithms import ALGORITHMS
from fedgs.protocol import ProtocolError

QUERY = ALGORITHMS["pate-gan"].query
BALLOT = "ballot"
VOTES, REAL = "votes", "real"


def encode_real_votes(real: np.ndarray) -> dict[str, np.ndarray]:
    """Pack a flat boolean vote vector (True = real)."""
    return {REAL: np.packbits(np.asarray(real, dtype=bool).reshape(-1))}


def decode_real_votes(arrays: dict[str, np.ndarray], samples: int) -> np.ndarray:
    """The server's check of a reply: exact key, dtype, size and zero padding."""
    if set(arrays) != {REAL}:
        raise ProtocolError(f"votes must hold exactly the '{REAL}' array, got {sorted(arrays)}")
    packed = arrays[REAL]
    if packed.dtype != np.uint8 or packed.shape != ((samples + 7) // 8,):
        raise ProtocolError(
            f"'{REAL}' must be uint8 of shape {((samples + 7) // 8,)}, "
            f"got {packed.dtype} {packed.shape}"
        )
    bits = np.unpackbits(packed)
    if bits[samples:].any():
        raise ProtocolError("vote padding bits must be zero")
    return bits[:samples].astype(bool)
