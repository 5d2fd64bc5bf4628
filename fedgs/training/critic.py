"""A client's private critic: its discriminator, optimizer and data, and the queries it answers.

Everything here runs where the data is. The only thing :meth:`PrivateCritic.answer` returns is a
:class:`~fedgs.privacy.sanitizer.SanitizedGradient`; critic losses are the client's own metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedgs.models import ConditionalDCGANDiscriminator, ConditionalResNetGenerator, critic_loss
from fedgs.models.losses import generator_upstream_gradient
from fedgs.privacy.sanitizer import SanitizedGradient, sanitize
from fedgs.training.hparams import GSWGANConfig


@dataclass(frozen=True)
class CriticStats:
    """Mean critic loss and Wasserstein estimate over a group of critic steps."""

    loss: float
    wasserstein: float
    steps: int


def _adam(params, lr: float, config: GSWGANConfig) -> torch.optim.Adam:
    return torch.optim.Adam(params, lr=lr, betas=(config.beta1, config.beta2))


class PrivateCritic:
    """One client's discriminator D_k, trained on its local images only."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        num_classes: int,
        config: GSWGANConfig,
        seed: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if images.shape[0] == 0:
            raise ValueError("a client needs at least one training image")
        self.device = torch.device(device)
        self.images = images.to(self.device)
        self.labels = labels.to(self.device)
        self.num_classes = num_classes
        self.config = config
        self.rng = torch.Generator().manual_seed(seed)  # on the CPU: its state moves with D_k
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.critic = ConditionalDCGANDiscriminator(num_classes, config.critic_width)
        self.critic.to(self.device)
        self.optimizer = _adam(self.critic.parameters(), config.lr_critic, config)

    def state_dict(self) -> dict[str, object]:
        """What must survive between queries: weights, optimizer moments, batch-sampling RNG."""
        return {
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.get_state(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.set_state(state["rng"])

    def _real_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch drawn with replacement, so writers with fewer than B images still work."""
        idx = torch.randint(self.images.shape[0], (self.config.batch_size,), generator=self.rng)
        idx = idx.to(self.device)
        return self.images[idx], self.labels[idx]

    def _critic_step(
        self, fake: torch.Tensor, fake_labels: torch.Tensor, step: int = 0
    ) -> tuple[float, float]:
        real, real_labels = self._real_batch()
        result = critic_loss(
            self.critic,
            real,
            real_labels,
            fake.to(self.device),
            fake_labels.to(self.device),
            self.config.gp_weight,
            self.config.drift_weight,
            self.config.label_mismatch_at(step),
        )
        self.optimizer.zero_grad(set_to_none=True)
        result.loss.backward()
        self.optimizer.step()
        return float(result.loss.detach()), result.wasserstein

    def train_on(
        self, fakes: Sequence[tuple[torch.Tensor, torch.Tensor]], step: int = 0, steps: int = 0
    ) -> CriticStats:
        """Critic steps on the (fake images, labels) batches of the server's query ``step``:
        one per batch, or ``steps`` cycling through them when that is more (each step draws
        its own real batch, so a reused fake batch still meets new real images)."""
        batches = list(fakes)
        n = max(len(batches), steps)
        results = [self._critic_step(*batches[i % len(batches)], step) for i in range(n)]
        return CriticStats(sum(r[0] for r in results) / n, sum(r[1] for r in results) / n, n)

    def upstream_gradient(self, fake: torch.Tensor, fake_labels: torch.Tensor) -> torch.Tensor:
        """The raw gradient of the critic's loss w.r.t. the server's batch: private until a
        mechanism (``answer``'s sanitizer, or the secure path's encoder) has released it."""
        return generator_upstream_gradient(
            self.critic, fake.to(self.device), fake_labels.to(self.device)
        )

    def answer(self, fake: torch.Tensor, fake_labels: torch.Tensor) -> SanitizedGradient:
        """The sanitized upstream gradient for the server's batch: the client's only release."""
        grads = self.upstream_gradient(fake, fake_labels)
        return sanitize(grads, self.config.clip_norm, self.config.noise_multiplier)

    def warm_start(self, steps: int) -> CriticStats:
        """Pre-train D_k against a local, non-private generator that is then thrown away.

        Nothing from here is released, so it costs no privacy (Algorithm 2, ClientWarmStart).
        """
        if steps <= 0:
            return CriticStats(0.0, 0.0, 0)
        local = LocalGenerator(self.num_classes, self.config, self.rng, self.device)
        losses, distances = [], []
        for _ in range(steps):
            fake, labels = local.sample()
            loss, distance = self._critic_step(fake.detach(), labels)
            losses.append(loss)
            distances.append(distance)
            local.step(self.critic, fake, labels)
        return CriticStats(sum(losses) / steps, sum(distances) / steps, steps)


class LocalGenerator:
    """The throw-away generator of the warm start, trained non-privately against D_k."""

    def __init__(
        self,
        num_classes: int,
        config: GSWGANConfig,
        rng: torch.Generator,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config = config
        self.num_classes = num_classes
        self.rng = rng
        self.device = torch.device(device)
        self.generator = ConditionalResNetGenerator(
            num_classes, config.z_dim, config.generator_width
        ).to(self.device)
        self.optimizer = _adam(self.generator.parameters(), config.lr_generator, config)

    def _latent(self) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.config.batch_size
        z = torch.randn(b, self.config.z_dim, generator=self.rng)
        y = torch.randint(self.num_classes, (b,), generator=self.rng)
        return z.to(self.device), y.to(self.device)

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A fake batch that keeps its graph, so the generator step reuses this forward pass."""
        z, y = self._latent()
        return self.generator(z, y), y

    def step(self, critic: torch.nn.Module, fake: torch.Tensor, labels: torch.Tensor) -> None:
        """One non-private generator update against the (just updated) critic."""
        loss = -critic(fake, labels).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
