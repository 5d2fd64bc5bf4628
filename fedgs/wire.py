"""Wire formats of float payloads: float32, or float16 / bfloat16 to halve the bytes.

Compression is applied to what is already safe to send (data-independent fake samples, sanitized
gradients, the trusted server's critic weights, client deltas that the server clips anyway), so it
is post-processing and leaves every privacy guarantee as it was. NumPy has no bfloat16: it travels
as the upper 16 bits of each float32 (uint16), rounded to nearest even; a receiver tells the three
formats apart by dtype alone.
"""

from __future__ import annotations

import numpy as np

WIRE_DTYPES = ("float32", "float16", "bfloat16")


class WireFormatError(ValueError):
    """A payload in a format this side does not read."""


def encode(values: np.ndarray, wire_dtype: str = "float32") -> np.ndarray:
    """``values`` (finite floats) in the chosen wire format."""
    values = np.asarray(values, dtype=np.float32)
    if wire_dtype == "float32":
        return values
    if wire_dtype == "float16":
        return values.astype(np.float16)
    if wire_dtype == "bfloat16":
        bits = values.view(np.uint32).astype(np.uint64)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)
        return (rounded >> 16).astype(np.uint16)
    raise WireFormatError(f"unknown wire dtype {wire_dtype!r} (known: {', '.join(WIRE_DTYPES)})")


def decode(payload: np.ndarray) -> np.ndarray:
    """float32 values of a payload in any wire format."""
    if payload.dtype == np.float32:
        return payload
    if payload.dtype == np.float16:
        return payload.astype(np.float32)
    if payload.dtype == np.uint16:
        return (payload.astype(np.uint32) << 16).view(np.float32)
    raise WireFormatError(f"float payload of dtype {payload.dtype} (expected float32/16, bfloat16)")
