"""Rebuild a run's generator from its generator.pt, whichever runner wrote it.

Payloads: ``fedgs simulate`` GS-WGAN (``strategy`` "gswgan", ``gswgan`` config, ``generator`` and
``ema`` state dicts), ``fedgs centralized`` (no ``strategy``; the config under ``config``) and
Fed-Avg GAN (``strategy`` "fedavg-gan", ``fedavg_gan`` config, ``generator`` only). The teacher
strategies ("datalens", "pate-gan") save GS-WGAN's layout. Samples come from the EMA generator
where there is one, as during training; Fed-Avg GAN has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from fedgs.data.files import file_sha256
from fedgs.evaluation.run_files import RunError
from fedgs.models import ConditionalResNetGenerator
from fedgs.training.fedavg_gan import build_models
from fedgs.training.hparams import FedAvgGANConfig, GSWGANConfig


@dataclass
class LoadedGenerator:
    """The sampling generator, the raw one (GS-WGAN's training copy) and what identifies them."""

    strategy: str
    model: nn.Module  # what samples are drawn from: EMA for GS-WGAN, G for Fed-Avg GAN
    raw: nn.Module
    num_classes: int
    z_dim: int
    config: GSWGANConfig | FedAvgGANConfig
    sha256: str

    @torch.no_grad()
    def sample(self, labels: torch.Tensor, seed: int = 0, batch_size: int = 1000) -> torch.Tensor:
        """Images in [-1, 1] for ``labels``, eval mode, latents from ``seed``."""
        generator = torch.Generator().manual_seed(seed)
        self.model.eval()
        chunks = []
        for chunk in labels.split(batch_size):
            z = torch.randn(chunk.shape[0], self.z_dim, generator=generator)
            chunks.append(self.model(z, chunk))
        return torch.cat(chunks) if chunks else torch.empty(0, 1, 28, 28)


def _gswgan(payload: dict, num_classes: int) -> tuple[nn.Module, nn.Module, GSWGANConfig]:
    config = GSWGANConfig(**(payload.get("gswgan") or payload["config"]))
    models = []
    for key in ("ema", "generator"):
        model = ConditionalResNetGenerator(num_classes, config.z_dim, config.generator_width)
        model.load_state_dict(payload.get(key) or payload["generator"])
        models.append(model)
    return models[0], models[1], config


def _fedavg(payload: dict, num_classes: int) -> tuple[nn.Module, nn.Module, FedAvgGANConfig]:
    config = FedAvgGANConfig(**payload["fedavg_gan"])
    generator, _ = build_models(config, num_classes)
    generator.load_state_dict(payload["generator"])
    return generator, generator, config


def load_generator(run_dir: str | Path) -> LoadedGenerator:
    """The generator of a finished run; a clear :class:`RunError` when it cannot be rebuilt."""
    path = Path(run_dir) / "generator.pt"
    if not path.exists():
        raise RunError(
            f"{run_dir}: no generator.pt (the run did not finish, or this is not a run directory)"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several unrelated types for a corrupt file
        raise RunError(f"{path}: not a readable generator checkpoint ({error})") from None
    strategy = payload.get("strategy", "gswgan")
    try:
        num_classes = int(payload["num_classes"])
        build = _fedavg if strategy == "fedavg-gan" else _gswgan
        model, raw, config = build(payload, num_classes)
    except (KeyError, TypeError, RuntimeError) as error:
        raise RunError(f"{path}: unexpected generator checkpoint contents ({error})") from None
    model.eval()
    return LoadedGenerator(
        strategy=strategy,
        model=model,
        raw=raw,
        num_classes=num_classes,
        z_dim=int(model.z_dim),
        config=config,
        sha256=file_sha256(path),
    )
