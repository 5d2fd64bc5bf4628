"""The public perceptual feature map: rows of norm 1 with the label coordinate first, a frozen
network the query can ship as numpy arrays, gradients to the images, public data only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgs.privacy import public_features as pf
from fedgs.privacy.random_features import LABEL_COORDINATE, mean_embedding
from fedgs.training.dp_merf import class_weights


@pytest.fixture(scope="module")
def network() -> pf.FeatureNetwork:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        return pf.FeatureNetwork(16).eval()


def images(n: int = 12, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@pytest.mark.parametrize("share, random", [(1.0, 0), (0.5, 20)])
def test_rows_have_norm_one_and_the_label_coordinate_first(network, share, random):
    features = pf.public_features(network, share, random)
    rows = features(images())
    assert rows.shape == (12, features.spec.dimension) == (12, 1 + 16 + random)
    assert torch.allclose(rows.norm(dim=1), torch.ones(12), atol=1e-5)
    assert torch.all(rows[:, 0] == LABEL_COORDINATE)


def test_class_weights_read_off_a_mean_embedding(network):
    labels = torch.tensor([0, 0, 0, 1] * 3)
    matrix = mean_embedding(pf.public_features(network)(images()).double(), labels, 10)
    weights = class_weights(matrix.numpy())
    assert torch.allclose(weights[:2], torch.tensor([0.75, 0.25], dtype=torch.float64))


def test_same_weights_same_features_and_a_round_trip(network):
    arrays = pf.weights_to_arrays(network)
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in arrays.values())
    copy = {k: v.copy() for k, v in arrays.items()}
    first = pf.public_features(network)
    second = pf.PublicFeatures(first.spec, copy)
    assert torch.equal(first(images()), second(images()))


def test_weights_that_do_not_match_the_spec_are_refused(network):
    features = pf.public_features(network)
    arrays = pf.weights_to_arrays(network)
    arrays["head.1.bias"] = arrays["head.1.bias"] + 1.0
    with pytest.raises(ValueError, match="SHA-256"):
        pf.PublicFeatures(features.spec, arrays)


def test_gradient_reaches_the_images_not_the_network(network):
    features = pf.public_features(network, 0.5, 20)
    x = images().requires_grad_(True)
    features(x)[:, 1:].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in features.network.parameters())


def test_a_share_below_one_needs_random_features():
    with pytest.raises(ValueError):
        pf.PublicFeatureSpec("0" * 64, 16, public_share=0.5, random_features=0)
    with pytest.raises(ValueError):
        pf.PublicFeatureSpec("0" * 64, 16, public_share=1.0, random_features=20)


def test_training_reads_only_the_public_font_digits(monkeypatch):
    """train_network draws its data from cached_digits and nothing else: no dataset loader."""
    calls = []

    def fonts(count, seed=0):
        calls.append((count, seed))
        return images(20, seed), torch.arange(20) % 10

    def refuse(*args, **kwargs):
        raise AssertionError("the public network must never load a federated dataset")

    monkeypatch.setattr(pf, "cached_digits", fonts)
    monkeypatch.setattr("fedgs.data.load.load_federated", refuse)
    first = pf.train_network(seed=5, images=20, epochs=1, width=8)
    second = pf.train_network(seed=5, images=20, epochs=1, width=8)
    assert calls == [(20, 5), (20, 5)]
    arrays = pf.weights_to_arrays(first)
    assert pf.weights_digest(arrays) == pf.weights_digest(pf.weights_to_arrays(second))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(network):
    cpu = pf.public_features(network, 0.5, 20)
    gpu = pf.PublicFeatures(cpu.spec, pf.weights_to_arrays(network), "cuda")
    assert torch.allclose(cpu(images()), gpu(images().cuda()).cpu(), atol=1e-4)
