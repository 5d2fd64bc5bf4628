"""The gradient-norm distribution before and after clipping (the GS-WGAN paper's Figure A1).

What is measured, honestly: the run's final *raw* generator (the one that is queried during
training) against a **freshly warm-started** critic on one client's real training data, with the
run's warm-start steps and widths. The critics a run trained are not kept by every runner (the
centralized one keeps none), so this is the distribution at the start of private training
against the final generator, not a replay of the run. Each value is the L2 norm of one sample's
upstream gradient d(-D(x, y))/dx, before and after clipping to the run's bound C, as the
sanitizer does (an evaluation on the server's own copy of the data, a simulation convenience;
no run receives these statistics from its clients). What a run logs per step is computed from
the sanitized rows it received (``received_row_norm_mean``) and is plotted from its log.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from fedgs.evaluation.generator_loader import LoadedGenerator
from fedgs.models.losses import generator_upstream_gradient
from fedgs.privacy.sanitizer import clip_rows
from fedgs.training.critic import PrivateCritic
from fedgs.training.hparams import GSWGANConfig


@dataclass(frozen=True)
class GradNorms:
    before: torch.Tensor  # one pre-clip norm per sample
    after: torch.Tensor
    clip_norm: float
    warm_start_steps: int
    client_images: int


def gradient_norms(
    generator: LoadedGenerator,
    client_train: tuple[torch.Tensor, torch.Tensor],
    warm_start_steps: int,
    samples: int = 1024,
    seed: int = 0,
) -> GradNorms:
    """Per-sample upstream gradient norms of ``samples`` generated images, in batches of B."""
    config = generator.config
    if not isinstance(config, GSWGANConfig):
        raise ValueError("gradient clipping per sample is GS-WGAN's; this run is Fed-Avg GAN")
    critic = PrivateCritic(*client_train, generator.num_classes, config, seed=seed)
    critic.warm_start(warm_start_steps)
    model = copy.deepcopy(generator.raw).train()  # queries are generated in training mode
    latents = torch.Generator().manual_seed(seed)
    before = []
    for start in range(0, samples, config.batch_size):
        count = min(config.batch_size, samples - start)
        z = torch.randn(count, config.z_dim, generator=latents)
        labels = torch.randint(generator.num_classes, (count,), generator=latents)
        with torch.no_grad():
            fake = model(z, labels)
        grads = generator_upstream_gradient(critic.critic, fake, labels)
        before.append(grads.norm(dim=1))
    norms = torch.cat(before).double()
    clipped, _ = clip_rows(norms.unsqueeze(1), config.clip_norm)  # clipping a row scales its norm
    return GradNorms(
        before=norms,
        after=clipped.squeeze(1),
        clip_norm=config.clip_norm,
        warm_start_steps=warm_start_steps,
        client_images=int(client_train[0].shape[0]),
    )
