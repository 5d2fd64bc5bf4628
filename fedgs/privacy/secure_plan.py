"""What a secure-aggregation run would charge, computed before it starts (``fedgs privacy
--secure-aggregation``).

Why through a RunConfig: the planner builds the run's own configuration and calls its methods
(``secagg_settings``, ``secure_vector``, ``secure_noise``), so the run config's validation, its
defaults and its calibrated distributed discrete Gaussian are the planner's too, with no second
copy to drift. A secure step is charged as a run's ledger charges it
(``distributed_accounting.step_event``, composed by ``client_ledger.signature_epsilon``, the
ledger's own evaluation), and the ``ddg-rdp`` and local-noise-only figures are those a secure run
reports beside its headline (``fedgs.server.secure_exchange.secure_summary``; a test keeps them
equal).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from fedgs.algorithms import ALGORITHMS
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.calibration import DEFAULT_TOLERANCE, bisect_multiplier
from fedgs.privacy.client_ledger import signature_epsilon
from fedgs.privacy.distributed_accounting import (
    distributed_epsilon,
    local_share_event,
    step_event,
)
from fedgs.privacy.distributed_noise import Calibration
from fedgs.run_config import RunConfig, SecAggSettings

MASKED_VALUE_BYTES = 8  # a masked input travels as int64 values (fedgs.protocols.secagg)
FEDAVG_CLASSES = 10  # the digits every Fed-Avg GAN recipe trains on: its critic's label inputs
SEARCH_RANGE = (1e-2, 1e3)  # noise multipliers the calibration searches, as the local one


@dataclass(frozen=True)
class SecureRun:
    """The run-config values a plan holds fixed; the cohort and the noise vary."""

    strategy: str
    batch_size: int
    delta: float
    accountant: str
    client_sampling: str
    options: tuple[tuple[str, Any], ...] = ()  # other run-config keys given (secagg-*, ...)

    def config(self, cohort: int, noise_multiplier: float) -> RunConfig:
        """The run's RunConfig, under its own key names; ValueError with the run's reason."""
        entry = ALGORITHMS[self.strategy]
        if entry.cohort_key is None:
            raise ValueError(f"{self.strategy} is never answered through secure aggregation")
        values: dict[str, Any] = {
            "strategy": self.strategy,
            "secure-aggregation": True,
            entry.cohort_key: cohort,
            entry.noise_key: noise_multiplier,
            "batch-size": self.batch_size,
            "delta": self.delta,
            "accountant": self.accountant,
            "client-sampling": self.client_sampling,
            **dict(self.options),
        }
        return RunConfig.from_user_config(values)

    def step(self, cohort: int, noise_multiplier: float) -> SecureStep:
        """One secure step of a cohort at this central noise multiplier, as the run runs it."""
        config = self.config(cohort, noise_multiplier)
        calibration = config.secure_noise(config.secure_vector(vector_length(config)))
        relation = ALGORITHMS[self.strategy].neighbouring
        return SecureStep(
            config,
            config.secagg_settings(),
            calibration,
            relation,
            step_event(calibration.params, relation),
        )


@dataclass(frozen=True)
class SecureStep:
    """A secure step: its run config, SecAgg+ settings, calibrated noise and ledger charge."""

    config: RunConfig
    settings: SecAggSettings
    calibration: Calibration
    relation: str
    event: dp_event.GaussianDpEvent

    @property
    def honest_survivors(self) -> int:
        """m_min - (t - 1): the survivors whose noise shares carry the central noise."""
        return self.calibration.params.noisy_clients

    @property
    def survivor_std(self) -> float:
        """The noise std per coordinate one honest survivor adds (float units)."""
        return self.calibration.params.sigma / math.sqrt(self.honest_survivors)

    @property
    def survivor_noise_multiplier(self) -> float:
        """``survivor_std`` in the noise key's units, the central multiplier over sqrt(h)."""
        vector = self.config.secure_vector(self.calibration.params.dimension)
        return vector.central(self.survivor_std)

    def headline_epsilon(self, queries: int) -> float:
        """A client's epsilon after ``queries`` secure steps, as the run's ledger composes them
        (its accountant; the secure-aggregation headline)."""
        if queries == 0:
            return 0.0
        acct = get_accountant(self.config.accountant)
        return signature_epsilon(((self.event, queries),), self.config.delta, acct)

    def epsilons(self, queries: int) -> dict[str, float]:
        """The three figures a secure run reports for a client of ``queries`` steps, under the
        run's metrics column names, and the local-noise-only event's multiplier."""
        params, delta = self.calibration.params, self.config.delta
        local = local_share_event(params, self.relation)
        acct = get_accountant(self.config.accountant)
        composed = dp_event.SelfComposedDpEvent(local, queries)
        return {
            "epsilon_secure_aggregation": self.headline_epsilon(queries),
            "epsilon_secure_aggregation_ddg_rdp": distributed_epsilon(
                params, queries, delta, self.relation
            ).epsilon,
            "epsilon_local_noise_only": acct.epsilon(composed, delta) if queries else 0.0,
            "local_noise_multiplier": local.noise_multiplier,
        }

    def payload_bytes(self) -> dict[str, int]:
        """Bytes per client and secure query, payload only: the query's float payload down, the
        int64 masked vector up, and the float32 reply the same query sends without SecAgg+."""
        plain = ALGORITHMS[self.config.strategy].update_bytes_of(self.config)
        if plain is None:
            raise ValueError(f"{self.config.strategy} states no bytes per update")
        return {
            "down": plain["down"],
            "up": MASKED_VALUE_BYTES * self.calibration.params.padded_dimension,
            "plain_up": plain["up"],
        }


def vector_length(config: RunConfig) -> int:
    """The length of one client's secure vector in a run of ``config``: GS-WGAN's B rows of
    784, the Fed-Avg GAN critic's parameter count (its critic built for the digits), or
    DP-MERF's (D + 1) x classes release."""
    if config.strategy == "fedavg-gan":
        fedavg = config.fedavg_gan()
        return _critic_parameters(fedavg.models, fedavg.critic_width)
    if config.strategy == "dp-merf":
        return config.merf_dimension
    if config.strategy != "gswgan":
        raise ValueError(f"no secure vector length is known for {config.strategy}")
    from fedgs.data.federated import PIXELS

    return config.batch_size * PIXELS


@functools.lru_cache(maxsize=8)
def _critic_parameters(models: str, critic_width: int) -> int:
    from fedgs.training.fedavg_gan import build_critic
    from fedgs.training.hparams import FedAvgGANConfig

    critic = build_critic(FedAvgGANConfig(models=models, critic_width=critic_width), FEDAVG_CLASSES)
    return sum(p.numel() for p in critic.parameters())


def calibrate(
    run: SecureRun,
    cohort: int,
    queries: int,
    target_epsilon: float,
    tolerance: float = DEFAULT_TOLERANCE,
) -> float:
    """The smallest central noise multiplier (within ``tolerance``) whose headline epsilon after
    ``queries`` secure steps is <= the target; ValueError when even the search range's top
    misses it (the k-bit modulus bounds the grid, and its rounding sets a floor)."""
    low, high = SEARCH_RANGE

    def meets(sigma: float) -> bool:
        return run.step(cohort, sigma).headline_epsilon(queries) <= target_epsilon

    if not meets(high):
        floor = run.step(cohort, high).headline_epsilon(queries)
        raise ValueError(
            f"epsilon {target_epsilon:g} is unreachable for cohort {cohort} at {queries} "
            f"queries: even noise multiplier {high:g} gives {floor:.4g} (the rounding to a "
            f"{run.config(cohort, high).secagg_bits}-bit grid sets a floor: raise secagg-bits, or "
            "plan fewer queries)"
        )
    return bisect_multiplier(meets, low, high, tolerance)
