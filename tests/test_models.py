"""GS-WGAN networks and losses: shapes, sizes, the per-sample gradient, a learning critic."""

from __future__ import annotations

import torch

from fedgs.models import (
    ConditionalDCGANDiscriminator,
    ConditionalResNetGenerator,
    critic_loss,
    generator_upstream_gradient,
    make_ema,
)


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_paper_size_critic_and_generator_shapes() -> None:
    critic = ConditionalDCGANDiscriminator(num_classes=10, width=64)
    assert abs(_count(critic) - 1.07e6) / 1.07e6 < 0.02  # the paper's ~1.07M
    generator = ConditionalResNetGenerator(num_classes=10, z_dim=10, width=8)
    images = generator(torch.randn(5, 10), torch.arange(5))
    assert images.shape == (5, 1, 28, 28)
    assert float(images.detach().abs().max()) <= 1.0
    assert critic(images, torch.arange(5)).shape == (5,)


def test_upstream_gradient_rows_are_per_sample() -> None:
    critic = ConditionalDCGANDiscriminator(num_classes=10, width=8).eval()
    fake, labels = torch.randn(6, 1, 28, 28), torch.randint(10, (6,))
    rows = generator_upstream_gradient(critic, fake, labels)
    assert rows.shape == (6, 784)
    for i in range(6):  # row i equals the gradient computed from sample i alone
        alone = generator_upstream_gradient(critic, fake[i : i + 1], labels[i : i + 1])
        assert torch.allclose(rows[i], alone[0], atol=1e-6)
    # and it is the gradient of -D w.r.t. the input, checked by finite differences on one pixel
    eps = 1e-3
    bumped = fake.clone()
    bumped[2, 0, 14, 14] += eps
    with torch.no_grad():
        numeric = -(critic(bumped, labels)[2] - critic(fake, labels)[2]) / eps
    torch.testing.assert_close(rows[2, 14 * 28 + 14], numeric, atol=2e-3, rtol=2e-2)


def test_label_changes_the_critic_score() -> None:
    critic = ConditionalDCGANDiscriminator(num_classes=10, width=8).eval()
    x = torch.randn(1, 1, 28, 28)
    with torch.no_grad():
        scores = torch.stack([critic(x, torch.tensor([c])) for c in range(10)])
    assert float(scores.std()) > 0


def test_critic_learns_to_separate_real_from_fake() -> None:
    torch.manual_seed(0)
    critic = ConditionalDCGANDiscriminator(num_classes=2, width=8)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    real = torch.full((32, 1, 28, 28), -1.0)
    real[:, :, 10:18, 10:18] = 1.0
    labels = torch.zeros(32, dtype=torch.long)
    distances = []
    for _ in range(60):
        fake = torch.rand(32, 1, 28, 28) * 2 - 1
        result = critic_loss(critic, real, labels, fake, labels)
        optimizer.zero_grad()
        result.loss.backward()
        optimizer.step()
        distances.append(result.wasserstein)
    assert distances[-1] > distances[0] + 0.5


def test_ema_tracks_the_generator() -> None:
    generator = ConditionalResNetGenerator(width=4)
    ema = make_ema(generator, decay=0.5)
    before = [p.clone() for p in ema.module.parameters()]
    with torch.no_grad():
        for p in generator.parameters():
            p.add_(1.0)
    ema.update_parameters(generator)
    after = list(ema.module.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
