"""The detection statistic: which images look inverted (bright background).

A character covers the centre of a 28x28 image; its frame is background. In the stored polarity
background is -1 and ink +1, so a frame whose mean intensity is above 0 (the midpoint) is a bright
background: an inverted image. The same statistic is applied to generated and to real images,
so it can be checked on images whose inversion is known.
"""

from __future__ import annotations

import torch

BORDER = 2  # pixels of the frame; FEMNIST and MNIST characters rarely touch it
THRESHOLD = 0.0


def border_mean(images: torch.Tensor, border: int = BORDER) -> torch.Tensor:
    """Mean intensity of each image's frame of width ``border``: (n, 1, H, W) -> (n,)."""
    if images.dim() != 4 or images.shape[1] != 1:
        raise ValueError(f"expected images of shape (n, 1, H, W), got {tuple(images.shape)}")
    height, width = images.shape[-2:]
    if not 0 < border < min(height, width) // 2:
        raise ValueError(f"border {border} does not fit {height}x{width} images")
    mask = torch.ones(height, width, dtype=torch.bool)
    mask[border:-border, border:-border] = False
    return images[:, 0][:, mask].float().mean(dim=1)


def looks_inverted(images: torch.Tensor, threshold: float = THRESHOLD) -> torch.Tensor:
    """Boolean per image: bright frame."""
    return border_mean(images) > threshold


def inverted_share(images: torch.Tensor, threshold: float = THRESHOLD) -> float:
    """Share of images that look inverted (0 for no images would hide a bug: refused)."""
    if images.shape[0] == 0:
        raise ValueError("no images to measure")
    return float(looks_inverted(images, threshold).float().mean())
