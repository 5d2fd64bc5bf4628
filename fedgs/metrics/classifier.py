"""A small CNN trained on a dataset's real training images, the yardstick of every score.

Its softmax gives the Inception Score and the label agreement; its penultimate features give the
domain-classifier FID (documented as such: Inception-v3 FID needs weights we cannot download).
Trained once per dataset fingerprint and cached on disk, since every evaluation needs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from fedgs import stopping
from fedgs.data.cache import cache_root
from fedgs.private_files import close_dir

_CACHE_VERSION = "cnn-v1"


class DomainClassifier(nn.Module):
    """Two conv layers (32/64) with dropout and a 128-d penultimate layer."""

    feature_dim = 128

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Dropout(0.25),
            nn.Linear(64 * 7 * 7, self.feature_dim),
            nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Dropout(0.25), nn.Linear(self.feature_dim, num_classes))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return self.body(images)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(images))


@torch.no_grad()
def predict_in_batches(
    model: DomainClassifier, images: torch.Tensor, batch_size: int = 1000
) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax probabilities, penultimate features) for a stack of images, eval mode."""
    model.eval()
    probs, feats = [], []
    for chunk in images.split(batch_size):
        h = model.features(chunk)
        feats.append(h)
        probs.append(F.softmax(model.head(h), dim=1))
    return torch.cat(probs), torch.cat(feats)


def accuracy(model: DomainClassifier, images: torch.Tensor, labels: torch.Tensor) -> float:
    probs, _ = predict_in_batches(model, images)
    return float((probs.argmax(1) == labels).float().mean())


def train_classifier(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    epochs: int = 3,
    batch_size: int = 128,
    seed: int = 0,
) -> DomainClassifier:
    """Plain supervised training with Adam; a few epochs are enough for a yardstick."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DomainClassifier(num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    steps = epochs * ((images.shape[0] + batch_size - 1) // batch_size)
    with tqdm(total=steps, desc="domain classifier", unit="batch", leave=False) as bar:
        for _ in range(epochs):
            order = torch.randperm(images.shape[0], generator=generator)
            for idx in order.split(batch_size):
                stopping.check("stopped while training the domain classifier")
                loss = F.cross_entropy(model(images[idx]), labels[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                bar.update()
    model.eval()
    return model


def load_or_train_classifier(
    fingerprint: str,
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    cache_dir: Path | None = None,
    epochs: int = 3,
) -> DomainClassifier:
    """The classifier for a dataset fingerprint: from the cache, or trained and then cached."""
    path = (
        (cache_dir or cache_root()) / "classifiers" / f"{fingerprint}-{_CACHE_VERSION}-e{epochs}.pt"
    )
    close_dir(path.parent)  # trained on the data: its owner's alone
    model = DomainClassifier(num_classes)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        model.eval()
        return model
    model = train_classifier(images, labels, num_classes, epochs=epochs)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written cache entry
    return model
