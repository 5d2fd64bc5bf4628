"""The labelled synthetic set the downstream classifiers are trained on."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from fedgs.evaluation.generator_loader import LoadedGenerator


def balanced_labels(count: int, num_classes: int) -> torch.Tensor:
    """Labels 0..C-1 in turn: every class gets count/C samples (the paper's uniform prior)."""
    return torch.arange(count) % num_classes


@torch.no_grad()
def synthesize(
    generator: LoadedGenerator, count: int, seed: int = 0, batch_size: int = 1000
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` images with the labels they were generated for, in [-1, 1]."""
    if count < 1:
        raise ValueError(f"the synthetic set needs at least one sample, got {count}")
    labels = balanced_labels(count, generator.num_classes)
    latents = torch.Generator().manual_seed(seed)
    generator.model.eval()
    images = []
    for chunk in tqdm(labels.split(batch_size), desc="synthetic set", unit="batch", leave=False):
        z = torch.randn(chunk.shape[0], generator.z_dim, generator=latents)
        images.append(generator.model(z, chunk))
    return torch.cat(images), labels
