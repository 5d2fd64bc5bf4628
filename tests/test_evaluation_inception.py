"""Inception-v3 FID from a local state dict: shapes, preprocessing, no download.

The weights here are a randomly initialised torchvision Inception-v3 saved to disk: the test
checks the plumbing (299x299 RGB input, 2048-d
pool3 features, a Frechet distance of zero between a set and itself), not ImageNet features.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedgs.evaluation.inception import (
    POOL3_DIM,
    inception_fid,
    load_inception,
    pool3_features,
    to_inception_input,
)


def test_preprocessing_resizes_and_replicates_to_rgb() -> None:
    images = torch.linspace(-1, 1, 2 * 28 * 28).view(2, 1, 28, 28)
    rgb = to_inception_input(images)
    assert rgb.shape == (2, 3, 299, 299)
    unit = rgb[:, 2] * 0.225 + 0.406  # undo ImageNet normalisation: back in [0, 1]
    assert unit.min() >= -1e-5 and unit.max() <= 1 + 1e-5


def test_missing_weights_are_an_error_not_a_download(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="Inception-v3 weights not found"):
        load_inception(tmp_path / "absent.pth")


@pytest.mark.slow
def test_fid_from_local_weights(tmp_path: Path) -> None:
    from torchvision.models import inception_v3

    torch.manual_seed(0)
    network = inception_v3(weights=None)  # with the auxiliary head, as torchvision's file
    for layer in network.modules():  # batch-norm statistics of one batch, so features stay O(1)
        if isinstance(layer, torch.nn.BatchNorm2d):
            layer.momentum = None
    with torch.no_grad():
        network.train()(torch.randn(4, 3, 299, 299))
    weights = tmp_path / "inception.pth"
    torch.save(network.state_dict(), weights)
    model = load_inception(weights)
    images = torch.rand(6, 1, 28, 28) * 2 - 1
    features = pool3_features(model, images)
    assert features.shape == (6, POOL3_DIM) and torch.isfinite(features).all()
    different = inception_fid(model, images, -images)
    assert different > 0
    # zero up to the eigenvalue round-off of 2048x2048 covariances estimated from 6 samples
    assert abs(inception_fid(model, images, images)) < 1e-2 * different
