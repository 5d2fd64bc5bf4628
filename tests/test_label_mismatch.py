"""The critics' label-mismatch term: real images under wrong labels are scored as fakes."""

from __future__ import annotations

import pytest
import torch

from fedgs.models import ConditionalDCGANDiscriminator, critic_loss
from fedgs.models.losses import generator_upstream_gradient
from fedgs.training.hparams import GSWGANConfig

CLASSES = 4


def _images_whose_class_is_visible(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class k lights up quadrant k of a dark image: the label is a function of the image."""
    rng = torch.Generator().manual_seed(seed)
    labels = torch.randint(CLASSES, (count,), generator=rng)
    images = torch.full((count, 1, 28, 28), -1.0)
    for i, k in enumerate(labels.tolist()):
        row, col = divmod(k, 2)
        images[i, 0, row * 14 + 3 : row * 14 + 11, col * 14 + 3 : col * 14 + 11] = 1.0
    return images + 0.05 * torch.randn(images.shape, generator=rng), labels


def _label_share(mismatch_weight: float) -> float:
    """Median share of the input gradient -grad_x D(x, y) that depends on the label y (its
    distance from the mean over labels, relative to its norm), on held-out real images. Clipping
    keeps a row's direction, so this share is what the generator can learn its labels from."""
    torch.manual_seed(0)
    critic = ConditionalDCGANDiscriminator(CLASSES, width=8)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    images, labels = _images_whose_class_is_visible(512, seed=1)
    for step in range(60):
        batch = slice((step * 32) % 512, (step * 32) % 512 + 32)
        fake = torch.rand(32, 1, 28, 28) * 2 - 1  # label-free noise: no label signal from fakes
        fake_labels = torch.randint(CLASSES, (32,))
        loss = critic_loss(
            critic,
            images[batch],
            labels[batch],
            fake,
            fake_labels,
            mismatch_weight=mismatch_weight,
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    test_images, test_labels = _images_whose_class_is_visible(200, seed=2)
    grads = torch.stack(
        [
            generator_upstream_gradient(critic, test_images, torch.full_like(test_labels, k))
            for k in range(CLASSES)
        ]
    )  # (classes, images, 784): -grad_x D(x, k)
    own = grads[test_labels, torch.arange(test_labels.shape[0])]
    label_part = own - grads.mean(dim=0)
    return float((label_part.norm(dim=1) / own.norm(dim=1)).median())


def test_mismatch_term_teaches_the_critic_its_labels() -> None:
    with_term = _label_share(1.0)
    without = _label_share(0.0)
    assert with_term > 1.5 * without


def test_mismatch_term_is_zero_weight_by_default_and_refuses_negative_weights() -> None:
    assert GSWGANConfig().label_mismatch_weight == 0.0
    with pytest.raises(ValueError, match="label_mismatch_weight"):
        GSWGANConfig(label_mismatch_weight=-1.0)
