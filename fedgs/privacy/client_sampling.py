"""Where the server's client sampling gets its randomness, and what that means for privacy.

The amplified figures (GS-WGAN's trusted-sampler epsilon, Fed-Avg GAN's Poisson-sampled
DP-FedAvg epsilon) assume nobody but the sampler can predict which clients a step asks. So by
default the sampler is seeded from the operating system's secret randomness (``secrets``), its
state is never written to disk, and a resumed run draws a fresh seed. A fixed ``sampling-seed``
makes runs reproducible, and then the report says that those amplified figures do not hold
(anyone who knows the seed knows who was sampled); the untrusted-server figure, which assumes
nothing about sampling, is unaffected.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

SECRET = -1  # the run-config value of ``sampling-seed`` that asks for secret randomness

FIXED_SEED_NOTE = (
    "sampling used a fixed seed (reproducible run): whoever knows the seed knows which clients "
    "each step asked, so this amplified figure does NOT hold; quote the untrusted-server epsilon"
)


@dataclass(frozen=True)
class ClientSampling:
    """The sampler of one run and whether its choices are secret."""

    seed: int  # SECRET, or the fixed seed

    @property
    def secret(self) -> bool:
        return self.seed == SECRET

    def generator(self) -> np.random.Generator:
        """A fresh sampler: 128 secret bits, or the fixed seed."""
        return np.random.default_rng(secrets.randbits(128) if self.secret else self.seed)

    def saved_state(self, sampler: np.random.Generator) -> dict[str, Any] | None:
        """What a checkpoint keeps of the sampler: nothing when the choice must stay secret."""
        return None if self.secret else sampler.bit_generator.state

    def report(self) -> dict[str, Any]:
        """The ``sampling`` block of privacy.json."""
        if self.secret:
            return {
                "randomness": "secret (operating system, Python secrets); not saved",
                "amplified_figures_hold": True,
            }
        return {
            "randomness": f"fixed sampling-seed {self.seed} (reproducible)",
            "amplified_figures_hold": False,
            "note": FIXED_SEED_NOTE,
        }
