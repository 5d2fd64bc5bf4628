"""Sample grids: one row per class, so a glance tells whether G follows its labels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torchvision.utils import save_image


def save_class_grid(
    sample: Callable[[torch.Tensor], torch.Tensor],
    num_classes: int,
    path: str | Path,
    per_class: int = 10,
) -> Path:
    """Write a PNG whose row c holds ``per_class`` samples of class c; images in [-1, 1]."""
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    images = sample(labels)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_image((images + 1.0) / 2.0, path, nrow=per_class, padding=2, pad_value=0.5)
    return path
