"""What every strategy's messages share: record names, fake batches, identity, record helpers.

Down (server -> client): the strategy's ArrayRecords (fake batches in the format below, and
whatever else it sends) plus ConfigRecord ``config`` {step}.
Up (client -> server): the strategy's payload ArrayRecord; ConfigRecord ``client`` with the
client's id and partition (the server learns which writer answered only from what it reports);
ConfigRecord ``policy-used``: the public values the client applied. No MetricRecord, no statistic
of private data.
Fake batches (ArrayRecord ``fakes``, and PATE-GAN's ``ballot``): ``images`` (n, B, 784) in
[-1, 1], ``labels`` int64 (n, B). Float payloads travel as float32, float16 or bfloat16
(``fedgs.wire``; run-config ``wire-dtype``).
Warm start, message type ``train.warmstart``: ConfigRecord ``warmstart`` {steps}; the reply holds
``client`` and ``policy-used`` {strategy} only.
Clients answer a request they cannot or will not serve with an error reply (never a crash).

Decoders take Flower records and return checked values, so no call site converts records itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedgs import wire
from fedgs.training.hparams import MAX_BATCH, MAX_CRITIC_STEPS, MAX_WARM_START_STEPS

FAKES, IMAGES, LABELS = "fakes", "images", "labels"
CONFIG, STEP = "config", "step"
CLIENT, CLIENT_ID, PARTITION_ID, POLICY_USED = "client", "client-id", "partition-id", "policy-used"
WARM_START_CONFIG, STEPS = "warmstart", "steps"
METRICS = "metrics"  # the server's own records; never in a client's reply

PIXELS = 784
MAX_CRITIC_BATCHES = MAX_CRITIC_STEPS
MAX_STEP = 2**63  # a step is an int64 on the wire (and seeds a client's generator)


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the reason is safe to send back."""


def arrays_record(arrays: Mapping[str, np.ndarray | torch.Tensor]) -> ArrayRecord:
    """The ArrayRecord of named arrays (tensors are copied to the CPU)."""
    return ArrayRecord(
        {
            name: Array(a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else a)
            for name, a in arrays.items()
        }
    )


# numpy reads an .npy header with ast.literal_eval, which CPython 3.11 (3.11.7 here) can fail
# with "SystemError: AST constructor recursion depth mismatch" when threads parse at once: a
# node serving concurrent requests in threads decodes one array at a time
_DECODING = threading.Lock()


def array_values(array: Array) -> np.ndarray:
    """A Flower Array's numpy values (unchecked: decoders check them), decoded under one lock;
    ProtocolError if its bytes are no numpy array, or not one of the shape it states (a gate
    reads sizes from the stated shapes before it decodes anything)."""
    try:
        with _DECODING:
            values = array.numpy()
    except (TypeError, ValueError, EOFError) as error:
        raise ProtocolError(f"an array does not decode: {error}") from error
    if values.shape != tuple(array.shape):
        raise ProtocolError(f"an array states shape {tuple(array.shape)}, holds {values.shape}")
    return values


def record_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The named numpy arrays of an ArrayRecord, unchecked (decoders check them)."""
    return {name: array_values(array) for name, array in record.items()}


def required(content: RecordDict, key: str, what: str) -> ArrayRecord:
    """The ArrayRecord ``key`` of a ``what`` ("query", "reply"), or ProtocolError."""
    if key not in content.array_records:
        raise ProtocolError(f"{what} is missing the '{key}' ArrayRecord")
    return content.array_records[key]


def query_content(records: Mapping[str, ArrayRecord], step: int) -> RecordDict:
    """A query: the strategy's records and the step they belong to."""
    return RecordDict({**records, CONFIG: ConfigRecord({STEP: step})})


def query_step(content: RecordDict) -> int:
    """The step a query belongs to (0 if it does not say), or ProtocolError."""
    step = content.config_records.get(CONFIG, {}).get(STEP, 0)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < MAX_STEP:
        raise ProtocolError(f"'{CONFIG}' '{STEP}' must be an integer in [0, 2^63), got {step!r}")
    return step


def reply_content(
    payload: Mapping[str, ArrayRecord],
    client_id: str,
    partition_id: int,
    policy_used: Mapping[str, str | int | float],
) -> RecordDict:
    """Every reply's shape: the mechanism's payload, who answered, the public policy applied."""
    return RecordDict(
        {
            **payload,
            CLIENT: ConfigRecord({CLIENT_ID: client_id, PARTITION_ID: partition_id}),
            POLICY_USED: ConfigRecord(dict(policy_used)),
        }
    )


def claimed_client(content: RecordDict) -> str:
    """The client id a reply names ("" if it names none)."""
    return str(content.config_records.get(CLIENT, {}).get(CLIENT_ID, ""))


@dataclass(frozen=True)
class FakeBatches:
    """Validated fake batches of a query: images (n_dis, B, 1, 28, 28), labels (n_dis, B)."""

    images: torch.Tensor
    labels: torch.Tensor

    def pairs(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip(self.images, self.labels, strict=True))


def encode_fakes(
    images: list[torch.Tensor], labels: list[torch.Tensor], wire_dtype: str = "float32"
) -> ArrayRecord:
    stacked = torch.stack([x.reshape(x.shape[0], PIXELS) for x in images])
    return arrays_record(
        {
            IMAGES: wire.encode(stacked.detach().cpu().numpy(), wire_dtype),
            LABELS: torch.stack(labels).cpu().numpy().astype(np.int64),
        }
    )


def decode_fakes(record: ArrayRecord, num_classes: int | None = None) -> FakeBatches:
    """Check every property a client relies on; raise ProtocolError naming the first failure.
    Without ``num_classes`` (the node's gate, before it loads any data) labels need only be
    non-negative integers; the class bound is :func:`check_classes`'s."""
    arrays = record_arrays(record)
    for key in (IMAGES, LABELS):
        if key not in arrays:
            raise ProtocolError(f"query is missing the '{key}' array")
    images, labels = decode_floats(arrays[IMAGES], IMAGES), arrays[LABELS]
    if images.ndim != 3 or images.shape[2] != PIXELS:
        raise ProtocolError(f"images must have shape (n_dis, B, {PIXELS}), got {images.shape}")
    n_dis, batch = images.shape[:2]
    if not (1 <= n_dis <= MAX_CRITIC_BATCHES and 1 <= batch <= MAX_BATCH):
        raise ProtocolError(f"query size out of range: {n_dis} batches of {batch}")
    if labels.shape != (n_dis, batch):
        raise ProtocolError(f"labels must have shape {(n_dis, batch)}, got {labels.shape}")
    if images.dtype.kind != "f" or not np.isfinite(images).all():
        raise ProtocolError("images must be finite floats")
    if np.abs(images).max() > 1.0 + 1e-4:
        raise ProtocolError("images must lie in [-1, 1]")
    if labels.dtype.kind not in "iu" or labels.min() < 0:
        raise ProtocolError("labels must be integers >= 0")
    fakes = FakeBatches(
        torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).view(
            n_dis, batch, 1, 28, 28
        ),
        torch.from_numpy(labels.astype(np.int64)),
    )
    if num_classes is not None:
        check_classes(fakes, num_classes)
    return fakes


def check_classes(fakes: FakeBatches, num_classes: int) -> None:
    """Every label names one of the node's ``num_classes`` classes, or ProtocolError."""
    if int(fakes.labels.max()) >= num_classes:
        raise ProtocolError(f"labels must be integers in [0, {num_classes})")


def check_floats(record: ArrayRecord, what: str) -> None:
    """Every array of ``record`` is a finite float payload (names and shapes are the
    session's to check against its own network), or ProtocolError naming it."""
    for name, array in record.items():
        values = decode_floats(array_values(array), f"{what}/{name}")
        if not np.isfinite(values).all():
            raise ProtocolError(f"'{what}/{name}' has non-finite values")


def warm_start_steps(content: RecordDict) -> int | None:
    """The steps a warm start asks for (None: the run config's), or ProtocolError."""
    if WARM_START_CONFIG not in content.config_records:
        return None
    steps = content.config_records[WARM_START_CONFIG].get(STEPS)
    if (
        isinstance(steps, bool)
        or not isinstance(steps, int)
        or not 0 <= steps <= MAX_WARM_START_STEPS
    ):
        raise ProtocolError(
            f"warm-start '{STEPS}' must be an integer in [0, {MAX_WARM_START_STEPS}], got {steps!r}"
        )
    return steps


def fake_batch_size(content: RecordDict, key: str) -> int:
    """B of a query's fake batches, read from the labels' shape before anything is decoded."""
    record = required(content, key, "query")
    if LABELS not in record or len(record[LABELS].shape) != 2:
        raise ProtocolError(f"'{key}' needs a {LABELS} array (n_dis, B)")
    return int(record[LABELS].shape[1])


def decode_floats(payload: np.ndarray, name: str) -> np.ndarray:
    """float32 values of a wire payload, or ProtocolError naming it."""
    try:
        return wire.decode(payload)
    except wire.WireFormatError as error:
        raise ProtocolError(f"'{name}': {error}") from error
