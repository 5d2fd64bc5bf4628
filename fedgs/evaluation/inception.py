"""FID on Inception-v3 pool3 features, from weights the user has on disk.

Nothing is downloaded: the weights are a torchvision ``inception_v3`` state dict at a path the
user gives (torchvision's IMAGENET1K_V1 file is one). As in the paper, 28x28 grey images are
resized to 299x299 and replicated to three channels; then ImageNet normalisation, which the
torchvision weights expect (``transform_input`` maps it to the network's own scaling).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from fedgs.metrics.scores import frechet_distance

_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
POOL3_DIM = 2048


def load_inception(weights: str | Path) -> nn.Module:
    """torchvision's Inception-v3 with the given state dict; its classifier replaced by identity,
    so the output is the 2048-d pool3 feature."""
    from torchvision.models import inception_v3

    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"Inception-v3 weights not found: {path}")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    aux = any(k.startswith("AuxLogits.") for k in state)
    model = inception_v3(weights=None, aux_logits=aux, transform_input=True, init_weights=False)
    model.load_state_dict(state)
    model.fc = nn.Identity()
    return model.eval()


def to_inception_input(images: torch.Tensor) -> torch.Tensor:
    """[-1, 1] grey 28x28 -> ImageNet-normalised RGB 299x299."""
    unit = ((images.float() + 1.0) / 2.0).clamp(0.0, 1.0)
    resized = F.interpolate(unit, size=(299, 299), mode="bilinear", align_corners=False)
    return (resized.repeat(1, 3, 1, 1) - _MEAN) / _STD


@torch.no_grad()
def pool3_features(model: nn.Module, images: torch.Tensor, batch_size: int = 50) -> torch.Tensor:
    feats = [
        model(to_inception_input(chunk))
        for chunk in tqdm(images.split(batch_size), desc="inception", unit="batch", leave=False)
    ]
    return torch.cat(feats)


def inception_fid(model: nn.Module, fake: torch.Tensor, real: torch.Tensor) -> float:
    """Frechet distance of the two sets' pool3 features."""
    return frechet_distance(pool3_features(model, fake), pool3_features(model, real))
