"""The wire protocol's validation: what a client accepts and what the server accepts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgs import protocol
from fedgs.privacy.sanitizer import sanitize


def _fakes(n_dis: int = 2, batch: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        protocol.IMAGES: rng.uniform(-1, 1, (n_dis, batch, 784)).astype(np.float32),
        protocol.LABELS: rng.integers(0, 10, (n_dis, batch)),
    }


def test_round_trip() -> None:
    images = [torch.rand(4, 1, 28, 28) * 2 - 1 for _ in range(3)]
    labels = [torch.randint(10, (4,)) for _ in range(3)]
    decoded = protocol.decode_fakes(protocol.encode_fakes(images, labels), num_classes=10)
    assert torch.allclose(decoded.images[2], images[2])
    assert torch.equal(decoded.labels[1], labels[1])
    assert len(decoded.pairs()) == 3


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: a.pop(protocol.LABELS), "missing"),
        (lambda a: a.__setitem__(protocol.IMAGES, a[protocol.IMAGES][:, :, :700]), "shape"),
        (
            lambda a: a.__setitem__(protocol.LABELS, a[protocol.LABELS][:, :3]),
            "labels must have shape",
        ),
        (lambda a: a[protocol.IMAGES].__setitem__((0, 0, 5), np.nan), "finite"),
        (lambda a: a[protocol.IMAGES].__setitem__((0, 0, 5), np.inf), "finite"),
        (lambda a: a[protocol.IMAGES].__setitem__((0, 0, 5), 7.0), r"\[-1, 1\]"),
        (lambda a: a[protocol.LABELS].__setitem__((0, 0), 10), "labels must be integers"),
        (lambda a: a[protocol.LABELS].__setitem__((0, 0), -1), "labels must be integers"),
        (
            lambda a: a.__setitem__(protocol.LABELS, a[protocol.LABELS].astype(np.float32)),
            "integers",
        ),
        (
            lambda a: a.__setitem__(protocol.IMAGES, np.zeros((0, 4, 784), np.float32)),
            "out of range",
        ),
    ],
)
def test_client_rejects_bad_queries(mutate, message: str) -> None:
    arrays = _fakes()
    mutate(arrays)
    with pytest.raises(protocol.ProtocolError, match=message):
        protocol.decode_fakes(arrays, num_classes=10)


def test_only_a_sanitized_gradient_can_be_encoded() -> None:
    raw = torch.randn(4, 784)
    with pytest.raises(TypeError):
        protocol.encode_gradient(raw)  # type: ignore[arg-type]
    encoded = protocol.encode_gradient(sanitize(raw, 1.0, 1.0))
    assert set(encoded) == {protocol.GRADIENT} and encoded[protocol.GRADIENT].shape == (4, 784)


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({protocol.GRADIENT: np.zeros((3, 784), np.float32)}, "shape"),
        ({protocol.GRADIENT: np.full((4, 784), np.nan, np.float32)}, "finite"),
        ({protocol.GRADIENT: np.full((4, 784), 1e6, np.float32)}, "plausible"),
        ({protocol.GRADIENT: np.zeros((4, 784), np.float32), "weights": np.zeros(3)}, "exactly"),
        ({}, "exactly"),
    ],
)
def test_server_rejects_bad_replies(arrays, message: str) -> None:
    bound = protocol.plausible_magnitude(1.0, 1.07)
    with pytest.raises(protocol.ProtocolError, match=message):
        protocol.decode_gradient(arrays, batch_size=4, max_abs=bound)


def test_plausible_bound_never_rejects_honest_noise() -> None:
    honest = sanitize(torch.randn(512, 784) * 50, 1.0, 1.07).values.numpy()
    bound = protocol.plausible_magnitude(1.0, 1.07)
    decoded = protocol.decode_gradient({protocol.GRADIENT: honest}, 512, bound)
    assert decoded.shape == (512, 784)
