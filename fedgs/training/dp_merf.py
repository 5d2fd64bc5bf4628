"""DP-MERF's server side: average the writers' releases, then fit G to the released embedding.

The released mean embedding mu_hat (the sum of the noisy replies over their count) is all the
server ever uses of the data; everything after it is post-processing. G is the project's
conditional generator (``GeneratorTrainer``'s model, EMA and sampling), so ``fedgs evaluate``
loads it like a GS-WGAN generator. Each step draws labels from the class weights read off
mu_hat's label row (clamped at 0, normalised) and minimises
||mu_hat - (1/B) sum_j phi(G(z_j, y_j)) (outer) onehot(y_j)||^2 with Adam.

``python -m fedgs.training.dp_merf RUN_DIR OUT_DIR`` refits G from RUN_DIR's saved release
(``release.npz``) with other generator settings, without asking any writer again.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgs.privacy.random_features import (
    LABEL_COORDINATE,
    FeatureSpec,
    RandomFeatures,
    mean_embedding,
)
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.run_dir import RunDirectory, write_atomic

RELEASE_FILE = "release.npz"


@dataclass(frozen=True)
class MerfConfig:
    """DP-MERF's settings: the release (features, kernel, C, sigma) and G's training."""

    features: int = 1000
    bandwidth: float = 7.0
    clip_norm: float = 1.0
    noise_multiplier: float = 0.6
    generator_steps: int = 1000
    lr: float = 1e-3
    batch_size: int = 200
    generator_width: int = 16
    ema_decay: float = 0.999
    z_dim: int = GSWGANConfig.z_dim

    def __post_init__(self) -> None:
        self.feature_spec(0)  # D even and in range, a finite positive bandwidth
        for name in ("clip_norm", "noise_multiplier", "lr"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"merf {name} must be positive and finite, got {value!r}")
        if self.generator_steps < 0 or self.batch_size < 1:
            raise ValueError(
                f"merf generator steps must be >= 0 and batch size >= 1, got "
                f"{self.generator_steps} and {self.batch_size}"
            )

    def feature_spec(self, seed: int) -> FeatureSpec:
        return FeatureSpec(self.features, self.bandwidth, seed)

    def generator_config(self) -> GSWGANConfig:
        """G's architecture and optimizer in GS-WGAN's layout (what generator.pt stores): a
        plain regression loss, so Adam's usual betas."""
        return GSWGANConfig(
            z_dim=self.z_dim,
            generator_width=self.generator_width,
            lr_generator=self.lr,
            beta1=0.9,
            beta2=0.999,
            ema_decay=self.ema_decay,
        )


def class_weights(release: np.ndarray) -> torch.Tensor:
    """Class proportions read off the release's label row (row 0 = a * share of each class),
    negatives clamped to 0 and normalised; uniform when nothing positive is left."""
    weights = torch.from_numpy(np.clip(release[0], 0.0, None) / LABEL_COORDINATE)
    total = float(weights.sum())
    if total <= 0:
        return torch.full((release.shape[1],), 1.0 / release.shape[1], dtype=torch.float64)
    return weights / total


class MerfTrainer:
    """The sum of the releases received, and G fitted to their mean."""

    def __init__(
        self,
        num_classes: int,
        config: MerfConfig,
        spec: FeatureSpec,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        self.config, self.spec, self.num_classes = config, spec, num_classes
        self.generator = GeneratorTrainer(num_classes, config.generator_config(), seed, device)
        self.features = RandomFeatures(spec, self.generator.device)
        self.total = np.zeros((spec.dimension, num_classes))
        self.replies = 0
        self.fitted_steps = 0

    def add(self, release: np.ndarray, writers: int = 1) -> None:
        """A release into the sum: one writer's, or (secure aggregation) a cohort's sum of
        ``writers`` releases."""
        self.total += release
        self.replies += writers

    def released(self) -> np.ndarray | None:
        """mu_hat: the mean of the releases received (None before any)."""
        return self.total / self.replies if self.replies else None

    def fit(self, target: np.ndarray) -> float:
        """``config.generator_steps`` Adam steps of G towards ``target``; the last loss."""
        g = self.generator
        weights = class_weights(target)
        goal = torch.from_numpy(target).float().to(g.device)
        loss = torch.zeros(())
        g.generator.train()
        for _ in range(self.config.generator_steps):
            z = torch.randn(self.config.batch_size, g.config.z_dim, generator=g.rng)
            y = torch.multinomial(weights, self.config.batch_size, True, generator=g.rng)
            images = g.generator(z.to(g.device), y.to(g.device))
            embedding = mean_embedding(self.features(images), y.to(g.device), self.num_classes)
            loss = ((goal - embedding) ** 2).sum()
            g.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            g.optimizer.step()
            g.ema.update_parameters(g.generator)
        self.fitted_steps += self.config.generator_steps
        return float(loss.detach())

    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        return self.generator.sample(labels)

    def state_dict(self) -> dict[str, Any]:
        return self.generator.state_dict() | {
            "embedding_sum": torch.from_numpy(self.total.copy()),
            "replies": self.replies,
            "fitted_steps": self.fitted_steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.load_state_dict(state)
        self.total = state["embedding_sum"].double().numpy().copy()
        self.replies = int(state["replies"])
        self.fitted_steps = int(state["fitted_steps"])

    def save_generator(self, out: RunDirectory) -> None:
        """generator.pt in GS-WGAN's layout (``fedgs.evaluation.generator_loader`` reads it)."""
        g = self.generator
        settings = {"gswgan": asdict(g.config), "dp_merf": asdict(self.config)}
        out.save_generator("dp-merf", g.generator, self.num_classes, settings, g.ema.module)


def save_release(path: Path, release: np.ndarray, replies: int, spec: FeatureSpec) -> None:
    """The released embedding and what it was computed with: enough to refit G later."""
    buffer = io.BytesIO()
    np.savez(buffer, release=release, replies=replies, **asdict(spec))
    write_atomic(path, buffer.getvalue())


def load_release(path: Path) -> tuple[np.ndarray, int, FeatureSpec]:
    with np.load(path) as saved:
        spec = FeatureSpec(int(saved["features"]), float(saved["bandwidth"]), int(saved["seed"]))
        return saved["release"].astype(np.float64), int(saved["replies"]), spec


def refit(run_dir: Path, out_dir: Path, changes: Mapping[str, Any], seed: int = 0) -> float:
    """G fitted anew to ``run_dir``'s release with ``changes`` to its generator settings, in
    ``out_dir`` (generator.pt, and the run's config.json and privacy.json: the same release,
    the same epsilon); the last loss."""
    release, _, spec = load_release(run_dir / RELEASE_FILE)
    config = json.loads((run_dir / "config.json").read_text())
    settings = replace(
        MerfConfig(
            features=spec.features,
            bandwidth=spec.bandwidth,
            clip_norm=float(config["merf-clip-norm"]),
            noise_multiplier=float(config["merf-noise-multiplier"]),
            generator_width=int(config["generator-width"]),
            ema_decay=float(config["ema-decay"]),
        ),
        **changes,
    )
    trainer = MerfTrainer(release.shape[1], settings, spec, seed)
    loss = trainer.fit(release)
    out = RunDirectory(out_dir)
    trainer.save_generator(out)
    config |= {f"merf-{k.replace('_', '-')}": v for k, v in changes.items()}
    config |= {"merf-features": spec.features, "merf-bandwidth": spec.bandwidth}
    config["run-dir"] = str(out_dir)
    out.write_json(out.config_json, config)
    shutil.copyfile(run_dir / "privacy.json", out.privacy_json)
    return loss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished dp-merf run (its release.npz)")
    parser.add_argument("out_dir", type=Path, help="where the refitted generator goes")
    parser.add_argument("--generator-steps", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    changes = {
        k: v
        for k, v in (
            ("generator_steps", args.generator_steps),
            ("lr", args.lr),
            ("batch_size", args.batch_size),
        )
        if v is not None
    }
    loss = refit(args.run_dir, args.out_dir, changes, args.seed)
    print(f"{args.out_dir / 'generator.pt'}: last loss {loss:.3g}")


if __name__ == "__main__":
    main()
