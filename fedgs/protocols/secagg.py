"""The secure-aggregation wire format: SecAgg+ stages and the distributed noise in Flower records.

A secure step rides on a strategy's own query: the query (e.g. ``train.gswgan``) carries two
more ConfigRecords, ``secagg-setup`` (the SecAgg+ setup message: step, cohort, modulus bits,
threshold, fewest survivors, vector length, graph degree, this node's neighbours) and
``secagg-noise`` (the distributed discrete Gaussian's parameters and the cohort's public
rotation seed). The client answers it with the strategy's usual identity and ``policy-used``
records and its advertised keys in ConfigRecord ``secagg``: its contribution stays on the node.
The later stages travel as message type ``train.secagg``: ConfigRecord ``secagg`` holds the
stage message (``stage`` names it), and its one vector (the masked input), if any, travels as an
int64 array of ArrayRecord ``secagg-vector`` under the message's own name for it. Values are
what ``fedgs.secagg`` reads: ints (node ids up to 2^64 - 1), strings, bytes and lists of them.

Every decoder checks types and fields and raises ``ProtocolError``; ``fedgs.secagg`` checks
the values themselves (ids in the cohort, lengths, ciphertexts).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, fields

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedgs.privacy.distributed_noise import MIN_SEED_BYTES, DistributedNoiseParams
from fedgs.protocols.common import ProtocolError, array_values
from fedgs.secagg import SecAggError, SecAggParams

SECAGG = "train.secagg"  # the message type of the stages after the query
SETUP, NOISE, STAGE, VECTOR_RECORD = "secagg-setup", "secagg-noise", "secagg", "secagg-vector"
ROTATION_SEED = "rotation-seed"
_NOISE_FIELDS = {f.name: f.type for f in fields(DistributedNoiseParams)}


def _config_value(value: object) -> object:
    """A value ConfigRecord holds: tuples become lists."""
    return list(value) if isinstance(value, tuple) else value


def stage_content(message: Mapping[str, object]) -> RecordDict:
    """A stage message (or a reply) as records; its one numpy vector, if any, as ``vector``."""
    vectors = {k: v for k, v in message.items() if isinstance(v, np.ndarray)}
    if len(vectors) > 1:
        raise ValueError(f"a stage message carries one vector, got {sorted(vectors)}")
    config = {k: _config_value(v) for k, v in message.items() if k not in vectors}
    records: dict[str, ConfigRecord | ArrayRecord] = {STAGE: ConfigRecord(config)}
    for name, values in vectors.items():
        records[VECTOR_RECORD] = ArrayRecord({name: Array(values.astype(np.int64))})
    return RecordDict(records)


def read_stage(content: RecordDict) -> dict[str, object]:
    """The stage message (or reply) of a ``train.secagg`` message, vector included."""
    if STAGE not in content.config_records:
        raise ProtocolError(f"a secure-aggregation message needs the '{STAGE}' ConfigRecord")
    message: dict[str, object] = dict(content.config_records[STAGE])
    if VECTOR_RECORD in content.array_records:
        arrays = content.array_records[VECTOR_RECORD]
        if len(arrays) != 1:
            raise ProtocolError(f"'{VECTOR_RECORD}' must hold exactly one array")
        ((name, array),) = arrays.items()
        values = array_values(array)
        if values.dtype != np.int64 or values.ndim != 1 or name in message:
            raise ProtocolError(f"'{name}' must be a one-dimensional int64 array of its own name")
        message[name] = values
    return message


def is_secure(content: RecordDict) -> bool:
    """Whether a query asks for an answer through secure aggregation."""
    return SETUP in content.config_records or NOISE in content.config_records


def setup_records(
    setup: Mapping[str, object], noise: DistributedNoiseParams, rotation_seed: bytes
) -> dict[str, ConfigRecord]:
    """The two records a strategy adds to a node's query to make it a secure one."""
    noise_values = {k.replace("_", "-"): v for k, v in asdict(noise).items()}
    return {
        SETUP: ConfigRecord({k: _config_value(v) for k, v in setup.items()}),
        NOISE: ConfigRecord(noise_values | {ROTATION_SEED: rotation_seed}),
    }


def read_setup(content: RecordDict) -> tuple[dict[str, object], DistributedNoiseParams, bytes]:
    """(the SecAgg+ setup message, the noise parameters, the rotation seed) of a secure query."""
    for key in (SETUP, NOISE):
        if key not in content.config_records:
            raise ProtocolError(f"a secure query needs the '{key}' ConfigRecord")
    setup = dict(content.config_records[SETUP]) | {"stage": "setup"}
    given = dict(content.config_records[NOISE])
    seed = given.pop(ROTATION_SEED, None)
    if not isinstance(seed, bytes) or len(seed) < MIN_SEED_BYTES:
        raise ProtocolError(f"'{ROTATION_SEED}' must be at least {MIN_SEED_BYTES} bytes")
    values = {k.replace("-", "_"): v for k, v in given.items()}
    if set(values) != set(_NOISE_FIELDS):
        raise ProtocolError(
            f"'{NOISE}' must hold exactly {sorted(k.replace('_', '-') for k in _NOISE_FIELDS)}"
        )
    for name, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ProtocolError(f"'{NOISE}' value {name} is not finite")
    try:
        noise = DistributedNoiseParams(**values)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise ProtocolError(f"'{NOISE}': {error}") from None
    return setup, noise, seed


def setup_params(setup: Mapping[str, object], noise: DistributedNoiseParams) -> SecAggParams:
    """The SecAgg+ parameters of a secure query's setup, checked against its noise: the sum's
    modulus must be the encoding's and its vector the encoded one, else no input could be masked
    (or the sum would not decode) and the step would be paid for nothing. ProtocolError if not."""
    names = set(SecAggParams.__dataclass_fields__)
    try:
        params = SecAggParams.from_dict({k: v for k, v in setup.items() if k in names})
    except SecAggError as error:
        raise ProtocolError(f"'{SETUP}': {error}") from None
    if params.modulus_bits != noise.bits:
        raise ProtocolError(
            f"'{SETUP}' sums mod 2^{params.modulus_bits}, '{NOISE}' encodes mod 2^{noise.bits}"
        )
    if params.vector_length != noise.padded_dimension:
        raise ProtocolError(
            f"'{SETUP}' sums vectors of {params.vector_length} values, '{NOISE}' encodes "
            f"{noise.padded_dimension}"
        )
    return params
