"""What the cryptographic noise costs: a reply's sanitizer before and after, beside a client step.

Usage: python benchmarks/noise_cost.py --repeats 50 --threads 1
"Before" is the sanitizer as it was at cfba070 (torch's generator seeded with secret bits, float
normals added to the clipped rows), written out here; "after" is ``fedgs.privacy.sanitizer``
(a fresh ChaCha20 key, discrete Gaussian on the grid). The step is what a GS-WGAN client does for
one query at the default settings: its critic steps on the server's fakes, the upstream gradient
and the sanitizer. Medians of ``--repeats`` calls after one warm-up, all in one process.
"""

from __future__ import annotations

import argparse
import os
import secrets

import torch
from profile_step import median_ms  # this folder's scripts share their timer

from fedgs.privacy.sanitizer import clip_rows, noise_std, sanitize
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorTrainer


def old_sanitize(rows: torch.Tensor, clip: float, sigma: float) -> torch.Tensor:
    """cfba070's sanitizer: float normals from a generator seeded with 63 secret bits."""
    clipped, _ = clip_rows(rows, clip)
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    return clipped + torch.randn(clipped.shape, generator=generator) * noise_std(clip, sigma)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50, help="timed calls per figure")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's)")
    a = parser.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    config = RunConfig()  # the defaults: batch 32, 5 critic steps, sigma 1.07, C 1
    settings = config.gswgan()
    dataset = dataset_for(config)
    trainer = GeneratorTrainer(dataset.num_classes, settings, seed=0)
    critic = PrivateCritic(*dataset.client_train(0), dataset.num_classes, settings, seed=0)
    (query,) = trainer.propose(1)
    trainer.apply([None])
    fakes = list(zip(query.images, query.labels, strict=True))
    rows = torch.randn(settings.batch_size, 784) * 0.05
    clip, sigma = settings.clip_norm, settings.noise_multiplier

    def step() -> None:
        critic.train_on(fakes, 1, settings.critic_steps)
        critic.answer(query.images[-1], query.labels[-1])

    before = median_ms(lambda: old_sanitize(rows, clip, sigma), a.repeats)
    after = median_ms(lambda: sanitize(rows, clip, sigma), a.repeats)
    step_ms = median_ms(step, max(5, a.repeats // 5))
    load = os.getloadavg()[0]
    print(
        f"reply {settings.batch_size} x 784, sigma {sigma}, C {clip}; torch threads "
        f"{torch.get_num_threads()}; load average {load:.2f}"
    )
    print(f"sanitizer before (seeded torch normals): {before:8.3f} ms")
    print(f"sanitizer after (ChaCha20, discrete Gaussian): {after:8.3f} ms")
    print(f"client step (critic steps + gradient + sanitizer): {step_ms:8.1f} ms")
    print(
        f"after - before = {after - before:.3f} ms = {100 * (after - before) / step_ms:.2f}% "
        f"of a step; after alone = {100 * after / step_ms:.2f}%"
    )


if __name__ == "__main__":
    main()
