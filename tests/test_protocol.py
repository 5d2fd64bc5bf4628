"""The wire protocol's validation: what a client accepts and what the server accepts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, RecordDict

from fedgs.privacy.sanitizer import sanitize
from fedgs.protocols import common, gswgan


def _fakes(n_dis: int = 2, batch: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        common.IMAGES: rng.uniform(-1, 1, (n_dis, batch, 784)).astype(np.float32),
        common.LABELS: rng.integers(0, 10, (n_dis, batch)),
    }


def test_round_trip() -> None:
    images = [torch.rand(4, 1, 28, 28) * 2 - 1 for _ in range(3)]
    labels = [torch.randint(10, (4,)) for _ in range(3)]
    decoded = common.decode_fakes(common.encode_fakes(images, labels), num_classes=10)
    assert torch.allclose(decoded.images[2], images[2])
    assert torch.equal(decoded.labels[1], labels[1])
    assert len(decoded.pairs()) == 3


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: a.pop(common.LABELS), "missing"),
        (lambda a: a.__setitem__(common.IMAGES, a[common.IMAGES][:, :, :700]), "shape"),
        (
            lambda a: a.__setitem__(common.LABELS, a[common.LABELS][:, :3]),
            "labels must have shape",
        ),
        (lambda a: a[common.IMAGES].__setitem__((0, 0, 5), np.nan), "finite"),
        (lambda a: a[common.IMAGES].__setitem__((0, 0, 5), np.inf), "finite"),
        (lambda a: a[common.IMAGES].__setitem__((0, 0, 5), 7.0), r"\[-1, 1\]"),
        (lambda a: a[common.LABELS].__setitem__((0, 0), 10), "labels must be integers"),
        (lambda a: a[common.LABELS].__setitem__((0, 0), -1), "labels must be integers"),
        (
            lambda a: a.__setitem__(common.LABELS, a[common.LABELS].astype(np.float32)),
            "integers",
        ),
        (
            lambda a: a.__setitem__(common.IMAGES, np.zeros((0, 4, 784), np.float32)),
            "out of range",
        ),
    ],
)
def test_client_rejects_bad_queries(mutate, message: str) -> None:
    arrays = _fakes()
    mutate(arrays)
    with pytest.raises(common.ProtocolError, match=message):
        common.decode_fakes(common.arrays_record(arrays), num_classes=10)


def test_only_a_sanitized_gradient_can_be_encoded() -> None:
    raw = torch.randn(4, 784)
    with pytest.raises(TypeError):
        gswgan.encode_gradient(raw)  # type: ignore[arg-type]
    encoded = gswgan.encode_gradient(sanitize(raw, 1.0, 1.0))
    assert common.record_arrays(encoded)[gswgan.GRADIENT].shape == (4, 784)
    assert set(encoded) == {gswgan.GRADIENT}


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({gswgan.GRADIENT: np.zeros((3, 784), np.float32)}, "shape"),
        ({gswgan.GRADIENT: np.full((4, 784), np.nan, np.float32)}, "finite"),
        ({gswgan.GRADIENT: np.full((4, 784), 1e6, np.float32)}, "plausible"),
        ({gswgan.GRADIENT: np.zeros((4, 784), np.float32), "weights": np.zeros(3)}, "exactly"),
        ({}, "exactly"),
    ],
)
def test_server_rejects_bad_replies(arrays, message: str) -> None:
    bound = gswgan.plausible_magnitude(1.0, 1.07)
    with pytest.raises(common.ProtocolError, match=message):
        gswgan.decode_gradient(common.arrays_record(arrays), batch_size=4, max_abs=bound)


def test_plausible_bound_never_rejects_honest_noise() -> None:
    honest = sanitize(torch.randn(512, 784) * 50, 1.0, 1.07).values.numpy()
    bound = gswgan.plausible_magnitude(1.0, 1.07)
    decoded = gswgan.decode_gradient(common.arrays_record({gswgan.GRADIENT: honest}), 512, bound)
    assert decoded.shape == (512, 784)


def test_records_round_trip_arrays_and_tensors() -> None:
    arrays = {"a": np.arange(6, dtype=np.uint16).reshape(2, 3), "b": torch.ones(2)}
    back = common.record_arrays(common.arrays_record(arrays))
    assert back["a"].dtype == np.uint16 and np.array_equal(back["a"], arrays["a"])
    assert np.array_equal(back["b"], np.ones(2, np.float32))


def test_a_missing_record_is_a_protocol_error() -> None:
    content = RecordDict({common.FAKES: ConfigRecord({"x": 1})})  # the name, but not an array
    with pytest.raises(common.ProtocolError, match="query is missing the 'fakes' ArrayRecord"):
        common.required(content, common.FAKES, "query")
    with pytest.raises(common.ProtocolError, match="'fakes' ArrayRecord"):
        common.fake_batch_size(RecordDict(), common.FAKES)


def test_queries_carry_their_step_and_replies_their_client() -> None:
    query = common.query_content({common.FAKES: common.arrays_record(_fakes())}, 7)
    assert common.query_step(query) == 7 and common.query_step(RecordDict()) == 0
    assert common.fake_batch_size(query, common.FAKES) == 4
    reply = common.reply_content({}, "writer-3", 3, {"strategy": "gswgan"})
    assert common.claimed_client(reply) == "writer-3" and common.claimed_client(RecordDict()) == ""
    assert dict(reply[common.CLIENT]) == {common.CLIENT_ID: "writer-3", common.PARTITION_ID: 3}
