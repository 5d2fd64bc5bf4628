"""The DP-MERF wire protocol: one query per writer, one noised mean embedding back.

Down, message type ``train.dpmerf``: ConfigRecord ``features`` {features, bandwidth, seed}, the
public description of the random Fourier feature map (``fedgs.privacy.random_features``), and
the step (``fedgs.protocols.common``). No fake batch and no array: the query asks about nothing
but the feature map.
Up: ArrayRecord ``embedding``: ``values`` ((D + 1) x classes), the writer's clipped mean
embedding with its own discrete Gaussian noise (``fedgs.privacy.mean_embedding``), and nothing
else (no count of images or labels), with the identity and policy records every reply carries;
``policy-used`` holds strategy, noise-multiplier, clip-norm and delta.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedgs import wire
from fedgs.algorithms import ALGORITHMS
from fedgs.privacy.mean_embedding import ReleasedEmbedding
from fedgs.privacy.random_features import FeatureSpec
from fedgs.protocols.common import (
    CONFIG,
    STEP,
    ProtocolError,
    array_values,
    arrays_record,
    decode_floats,
)
from fedgs.run_config import RunConfig

QUERY = ALGORITHMS["dp-merf"].query
FEATURES = "features"  # the query's ConfigRecord
FEATURE_KEYS = ("features", "bandwidth", "seed")
EMBEDDING, VALUES = "embedding", "values"


def feature_seed(config: RunConfig) -> int:
    """The run's public seed of the frequencies: derived from the run seed, so a rerun with the
    same seed asks for the same feature map."""
    return 1_000_003 * (config.seed + 1)


def encode_query(spec: FeatureSpec, step: int) -> RecordDict:
    record = ConfigRecord(
        {"features": spec.features, "bandwidth": float(spec.bandwidth), "seed": spec.seed}
    )
    return RecordDict({FEATURES: record, CONFIG: ConfigRecord({STEP: step})})


def decode_query(content: RecordDict) -> FeatureSpec:
    """The feature map a query asks for: exactly its three keys, checked (``FeatureSpec``)."""
    if content.array_records:
        raise ProtocolError(
            f"a dp-merf query carries no arrays, got {sorted(content.array_records)}"
        )
    record = content.config_records.get(FEATURES)
    if record is None or set(record) != set(FEATURE_KEYS):
        got = None if record is None else sorted(record)
        raise ProtocolError(f"query needs the '{FEATURES}' record {list(FEATURE_KEYS)}, got {got}")
    try:
        return FeatureSpec(record["features"], float(record["bandwidth"]), record["seed"])
    except (TypeError, ValueError) as error:
        raise ProtocolError(f"query '{FEATURES}': {error}") from error


def encode_embedding(released: ReleasedEmbedding, wire_dtype: str = "float32") -> ArrayRecord:
    """The only array a client sends: it accepts nothing but a ReleasedEmbedding."""
    if not isinstance(released, ReleasedEmbedding):
        raise TypeError("only a ReleasedEmbedding may leave a dp-merf client")
    return arrays_record({VALUES: wire.encode(released.values, wire_dtype)})


def plausible_magnitude(clip_norm: float, noise_multiplier: float) -> float:
    """C plus 20 noise standard deviations: no honest coordinate exceeds it."""
    return clip_norm * (1.0 + 20.0 * 2.0 * noise_multiplier)


def decode_embedding(
    record: ArrayRecord, shape: tuple[int, int], max_abs: float = float("inf")
) -> np.ndarray:
    """The server's check of a reply: exactly one array, its shape, finite plausible values."""
    if set(record) != {VALUES}:
        raise ProtocolError(f"reply must hold exactly the '{VALUES}' array, got {sorted(record)}")
    values = decode_floats(array_values(record[VALUES]), VALUES)
    if values.shape != shape:
        raise ProtocolError(f"embedding must have shape {shape}, got {values.shape}")
    if values.dtype.kind != "f" or not np.isfinite(values).all():
        raise ProtocolError("embedding must be finite floats")
    if np.abs(values).max() > max_abs:
        raise ProtocolError(f"embedding values exceed the plausible bound {max_abs:g}")
    return values.astype(np.float64)


def update_bytes(config: RunConfig) -> dict[str, int]:
    """Float32 bytes of one writer's exchange: the query's three public numbers down, the
    (D + 1) x 10 release up (digits)."""
    return {"down": 3 * 4, "up": (config.merf_features + 1) * 10 * 4}
