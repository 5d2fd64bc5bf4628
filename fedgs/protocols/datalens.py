"""The DataLens wire protocol (trusted aggregator).

Down, message type ``train.datalens``: ArrayRecord ``fakes`` (n_dis batches in the format of
``fedgs.protocols.common``; the last is the one voted on). Every sampled teacher gets the same
batches.
Up: ArrayRecord ``votes``, with the identity and policy records every reply carries:
  ``mask`` uint8 (B, 98): the 784-bit map of each row's non-zero votes, packed (numpy bit order);
  ``signs`` uint8 (B, ceil(k/8)): one bit per non-zero vote in coordinate order (1 = +1), zero
  padded. 123 bytes per row at k = 200, where a float32 row is 3,136.
The server checks every property the privacy analysis needs: exact keys, dtypes and shapes, at
most k votes per row, zero padding. A vote is then a matrix of +-1 with at most k per row.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord

from fedgs.algorithms import ALGORITHMS
from fedgs.protocols.common import PIXELS, ProtocolError, arrays_record, record_arrays

QUERY = ALGORITHMS["datalens"].query
VOTES, MASK, SIGNS = "votes", "mask", "signs"
MASK_BYTES = PIXELS // 8  # 784 bits, no padding


def sign_bytes(top_k: int) -> int:
    return (top_k + 7) // 8


def encode_votes(votes: torch.Tensor, top_k: int) -> ArrayRecord:
    """Pack (B, 784) votes in {-1, 0, +1} with at most ``top_k`` non-zeros per row."""
    values = votes.detach().cpu().numpy().astype(np.int8)
    if values.ndim != 2 or values.shape[1] != PIXELS:
        raise ValueError(f"votes must have shape (B, {PIXELS}), got {values.shape}")
    nonzero = values != 0
    if (nonzero.sum(axis=1) > top_k).any() or (np.abs(values) > 1).any():
        raise ValueError(f"votes must be -1, 0 or +1 with at most {top_k} non-zeros per row")
    rank = np.cumsum(nonzero, axis=1) - 1  # position of each non-zero among its row's
    rows, cols = np.nonzero(nonzero)
    bits = np.zeros((values.shape[0], sign_bytes(top_k) * 8), dtype=np.uint8)
    bits[rows, rank[rows, cols]] = values[rows, cols] > 0
    return arrays_record({MASK: np.packbits(nonzero, axis=1), SIGNS: np.packbits(bits, axis=1)})


def decode_votes(record: ArrayRecord, batch_size: int, top_k: int) -> torch.Tensor:
    """The server's check of a reply; returns int8 votes (B, 784) or raises ProtocolError."""
    arrays = record_arrays(record)
    if set(arrays) != {MASK, SIGNS}:
        raise ProtocolError(f"votes must hold exactly '{MASK}' and '{SIGNS}', got {sorted(arrays)}")
    mask, signs = arrays[MASK], arrays[SIGNS]
    for name, payload, width in ((MASK, mask, MASK_BYTES), (SIGNS, signs, sign_bytes(top_k))):
        if payload.dtype != np.uint8 or payload.shape != (batch_size, width):
            raise ProtocolError(
                f"'{name}' must be uint8 of shape {(batch_size, width)}, "
                f"got {payload.dtype} {payload.shape}"
            )
    nonzero = np.unpackbits(mask, axis=1).astype(bool)
    counts = nonzero.sum(axis=1)
    if (counts > top_k).any():
        raise ProtocolError(f"a row has {int(counts.max())} votes, more than top-k = {top_k}")
    bits = np.unpackbits(signs, axis=1)
    if (bits[np.arange(bits.shape[1]) >= counts[:, None]] != 0).any():
        raise ProtocolError("sign padding bits must be zero")
    rank = np.cumsum(nonzero, axis=1) - 1
    rows, cols = np.nonzero(nonzero)
    values = np.zeros((batch_size, PIXELS), dtype=np.int8)
    values[rows, cols] = np.where(bits[rows, rank[rows, cols]] == 1, 1, -1)
    return torch.from_numpy(values)
