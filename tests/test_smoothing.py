"""Server-side gradient smoothing: what it keeps, what it removes, and where it acts."""

from __future__ import annotations

import pytest
import torch

from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.smoothing import gaussian_kernel, smooth_images


@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.5])
def test_kernel_is_normalized_and_symmetric(sigma: float) -> None:
    kernel = gaussian_kernel(sigma)
    assert kernel.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.equal(kernel, kernel.flip(-1)) and torch.equal(kernel, kernel.transpose(-1, -2))


def test_zero_sigma_is_the_identity_and_negative_is_refused() -> None:
    images = torch.randn(3, 1, 28, 28)
    assert smooth_images(images, 0.0) is images
    with pytest.raises(ValueError, match="positive"):
        gaussian_kernel(-1.0)
    with pytest.raises(ValueError, match="gradient_smoothing"):
        GSWGANConfig(gradient_smoothing=-0.5)


def test_white_noise_variance_falls_by_the_kernels_sum_of_squares() -> None:
    sigma = 1.0
    noise = torch.randn(400, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    smoothed = smooth_images(noise, sigma)
    interior = smoothed[:, :, 4:-4, 4:-4]  # away from the zero padding
    expected = gaussian_kernel(sigma).pow(2).sum().item()  # ~0.08 at sigma 1
    assert interior.var().item() == pytest.approx(expected, rel=0.03)


def test_a_smooth_image_passes_almost_unchanged() -> None:
    coords = torch.arange(28, dtype=torch.float32)
    blob = torch.exp(-((coords[:, None] - 14) ** 2 + (coords[None, :] - 14) ** 2) / (2 * 4.0**2))
    image = blob[None, None]
    smoothed = smooth_images(image, 1.0)
    cosine = (smoothed * image).sum() / (smoothed.norm() * image.norm())
    assert cosine.item() > 0.999
    assert smoothed.sum().item() == pytest.approx(image.sum().item(), rel=1e-3)


def test_apply_back_propagates_the_smoothed_gradient() -> None:
    config = GSWGANConfig(generator_width=4, critic_steps=1, batch_size=6, gradient_smoothing=1.0)
    plain = GSWGANConfig(generator_width=4, critic_steps=1, batch_size=6)
    smoothed_trainer = GeneratorTrainer(10, config, seed=3)
    reference = GeneratorTrainer(10, plain, seed=3)
    gradient = torch.randn(6, 784, generator=torch.Generator().manual_seed(1))
    smoothed_trainer.propose(1)
    reference.propose(1)
    smoothed_trainer.apply([gradient])
    reference.apply([smooth_images(gradient.view(6, 1, 28, 28), 1.0).view(6, 784)])
    for mine, theirs in zip(
        smoothed_trainer.generator.parameters(), reference.generator.parameters(), strict=True
    ):
        torch.testing.assert_close(mine, theirs)
    unsmoothed = GeneratorTrainer(10, plain, seed=3)
    unsmoothed.propose(1)
    unsmoothed.apply([gradient])
    moved = [
        not torch.allclose(a, b)
        for a, b in zip(
            unsmoothed.generator.parameters(), reference.generator.parameters(), strict=True
        )
    ]
    assert any(moved)
