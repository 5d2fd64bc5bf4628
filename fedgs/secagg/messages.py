"""Stage names and the checks every received SecAgg+ message goes through, on both sides.

Messages are plain dicts of ints, strings, bytes and lists of them (plus one numpy vector for
the masked input), so a transport can carry them in Flower ConfigRecords / ArrayRecords. Each
check raises ``SecAggError`` with the field's name, so a refusal says what was wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedgs.secagg.errors import SecAggError

SETUP = "setup"
SHARE_KEYS = "share_keys"
MASKED_INPUT = "masked_input"
UNMASK = "unmask"
MAX_NODE_ID = 2**64 - 1


def fields(message: object, stage: str | None, names: set[str]) -> Mapping[str, object]:
    """``message`` as a mapping with exactly ``names`` (plus ``stage`` when one is expected)."""
    if not isinstance(message, Mapping):
        raise SecAggError(f"a message is a mapping, got {type(message).__name__}")
    expected = names | ({"stage"} if stage is not None else set())
    if set(message) != expected:
        raise SecAggError(
            f"expected the fields {sorted(expected)}, got {sorted(map(str, message))}"
        )
    if stage is not None and message["stage"] != stage:
        raise SecAggError(f"expected a {stage!r} message, got {message['stage']!r}")
    return message


def integer(value: object, name: str, low: int, high: int) -> int:
    """A Python int (not a bool) in [low, high]."""
    if type(value) is not int or not low <= value <= high:
        raise SecAggError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


def id_list(value: object, name: str, allowed: set[int] | None = None) -> list[int]:
    """A list of distinct node ids, each in ``allowed`` when given."""
    if not isinstance(value, (list, tuple)):
        raise SecAggError(f"{name} must be a list of node ids")
    ids = [integer(v, name, 0, MAX_NODE_ID) for v in value]
    if len(set(ids)) != len(ids):
        raise SecAggError(f"{name} lists a node id twice")
    if allowed is not None and not set(ids) <= allowed:
        raise SecAggError(f"{name} names unknown nodes {sorted(set(ids) - allowed)}")
    return ids


def bytes_list(value: object, name: str, count: int, length: int | None = None) -> list[bytes]:
    """A list of ``count`` byte strings, each ``length`` long when given (else non-empty)."""
    if not isinstance(value, (list, tuple)) or len(value) != count:
        raise SecAggError(f"{name} must be a list of {count} byte strings")
    for item in value:
        if not isinstance(item, bytes) or not item or (length is not None and len(item) != length):
            raise SecAggError(f"{name} holds an item that is not {length or 'non-empty'} bytes")
    return list(value)


def vector(value: object, name: str, length: int, modulus_bits: int) -> np.ndarray:
    """An integer vector of ``length`` values in [0, 2^modulus_bits), as uint64."""
    if (
        not isinstance(value, np.ndarray)
        or value.dtype.kind not in "iu"
        or value.shape != (length,)
    ):
        raise SecAggError(f"{name} must be a numpy integer vector of length {length}")
    if length and (int(value.min()) < 0 or int(value.max()) >> modulus_bits):
        raise SecAggError(f"{name} has values outside [0, 2^{modulus_bits})")
    return value.astype(np.uint64)
