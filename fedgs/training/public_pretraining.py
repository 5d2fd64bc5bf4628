"""Pre-train the server's generator on public images before any private step.

Why: GS-WGAN's private signal is a clipped, noised gradient per query; a generator that already
draws digit shapes spends those queries on the clients' style instead of on finding strokes
(issue 21). The images are public (`fedgs.data.public_digits`), the critic used here lives on the
server and is discarded, so nothing in this phase touches client data or costs privacy; runs that
use it say so in privacy.json and the summary ("public pretraining").
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from fedgs import stopping
from fedgs.data.cache import cache_root
from fedgs.data.public_digits import RENDER_VERSION, cached_digits
from fedgs.models import ConditionalDCGANDiscriminator, critic_loss
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import write_atomic

PUBLIC_SOURCE = "digits rendered from matplotlib's fonts (fedgs.data.public_digits)"
PUBLIC_IMAGES = 10_000  # rendered once per machine and seed (~1 minute), then cached
# what of G's config the phase reads (the private settings, noise included, do not shape it)
_PHASE_SETTINGS = ("z_dim", "generator_width", "critic_width", "beta1", "beta2", "gp_weight")


@dataclass(frozen=True)
class PublicPretraining:
    """What the phase did: recorded with the run so its results say they used public data."""

    source: str
    images: int
    steps: int
    batch_size: int
    critic_steps: int
    seconds: float
    # read from the fedgs cache instead of trained anew (same digits, steps, seed and initial G)
    cached: bool = False

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def pretrain_generator(
    trainer: GeneratorTrainer,
    images: torch.Tensor,
    labels: torch.Tensor,
    steps: int,
    batch_size: int = 64,
    critic_steps: int = 2,
    lr: float = 2e-4,
    seed: int = 0,
) -> PublicPretraining:
    """``steps`` non-private conditional WGAN-GP steps of ``trainer``'s G on public images; its
    EMA copy then starts from the result and its optimizer from fresh moments."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    started = time.monotonic()
    config, device = trainer.config, trainer.device
    rng = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        critic = ConditionalDCGANDiscriminator(trainer.num_classes, config.critic_width).to(device)
    betas = (config.beta1, config.beta2)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=lr, betas=betas)
    generator = trainer.generator
    generator_opt = torch.optim.Adam(generator.parameters(), lr=lr, betas=betas)
    images, labels = images.to(device), labels.to(device)

    def real_batch() -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(images.shape[0], (batch_size,), generator=rng).to(device)
        return images[idx], labels[idx]

    def fake_batch() -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.randn(batch_size, config.z_dim, generator=rng).to(device)
        y = torch.randint(trainer.num_classes, (batch_size,), generator=rng).to(device)
        return generator(z, y), y

    generator.train()
    with tqdm(range(steps), desc="public pretraining", unit="step", mininterval=5.0) as bar:
        for _ in bar:
            stopping.check("stopped in public pretraining")  # G half pre-trained: not kept
            for _ in range(critic_steps):
                with torch.no_grad():
                    fake, fake_labels = fake_batch()
                loss = critic_loss(critic, *real_batch(), fake, fake_labels, config.gp_weight)
                critic_opt.zero_grad(set_to_none=True)
                loss.loss.backward()
                critic_opt.step()
            fake, fake_labels = fake_batch()
            generator_opt.zero_grad(set_to_none=True)
            (-critic(fake, fake_labels).mean()).backward()
            generator_opt.step()
    trainer.restart_from_generator()
    return PublicPretraining(
        PUBLIC_SOURCE,
        int(images.shape[0]),
        steps,
        batch_size,
        critic_steps,
        round(time.monotonic() - started, 1),
    )


def pretrain_on_public_digits(
    trainer: GeneratorTrainer, steps: int, seed: int = 0, cache_dir: str | Path | None = None
) -> PublicPretraining:
    """Render the public digits and pre-train ``trainer``'s G on them (the run's entry point).

    Why a cache: every run of a privacy-utility grid with one seed starts from the same G and
    the same public phase (1,000 steps, ~9 minutes of a core); the pre-trained G is stored under
    the fedgs cache keyed by everything that shapes it, its initial weights included, and read
    back by the next run. Public data only: nothing in it depends on any client."""
    started = time.monotonic()
    path = _cache_path(trainer, steps, seed, cache_dir)
    if path.is_file():
        stored = torch.load(path, map_location=trainer.device)
        trainer.generator.load_state_dict(stored["generator"])
        trainer.restart_from_generator()
        record = PublicPretraining(**stored["record"])
        return replace(record, seconds=round(time.monotonic() - started, 1), cached=True)
    images, labels = cached_digits(PUBLIC_IMAGES, seed=seed, cache_dir=cache_dir)
    with torch.random.fork_rng(devices=[]):  # a hit and a miss leave the same global RNG
        done = pretrain_generator(trainer, images, labels, steps, seed=seed)
    done = replace(done, seconds=round(time.monotonic() - started, 1))
    payload = io.BytesIO()
    torch.save({"generator": trainer.generator.state_dict(), "record": done.to_dict()}, payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, payload.getvalue())  # a crash or a concurrent run leaves no half file
    return done


def _cache_path(
    trainer: GeneratorTrainer, steps: int, seed: int, cache_dir: str | Path | None
) -> Path:
    """One file per (public digits, phase settings, G's config and initial weights, device)."""
    initial = hashlib.sha256()
    for name, tensor in sorted(trainer.generator.state_dict().items()):
        initial.update(name.encode())
        initial.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    key = {
        "render_version": RENDER_VERSION,
        "images": PUBLIC_IMAGES,
        "steps": steps,
        "seed": seed,
        "num_classes": trainer.num_classes,
        "config": {name: getattr(trainer.config, name) for name in _PHASE_SETTINGS},
        "initial_generator": initial.hexdigest(),
        "device": torch.device(trainer.device).type,
        "torch": torch.__version__,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    return cache_root(cache_dir) / "public_pretraining" / f"generator-{digest[:24]}.pt"


def public_data_record(steps: int) -> dict[str, object]:
    """privacy.json's note on public data: present only when a run used some, so a figure never
    hides that its generator started from more than the clients' data."""
    if steps <= 0:
        return {}
    return {
        "public_data": {
            "source": PUBLIC_SOURCE,
            "images": PUBLIC_IMAGES,
            "pretrain_steps": steps,
            "privacy_cost": "none: rendered from fonts, no client data; used before any query",
        }
    }
