"""Where the server's client sampling gets its randomness, and what that means for privacy.

The amplified figures (GS-WGAN's trusted-sampler epsilon, Fed-Avg GAN's Poisson-sampled
DP-FedAvg epsilon) assume nobody but the sampler can predict which clients a step asks. So by
default the sampler is a ChaCha20 stream under a key from the operating system
(``fedgs.privacy.randomness.SecureRandom``): no seed exists, its key is never written to disk,
and a resumed run gets a fresh key. A fixed ``sampling-seed``
makes runs reproducible, and then the report says that those amplified figures do not hold
(anyone who knows the seed knows who was sampled); the untrusted-server figure, which assumes
nothing about sampling, is unaffected.

GS-WGAN may also choose clients by the ``least-queried`` rule: each step asks the m clients that
have paid the fewest queries so far (ties broken by the sampler). The rule reads only the public
ledger, never client data, so the untrusted-server figure holds as it is; every client then
answers about equally often, so a run reaches more steps before its most-queried client reaches
a target epsilon. The choice is not uniform, so no amplified figure holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedgs.privacy.randomness import SecureRandom

SECRET = -1  # the run-config value of ``sampling-seed`` that asks for secret randomness

# What a strategy samples clients with: both offer ``random(n)`` and ``choice(n, m, replace=False)``
Sampler = np.random.Generator | SecureRandom

FIXED_SEED_NOTE = (
    "sampling used a fixed seed (reproducible run): whoever knows the seed knows which clients "
    "each step asked, so this amplified figure does NOT hold; quote the untrusted-server epsilon"
)


FIXED_SEED_REASON = "fixed sampling-seed, sampling was predictable"

UNIFORM, LEAST_QUERIED = "uniform", "least-queried"
RULES = (UNIFORM, LEAST_QUERIED)

LEAST_QUERIED_REASON = "clients chosen least-queried first, not at random"
LEAST_QUERIED_NOTE = (
    "clients were chosen least-queried first (the fewest paid queries so far), not uniformly at "
    "random: no amplification by subsampling holds; quote the untrusted-server epsilon"
)


@dataclass(frozen=True)
class ClientSampling:
    """The sampler of one run, its rule, and whether its choices are secret."""

    seed: int  # SECRET, or the fixed seed
    rule: str = UNIFORM

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown client-sampling {self.rule!r} (known: {', '.join(RULES)})")

    @property
    def secret(self) -> bool:
        return self.seed == SECRET

    def generator(self) -> Sampler:
        """A fresh sampler: a new ChaCha20 key, or (reproducible by choice, amplification void)
        NumPy's generator at the fixed seed."""
        if self.secret:
            return SecureRandom()
        return np.random.default_rng(self.seed)  # reproducible-run option: no secret to keep

    def saved_state(self, sampler: Sampler) -> dict[str, Any] | None:
        """What a checkpoint keeps of the sampler: nothing when the choice must stay secret."""
        if isinstance(sampler, SecureRandom):
            return None
        return sampler.bit_generator.state

    def report(self) -> dict[str, Any]:
        """The ``sampling`` block of privacy.json (``why_void``: the summary's short reason)."""
        notes, reasons = [], []
        if not self.secret:
            notes.append(FIXED_SEED_NOTE)
            reasons.append(FIXED_SEED_REASON)
        if self.rule == LEAST_QUERIED:
            notes.append(LEAST_QUERIED_NOTE)
            reasons.append(LEAST_QUERIED_REASON)
        randomness = (
            "secret (ChaCha20 keyed by the operating system); not saved"
            if self.secret
            else f"fixed sampling-seed {self.seed} (reproducible)"
        )
        block: dict[str, Any] = {"randomness": randomness, "rule": self.rule}
        block["amplified_figures_hold"] = not notes
        if notes:
            block |= {"note": "; ".join(notes), "why_void": "; ".join(reasons)}
        return block
