"""Fed-Avg GAN (Augenstein et al., ICLR 2020): the server holds G and D, clients train D locally.

Server side (:class:`FedAvgGANTrainer`): per round it hands each sampled client D's weights and
n_D fake batches, applies the DP-FedAvg average of the clients' critic deltas with a server
learning rate, then trains G for n_G SGD steps against the new D, with no data.
Client side (:func:`local_critic_delta`): n_D WGAN-GP SGD steps on the client's data; the reply is
the parameter delta only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedgs.models import ConditionalDCGANDiscriminator, ConditionalResNetGenerator, critic_loss
from fedgs.models.tfgan import TFGANDiscriminator, TFGANGenerator
from fedgs.training.hparams import FedAvgGANConfig

GSWGAN_Z_DIM = 10


def build_models(
    config: FedAvgGANConfig, num_classes: int, seed: int = 0
) -> tuple[nn.Module, nn.Module]:
    """(G, D) of the configured family, initialised from ``seed`` (the global RNG is untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if config.models == "paper":
            return TFGANGenerator(num_classes), TFGANDiscriminator(num_classes)
        return (
            ConditionalResNetGenerator(num_classes, GSWGAN_Z_DIM, config.generator_width),
            ConditionalDCGANDiscriminator(num_classes, config.critic_width),
        )


def build_critic(config: FedAvgGANConfig, num_classes: int) -> nn.Module:
    """A client's critic shell; its weights always come from the server's message."""
    if config.models == "paper":
        return TFGANDiscriminator(num_classes)
    return ConditionalDCGANDiscriminator(num_classes, config.critic_width)


def critic_weights(critic: nn.Module) -> dict[str, np.ndarray]:
    """Everything the client needs to rebuild D: parameters and buffers (spectral-norm vectors)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in critic.state_dict().items()}


def parameter_names(critic: nn.Module) -> list[str]:
    """The trained tensors, in a fixed order: what a client's delta covers."""
    return [name for name, _ in critic.named_parameters()]


@dataclass(frozen=True)
class CriticRound:
    """A client's reply content: its critic delta and the numbers it reports."""

    delta: dict[str, np.ndarray]
    loss: float
    wasserstein: float


def local_critic_delta(
    critic: nn.Module,
    real_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    fakes: Sequence[tuple[torch.Tensor, torch.Tensor]],
    config: FedAvgGANConfig,
) -> CriticRound:
    """n_D = len(fakes) WGAN-GP SGD steps from the server's weights; returns D_after - D_before.

    ``critic`` holds the server's weights on entry and the locally trained ones on exit.
    """
    before = {name: p.detach().clone() for name, p in critic.named_parameters()}
    optimizer = torch.optim.SGD(critic.parameters(), lr=config.lr_client)
    critic.train()
    losses, distances = [], []
    for fake, fake_labels in fakes:
        real, real_labels = real_batch()
        result = critic_loss(
            critic, real, real_labels, fake, fake_labels, config.gp_weight, config.drift_weight
        )
        optimizer.zero_grad(set_to_none=True)
        result.loss.backward()
        optimizer.step()
        losses.append(float(result.loss.detach()))
        distances.append(result.wasserstein)
    delta = {
        name: (p.detach() - before[name]).cpu().numpy() for name, p in critic.named_parameters()
    }
    return CriticRound(delta, float(np.mean(losses)), float(np.mean(distances)))


class FedAvgGANTrainer:
    """The server's G and D and G's optimizer; one :meth:`propose` / :meth:`apply` per round."""

    def __init__(self, num_classes: int, config: FedAvgGANConfig, seed: int = 0) -> None:
        self.config = config
        self.num_classes = num_classes
        self.generator, self.critic = build_models(config, num_classes, seed)
        self.z_dim = self.generator.z_dim
        self.rng = torch.Generator().manual_seed(seed)
        self.optimizer = torch.optim.SGD(self.generator.parameters(), lr=config.lr_generator)

    def latent(self, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Latent codes and uniform labels: data-independent, so free of privacy cost."""
        z = torch.randn(count, self.z_dim, generator=self.rng)
        return z, torch.randint(self.num_classes, (count,), generator=self.rng)

    @torch.no_grad()
    def propose(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """n_D fake batches (images, labels) for one client's critic steps."""
        b, steps = self.config.batch_size, self.config.critic_steps
        z, y = self.latent(b * steps)
        self.generator.train()
        return list(self.generator(z, y).split(b)), list(y.split(b))

    def apply(self, mean_delta: Mapping[str, np.ndarray]) -> None:
        """D += server_lr * (noised mean delta), then n_G generator steps against the new D."""
        with torch.no_grad():
            for name, p in self.critic.named_parameters():
                p.add_(torch.from_numpy(mean_delta[name]), alpha=self.config.lr_server)
        self.train_generator()

    def train_generator(self) -> float | None:
        """n_G SGD steps on -mean D(G(z, y), y); D is frozen. Returns the last loss."""
        loss = None
        self.critic.requires_grad_(False)
        self.generator.train()
        for _ in range(self.config.generator_steps):
            z, y = self.latent(self.config.batch_size)
            loss = -self.critic(self.generator(z, y), y).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        self.critic.requires_grad_(True)
        return None if loss is None else float(loss.detach())

    @torch.no_grad()
    def sample(self, labels: torch.Tensor, seed: int = 0) -> torch.Tensor:
        """Images for the given labels from G in eval mode (no EMA: the paper's G is used)."""
        was_training = self.generator.training
        self.generator.eval()
        z = torch.randn(labels.shape[0], self.z_dim, generator=torch.Generator().manual_seed(seed))
        images = self.generator(z, labels)
        self.generator.train(was_training)
        return images

    def state_dict(self) -> dict[str, object]:
        return {
            "generator": self.generator.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "latent_rng": self.rng.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        self.generator.load_state_dict(state["generator"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.set_state(state["latent_rng"])
