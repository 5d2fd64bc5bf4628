"""Controls scored next to every generator: what a score is worth is what it beats.

Each control is a sampler ``labels -> images`` (images in [-1, 1]) scored exactly like a run:

- ``real training writers``: real images of the training writers (the real-vs-real floor: what
  perfect samples of the clients' data would score against the evaluation writers);
- ``lookup k=1`` / ``lookup k=5``: k fixed real training images per class, repeated (a "generator"
  that memorised k images per class; a score that does not beat it measures nothing useful);
- ``public fonts`` (digit splits only): font digits rendered from matplotlib's fonts
  (`fedgs.data.public_digits`, the set public pretraining trains on): what public data gives
  with no private data at all, so a private result is worth something only above it;
- ``untrained generator``: GS-WGAN's generator at initialisation (seed 0, fedgs default width);
- ``flat grey``: every pixel at mid-grey.

Every 10-class split fedgs loads is digits with label index = digit (FEMNIST ``digits`` keeps
LEAF's classes 0-9, the digits '0'-'9'; MNIST and the embedded set are digits), so the public
fonts control exists exactly where ``num_classes`` is 10.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from fedgs.data.public_digits import NUM_CLASSES as DIGITS
from fedgs.data.public_digits import RENDER_VERSION, cached_digits
from fedgs.models import ConditionalResNetGenerator
from fedgs.training.public_pretraining import PUBLIC_IMAGES

Sampler = Callable[[torch.Tensor], torch.Tensor]
LOOKUP_SIZES = (1, 5)
FLOOR = "real training writers"
PUBLIC_FONTS = "public fonts"
PUBLIC_FONT_IMAGES = PUBLIC_IMAGES  # the public pretraining set's size, rendered at seed 0
PUBLIC_FONT_SEED = 0


def _per_class_rows(labels: torch.Tensor, num_classes: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for c in range(num_classes):
        where = torch.nonzero(labels == c).flatten()
        if len(where) == 0:
            raise ValueError(f"no real training image of class {c} for the controls")
        rows.append(where[torch.randperm(len(where), generator=generator)])
    return rows


def real_sampler(images: torch.Tensor, labels: torch.Tensor, num_classes: int, seed: int = 0):
    """Distinct real images of each requested class, in a seeded order (cycling if too few)."""
    rows = _per_class_rows(labels, num_classes, seed)

    def sample(requested: torch.Tensor) -> torch.Tensor:
        picked = torch.empty(len(requested), dtype=torch.long)
        for c in range(num_classes):
            where = torch.nonzero(requested == c).flatten()
            picked[where] = rows[c][torch.arange(len(where)) % len(rows[c])]
        return images[picked]

    return sample


def lookup_sampler(
    images: torch.Tensor, labels: torch.Tensor, num_classes: int, k: int, seed: int = 0
) -> Sampler:
    """k fixed real images per class, repeated: a lookup table, not a generator."""
    rows = _per_class_rows(labels, num_classes, seed)
    kept_labels = torch.cat([torch.full((min(k, len(r)),), c) for c, r in enumerate(rows)])
    kept = torch.cat([r[:k] for r in rows])
    return real_sampler(images[kept], kept_labels, num_classes, seed)


def public_fonts_sampler(count: int, seed: int = 0) -> Sampler:
    """Distinct public font digits of each requested digit in a seeded order, as `real_sampler`
    draws real ones; the set is loaded (rendered once per machine, ~1 minute) at the first draw
    only, so a control row read from the cache costs nothing."""

    @cache
    def drawn() -> Sampler:
        return real_sampler(*cached_digits(count, seed), DIGITS, seed)

    def sample(requested: torch.Tensor) -> torch.Tensor:
        return drawn()(requested)

    return sample


def provenance(name: str) -> dict[str, Any]:
    """What a control's row depends on besides the split and the instrument's settings (part of
    its cache key): the public fonts row also on the rendered set, the others on nothing more."""
    if name != PUBLIC_FONTS:
        return {}
    return {"public_digits": [RENDER_VERSION, PUBLIC_FONT_IMAGES, PUBLIC_FONT_SEED]}


def untrained_sampler(num_classes: int, width: int = 16, z_dim: int = 10, seed: int = 0) -> Sampler:
    """GS-WGAN's generator as initialised with ``seed`` (fedgs's default width 16)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ConditionalResNetGenerator(num_classes, z_dim, width).eval()
    latents = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def sample(requested: torch.Tensor) -> torch.Tensor:
        z = torch.randn(len(requested), z_dim, generator=latents)
        return torch.cat(
            [model(a, b) for a, b in zip(z.split(1000), requested.split(1000), strict=True)]
        )

    return sample


def grey_sampler(requested: torch.Tensor) -> torch.Tensor:
    """Mid-grey everywhere (0 in [-1, 1])."""
    return torch.zeros(len(requested), 1, 28, 28)


def controls(training: tuple[torch.Tensor, torch.Tensor], num_classes: int) -> dict[str, Sampler]:
    """The controls, in table order, built from the clients' (training writers') images (and
    public fonts where the classes are the 10 digits)."""
    images, labels = training
    named: dict[str, Sampler] = {FLOOR: real_sampler(images, labels, num_classes)}
    for k in LOOKUP_SIZES:
        named[f"lookup k={k}"] = lookup_sampler(images, labels, num_classes, k)
    if num_classes == DIGITS:
        named[PUBLIC_FONTS] = public_fonts_sampler(PUBLIC_FONT_IMAGES, PUBLIC_FONT_SEED)
    named["untrained generator"] = untrained_sampler(num_classes)
    named["flat grey"] = grey_sampler
    return named
