"""The detection statistic: which images look inverted (bright background), by a margin.

A character covers the centre of a 28x28 image; its frame is background. In the stored polarity
background is -1 and ink +1. An image is called inverted only when its frame mean is above
``+MARGIN`` and normal only below ``-MARGIN`` (a quarter of the [-1, 1] range from either end);
in between it is undecided. So a flat grey image (frame mean 0) or an untrained generator's
mid-grey noise is neither, where a threshold at 0 would call it 100% or 0% inverted depending
on its seed. The same statistic is applied to generated and to real images, so it can be checked
on images whose inversion is known. `legibility` asks the scenario's held-out classifier whether
the samples are characters at all.
"""

from __future__ import annotations

import torch

from fedgs.metrics.classifier import DomainClassifier, predict_in_batches

BORDER = 2  # pixels of the frame; FEMNIST and MNIST characters rarely touch it
MARGIN = 0.5  # |frame mean| beyond which an image counts as inverted / normal


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


def looks_inverted(images: torch.Tensor, margin: float = MARGIN) -> torch.Tensor:
    """Boolean per image: frame brighter than ``+margin``."""
    return border_mean(images) > margin


def inverted_share(images: torch.Tensor, margin: float = MARGIN) -> float:
    """Share of images that look inverted (0 for no images would hide a bug: refused)."""
    if images.shape[0] == 0:
        raise ValueError("no images to measure")
    return float(looks_inverted(images, margin).float().mean())


def frame_profile(images: torch.Tensor, margin: float = MARGIN) -> dict[str, float]:
    """Shares inverted / normal / undecided and the frame means' 10/50/90% quantiles."""
    means = border_mean(images)
    if means.numel() == 0:
        raise ValueError("no images to measure")
    inverted = float((means > margin).float().mean())
    normal = float((means < -margin).float().mean())
    q10, q50, q90 = torch.quantile(means, torch.tensor([0.1, 0.5, 0.9])).tolist()
    return {
        "inverted": inverted,
        "normal": normal,
        "undecided": 1.0 - inverted - normal,
        "frame_mean_q10": q10,
        "frame_mean_median": q50,
        "frame_mean_q90": q90,
    }


def legibility(
    model: DomainClassifier, images: torch.Tensor, labels: torch.Tensor
) -> dict[str, float]:
    """The held-out classifier's accuracy on the samples as drawn, and with every sample whose
    frame is brighter than its mid-grey flipped back (legible characters of either polarity)."""
    flipped = torch.where((border_mean(images) > 0).view(-1, 1, 1, 1), -images, images)
    drawn, _ = predict_in_batches(model, images)
    normalised, _ = predict_in_batches(model, flipped)
    return {
        "as_drawn": float((drawn.argmax(1) == labels).float().mean()),
        "polarity_normalised": float((normalised.argmax(1) == labels).float().mean()),
    }


def _largest_share(profile: dict[str, float]) -> str:
    """What a generator's samples say by the margin: their largest share (inverted, normal or
    undecided)."""
    return max(("inverted", "normal", "undecided"), key=lambda share: profile[share])


def margin_rule(
    suspected: dict[str, float], normal: dict[str, float], controls: list[dict[str, float]]
) -> str:
    """The scenario's verdict: ``met`` when the suspected group's generator calls inverted, the
    normal group's normal and every untrained control undecided; ``half`` when exactly one
    group's generator calls its side (controls undecided); otherwise ``not met``."""
    if any(_largest_share(control) != "undecided" for control in controls):
        return "not met"
    right = (_largest_share(suspected) == "inverted") + (_largest_share(normal) == "normal")
    return {2: "met", 1: "half"}.get(right, "not met")
