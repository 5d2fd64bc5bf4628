"""How much critic signal and how much DP noise a server-side Gaussian blur keeps.

Usage: python benchmarks/smoothing_snr.py --writers 4 --warm 30 --lr-critic 1e-3
Warm-starts the critics of the first N FEMNIST digit writers, takes their clean upstream
gradients on one fake batch of an untrained generator, and prints for each blur sigma: the share
of signal energy kept, the signal kept along itself (<Kg, g> / <g, g>), the share of white-noise
energy kept, and the resulting gain in signal-to-noise amplitude. No noise is added to the
signal here: it measures the filter, not a run.
"""

from __future__ import annotations

import argparse
import json

import torch

from fedgs.data import load_federated
from fedgs.models.losses import generator_upstream_gradient
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.smoothing import smooth_images


def clean_gradients(a: argparse.Namespace) -> torch.Tensor:
    dataset = load_federated("femnist", a.data_dir, labels="digits").subset(range(a.writers))
    config = GSWGANConfig(
        generator_width=a.width, critic_width=a.width, lr_critic=a.lr_critic, critic_steps=1
    )
    trainer = GeneratorTrainer(dataset.num_classes, config, seed=0)
    rows = []
    for k in range(dataset.num_clients):
        critic = PrivateCritic(*dataset.client_train(k), dataset.num_classes, config, seed=k)
        critic.warm_start(a.warm)
        (query,) = trainer.propose(1)
        rows.append(generator_upstream_gradient(critic.critic, query.images[-1], query.labels[-1]))
    return torch.cat(rows).view(-1, 1, 28, 28)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/femnist_leaf")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--warm", type=int, default=30, help="warm-start steps per critic")
    p.add_argument("--lr-critic", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.5])
    a = p.parse_args()
    torch.manual_seed(0)
    signal = clean_gradients(a)
    noise = torch.randn(2000, 1, 28, 28)
    for sigma in a.sigmas:
        blurred = smooth_images(signal, sigma)
        along = float((blurred * signal).sum() / signal.pow(2).sum())
        noise_kept = float(smooth_images(noise, sigma).pow(2).sum() / noise.pow(2).sum())
        row = {
            "sigma": sigma,
            "signal_energy_kept": round(float(blurred.pow(2).sum() / signal.pow(2).sum()), 3),
            "signal_kept_along_itself": round(along, 3),
            "noise_energy_kept": round(noise_kept, 3),
            "snr_amplitude_gain": round(along / noise_kept**0.5, 2),
            "rows": int(signal.shape[0]),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
