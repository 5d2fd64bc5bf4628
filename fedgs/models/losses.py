"""WGAN-GP losses and the upstream generator gradient GS-WGAN sanitizes.

The critic minimises  mean D(fake) - mean D(real) + gp * mean((||grad D(x_hat)|| - 1)^2)
+ drift * mean D(real)^2  (the drift term as in the official code), optionally
+ mismatch * (mean D(real, wrong label) - mean D(real, its label)): real images under a wrong
label scored as fakes (the matching-aware discriminator of Reed et al., 2016), which teaches a
critic its labels from its own data before the fakes look real. The generator's signal is
the per-sample upstream gradient d(-D(x_i, y_i)) / d x_i: a 784-vector per sample, never a
gradient w.r.t. any parameter. G may add the data-free mode-seeking term of Mao et al. (2019),
which needs no critic and so costs no privacy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class CriticLoss:
    """The loss to back-propagate and the numbers worth logging."""

    loss: torch.Tensor
    wasserstein: float
    gradient_penalty: float


def _gradient_penalty(
    critic: nn.Module, real: torch.Tensor, fake: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Penalty on the critic's input-gradient norm at random real/fake interpolates.

    Interpolates carry the real samples' labels: in the federated setting the fakes' labels are
    chosen by the server and differ from the client's real labels.
    """
    alpha = torch.rand(real.shape[0], 1, 1, 1, device=real.device, dtype=real.dtype)
    interpolates = (alpha * real + (1.0 - alpha) * fake).requires_grad_(True)
    scores = critic(interpolates, labels)
    (grads,) = torch.autograd.grad(scores.sum(), interpolates, create_graph=True)
    return ((grads.flatten(1).norm(dim=1) - 1.0) ** 2).mean()


def _label_mismatch(
    critic: nn.Module, real: torch.Tensor, labels: torch.Tensor, real_scores: torch.Tensor
) -> torch.Tensor:
    """mean D(real, y') - mean D(real, y) for a uniformly drawn wrong label y' != y."""
    shift = torch.randint(1, critic.num_classes, labels.shape, device=labels.device)
    wrong = (labels + shift) % critic.num_classes
    return critic(real, wrong).mean() - real_scores.mean()


def critic_loss(
    critic: nn.Module,
    real: torch.Tensor,
    real_labels: torch.Tensor,
    fake: torch.Tensor,
    fake_labels: torch.Tensor,
    gp_weight: float = 10.0,
    drift_weight: float = 1e-3,
    mismatch_weight: float = 0.0,
) -> CriticLoss:
    """WGAN-GP critic loss on one real and one fake batch of equal size."""
    if real.shape[0] != fake.shape[0]:
        raise ValueError(
            f"real and fake batches differ in size: {real.shape[0]} vs {fake.shape[0]}"
        )
    fake = fake.detach()
    real_scores = critic(real, real_labels)
    fake_scores = critic(fake, fake_labels)
    penalty = _gradient_penalty(critic, real, fake, real_labels)
    wasserstein = real_scores.mean() - fake_scores.mean()
    loss = -wasserstein + gp_weight * penalty + drift_weight * (real_scores**2).mean()
    if mismatch_weight > 0:
        loss = loss + mismatch_weight * _label_mismatch(critic, real, real_labels, real_scores)
    return CriticLoss(loss, float(wasserstein.detach()), float(penalty.detach()))


def generator_upstream_gradient(
    critic: nn.Module, fake: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Per-sample gradient of the generator loss -D(x_i, y_i) w.r.t. each sample, shape (B, 784).

    The loss is a sum of per-sample terms and the critic has no cross-sample layers, so row i
    depends on sample i only: one backward pass gives every row.
    """
    samples = fake.detach().requires_grad_(True)
    (grads,) = torch.autograd.grad(-critic(samples, labels).sum(), samples)
    return grads.flatten(1)


def mode_seeking_loss(
    images: torch.Tensor, latents: torch.Tensor, epsilon: float = 1e-5
) -> torch.Tensor:
    """1 / (mean |x_1 - x_2| / mean |z_1 - z_2| + eps) over the pairs (row i, row i + N/2).

    The pairs share a label and differ in z (the caller draws them so): minimising this pushes
    G to map distinct latents to distinct images of one class, against the one prototype per
    class a noisy critic signal favours (MSGAN's loss, with its batch means).
    """
    if images.shape[0] != latents.shape[0] or images.shape[0] % 2:
        raise ValueError(
            f"need an even number of paired rows, got {images.shape[0]} images and "
            f"{latents.shape[0]} latents"
        )
    x1, x2 = images.chunk(2)
    z1, z2 = latents.chunk(2)
    ratio = (x1 - x2).abs().mean() / (z1 - z2).abs().mean()
    return 1.0 / (ratio + epsilon)
