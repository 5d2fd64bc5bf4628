"""The node's privacy policy: what a data holder agrees to release, whatever the server asks.

The server's run config may *ask* (a larger noise multiplier, a smaller batch, a tighter budget)
but never loosen the policy: a request outside it is refused before anything is trained or
recorded. In a deployment the policy comes from the node config (``flower-supernode
--node-config "policy-min-noise-multiplier=1.5 policy-epsilon-budget=5"``), with the safe
defaults below for absent keys; in a simulation the runner passes the user's own settings as the
policy (:meth:`NodePolicy.from_run_config`). Flower-free: the client's gate applies it.

A GS-WGAN, Fed-Avg GAN or DP-MERF node may also answer through secure aggregation
(``fedgs.client.secure_node``): the server then sees only the cohort's sum, noised by the
clients' shares of a distributed discrete Gaussian. The policy fixes the fewest survivors and
the smallest threshold it trusts that sum to (``min_cohort``, ``min_threshold``), and
``secagg_only`` answers no query any other way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from fedgs.algorithms import STRATEGIES, algorithm
from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.threat_models import UNTRUSTED_SERVER
from fedgs.run_config import RunConfig, SecureVector, coerce

PREFIX = "policy-"

# Deployment defaults for keys a node config leaves out (docs/privacy.md, node policy). The
# budget is one a data holder can defend: epsilon 10 per writer against an untrusted server
# (autodp-rdp, delta 1e-5). A run fits it when each node answers few, well-noised queries: e.g.
# `fedgs deploy local`'s defaults (sigma 12, batch 32, least-queried sampling, 20 steps over 3
# nodes: 7 queries, epsilon ~6.8 per node); the paper's sigma 1.07 at batch 32 spends ~39 on a
# single query, so such a run is refused from its first query, with this budget in the reason.
DEFAULT_MIN_NOISE_MULTIPLIER = 1.0
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_EPSILON_BUDGET = 10.0  # untrusted server, per client; strategies noised on the client
DEFAULT_CLIP_NORM = {  # others: RunConfig.clip_norm
    "fedavg-gan": RunConfig.fedavg_clip_norm,
    "dp-merf": RunConfig.merf_clip_norm,
}
# SecAgg+'s own floors: a secret shared with fewer than 2 holders is no secret
MIN_SECAGG_COHORT = MIN_SECAGG_THRESHOLD = 2


class PolicyViolation(ValueError):
    """A request or a node config outside the policy; the message is the reason sent back."""


@dataclass(frozen=True)
class NodePolicy:
    """The public privacy settings of one node (one data holder).

    ``min_noise_multiplier`` binds the noise key of a strategy noised on the client (GS-WGAN's
    sigma, DP-MERF's merf-noise-multiplier), and Fed-Avg GAN's z under secure aggregation (the
    sum's noise is then the clients' own); ``epsilon_budget`` binds the strategies whose clients
    keep a ledger (GS-WGAN, DP-MERF); ``clip_norm`` is the per-row bound C (GS-WGAN), the delta
    bound S (Fed-Avg GAN) or the release's bound (DP-MERF); ``epsilon_budget`` 0 means the node
    set no budget. ``secagg_only``, ``min_cohort`` (the fewest survivors, m_min) and
    ``min_threshold`` (SecAgg+'s t) bind secure aggregation, which GS-WGAN, Fed-Avg GAN and
    DP-MERF nodes serve.
    """

    strategy: str = "gswgan"
    min_noise_multiplier: float = DEFAULT_MIN_NOISE_MULTIPLIER
    clip_norm: float = RunConfig.clip_norm
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    delta: float = RunConfig.delta
    epsilon_budget: float = DEFAULT_EPSILON_BUDGET
    accountant: str = RunConfig.accountant
    secagg_only: bool = False
    min_cohort: int = 3
    min_threshold: int = 2

    def __post_init__(self) -> None:
        from fedgs.privacy.accountants import ACCOUNTANT_NAMES

        checks = [
            (self.strategy in STRATEGIES, f"strategy must be one of {', '.join(STRATEGIES)}"),
            (
                0 <= self.min_noise_multiplier < math.inf,
                "min-noise-multiplier must be >= 0 and finite",
            ),
            (0 < self.clip_norm < math.inf, "clip-norm must be positive and finite"),
            (self.max_batch_size >= 1, "max-batch-size must be >= 1"),
            (0 < self.delta < 1, "delta must lie in (0, 1)"),
            (
                0 <= self.epsilon_budget < math.inf,
                "epsilon-budget must be >= 0 and finite (0 = no budget)",
            ),
            (
                self.accountant in ACCOUNTANT_NAMES,
                f"accountant must be one of {', '.join(ACCOUNTANT_NAMES)}",
            ),
            (isinstance(self.secagg_only, bool), "secagg-only must be true or false"),
            (
                not self.secagg_only or algorithm(self.strategy).secure,
                "secagg-only binds nodes of a strategy answered through secure aggregation "
                f"({', '.join(a for a in STRATEGIES if algorithm(a).secure)})",
            ),
            (
                _is_int(self.min_cohort) and self.min_cohort >= MIN_SECAGG_COHORT,
                f"min-cohort must be an integer >= {MIN_SECAGG_COHORT}",
            ),
            (
                _is_int(self.min_threshold) and self.min_threshold >= MIN_SECAGG_THRESHOLD,
                f"min-threshold must be an integer >= {MIN_SECAGG_THRESHOLD}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise PolicyViolation(f"node policy: {message} (got {self})")

    @classmethod
    def deployment_default(cls, strategy: str = "gswgan") -> NodePolicy:
        """The policy of a node whose config names only ``policy-strategy`` (or nothing)."""
        if strategy not in STRATEGIES:
            raise PolicyViolation(
                f"node policy: policy-strategy must be one of {', '.join(STRATEGIES)}, "
                f"got {strategy!r}"
            )
        # replies of the other strategies carry no client-side noise: their guarantee needs a
        # trusted server or aggregator, so no untrusted-server budget can be enforced on them
        untrusted = algorithm(strategy).threat_model == UNTRUSTED_SERVER
        budget = DEFAULT_EPSILON_BUDGET if untrusted else 0.0
        clip = DEFAULT_CLIP_NORM.get(strategy, RunConfig.clip_norm)
        return cls(strategy=strategy, clip_norm=clip, epsilon_budget=budget)

    @classmethod
    def from_run_config(cls, config: RunConfig) -> NodePolicy:
        """A simulation's policy: the user's own settings (budget 0 = no budget, as passed;
        a secure run's nodes accept the m_min and threshold the user chose)."""
        entry = algorithm(config.strategy)  # its own clip and noise keys
        floors: dict[str, int] = {}
        if config.secure_aggregation:
            settings = config.secagg_settings()
            floors = {"min_cohort": settings.min_survivors, "min_threshold": settings.threshold}
        return cls(
            strategy=config.strategy,
            min_noise_multiplier=_value(config, entry.noise_key),
            clip_norm=_value(config, entry.clip_key or "clip-norm"),
            max_batch_size=config.batch_size,
            delta=config.delta,
            epsilon_budget=config.client_budget_epsilon,
            accountant=config.accountant,
            **floors,
        )

    @classmethod
    def from_node_config(
        cls, node_config: Mapping[str, Any], base: NodePolicy | None = None
    ) -> NodePolicy:
        """The ``policy-*`` keys of a node config over ``base`` (default: the deployment
        defaults of the strategy the node config names). Unknown keys and bad values raise."""
        known = {PREFIX + f.name.replace("_", "-"): f for f in fields(cls)}
        given = {k: v for k, v in node_config.items() if str(k).startswith(PREFIX)}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise PolicyViolation(
                f"unknown node-config key(s) {', '.join(unknown)} (known: {', '.join(known)})"
            )
        if base is None:
            base = cls.deployment_default(str(given.get(PREFIX + "strategy", "gswgan")))
        changes = {
            known[k].name: _coerce(v, getattr(base, known[k].name), k) for k, v in given.items()
        }
        return replace(base, **changes)

    def check_values(self, config: RunConfig) -> None:
        """Refuse (PolicyViolation) a run config the node would have to apply outside its
        policy: any non-finite value, a noise multiplier below its minimum, or another clip norm
        than its own (the node never clips with another, and a server that assumed one would
        misread every reply's scale)."""
        refuse_non_finite(config)
        self.check_noise(_value(config, algorithm(self.strategy).noise_key))
        key = algorithm(self.strategy).clip_key
        if key is None:
            return
        asked = _value(config, key)
        if not math.isclose(asked, self.clip_norm, rel_tol=1e-9):
            raise PolicyViolation(
                f"the run asks for {key} {asked:g}, but this node clips at {self.clip_norm:g} "
                f"(its policy-clip-norm): run with {key}={self.clip_norm:g}"
            )

    def check_noise(self, noise_multiplier: float) -> None:
        """Refuse a non-finite noise multiplier, or one below the node's minimum where the
        client adds the noise (the strategies whose headline is the untrusted server's)."""
        if not math.isfinite(noise_multiplier):
            raise PolicyViolation(f"noise multiplier {noise_multiplier} is not a finite number")
        noised_here = algorithm(self.strategy).threat_model == UNTRUSTED_SERVER
        if noised_here and noise_multiplier < self.min_noise_multiplier:
            key = algorithm(self.strategy).noise_key
            raise PolicyViolation(
                f"{key} {noise_multiplier:g} is below this node's minimum "
                f"{self.min_noise_multiplier:g} (its policy-min-noise-multiplier)"
            )

    def check_batch(self, batch_size: int) -> None:
        """Refuse a batch above the node's maximum."""
        if batch_size > self.max_batch_size:
            raise PolicyViolation(
                f"batch of {batch_size} is above this node's maximum of {self.max_batch_size}"
            )

    def check_request(self, noise_multiplier: float, batch_size: int) -> None:
        """Refuse (PolicyViolation) a query of this node's strategy outside the policy."""
        self.check_noise(noise_multiplier)
        self.check_batch(batch_size)

    def check_plain(self) -> None:
        """Refuse a query outside secure aggregation if the node answers only through it."""
        if self.secagg_only:
            raise PolicyViolation(
                f"this node answers {self.strategy} queries only through secure aggregation (its "
                "policy-secagg-only): send the query with its secagg-setup and secagg-noise records"
            )

    def check_secure(
        self,
        setup: Mapping[str, Any],
        noise: DistributedNoiseParams,
        config: RunConfig,
        vector: SecureVector,
    ) -> None:
        """Refuse (PolicyViolation) a secure query outside the policy.

        ``setup`` is the SecAgg+ setup (its ``min_survivors`` and ``threshold``, already
        checked as SecAgg+ parameters); ``config`` the run config the policy passed; ``vector``
        what this node would encode for the query (``RunConfig.secure_vector``: its clip from the
        node's own clip norm, its length from the query, the sum's noise scale and the run's
        multiplier). The noise must hold against the t - 1 colluders SecAgg+ allows, be scaled
        for this node's vector and carry, on the sum, at least the noise its trusted counterpart
        adds: the larger of the policy's minimum and the run's multiplier, times the scale.
        """
        if not algorithm(self.strategy).secure:
            raise PolicyViolation(
                f"this node serves {self.strategy}: it is never answered through secure aggregation"
            )
        survivors, threshold = setup["min_survivors"], setup["threshold"]
        central, clip, dimension = vector.central(noise.sigma), vector.clip, vector.dimension
        key = algorithm(self.strategy).noise_key
        refusals = [
            (
                survivors < self.min_cohort,
                f"secure aggregation with min_survivors {survivors} is below this node's "
                f"minimum cohort of {self.min_cohort} (its policy-min-cohort)",
            ),
            (
                threshold < self.min_threshold,
                f"SecAgg+ threshold {threshold} is below this node's minimum of "
                f"{self.min_threshold} (its policy-min-threshold)",
            ),
            (
                noise.m_min != survivors,
                f"the noise is split over m_min {noise.m_min} clients, but SecAgg+ releases a sum "
                f"of {survivors} (min_survivors): they must be equal",
            ),
            (
                noise.colluders < threshold - 1,
                f"the noise assumes {noise.colluders} colluders, but SecAgg+ with threshold "
                f"{threshold} allows {threshold - 1}: set colluders >= threshold - 1",
            ),
            (
                not math.isclose(noise.clip, clip, rel_tol=1e-9),
                f"the noise's clip {noise.clip:g} is not the {clip:g} this node clips its vector "
                f"to (its policy-clip-norm {self.clip_norm:g})",
            ),
            (
                noise.dimension != dimension,
                f"the noise's dimension {noise.dimension} is not the {dimension} values this "
                f"node would encode",
            ),
            (
                central < self.min_noise_multiplier,
                f"the secure sum's noise multiplier {central:g} (sigma / {vector.scale:g}) is "
                f"below this node's minimum {self.min_noise_multiplier:g}",
            ),
            (
                central < vector.multiplier,
                f"the secure sum's noise multiplier {central:g} (sigma / {vector.scale:g}) is "
                f"below the run's {key} {vector.multiplier:g}",
            ),
        ]
        for refused, reason in refusals:
            if refused:
                raise PolicyViolation(reason)

    def budget_under(self, requested: float) -> float:
        """The budget the client enforces: the policy's, or the run config's if tighter
        (a server may ask for more privacy, never less). 0 = none."""
        budgets = [b for b in (self.epsilon_budget, requested) if b > 0]
        return min(budgets, default=0.0)

    def applied_to(self, config: RunConfig) -> RunConfig:
        """``config`` with the node's own clip norm, delta, accountant, budget and strategy;
        PolicyViolation if the run config, valid as sent, is not under them (another strategy's
        options, secure aggregation with a non-RDP accountant)."""
        key = algorithm(self.strategy).clip_key or "clip-norm"
        clip = {key.replace("-", "_"): self.clip_norm}
        try:
            return config.with_updates(
                strategy=self.strategy,
                delta=self.delta,
                accountant=self.accountant,
                client_budget_epsilon=self.budget_under(config.client_budget_epsilon),
                **clip,
            )
        except (ValueError, ArithmeticError) as error:
            raise PolicyViolation(
                f"under this node's policy the run config fails: {error}"
            ) from error


def refuse_non_finite(config: RunConfig) -> None:
    """Every number a node is asked to apply must be finite: a NaN or infinite value would pass
    every comparison against the policy (NaN < minimum is false) and reach the mechanism."""
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            key = f.name.replace("_", "-")
            raise PolicyViolation(
                f"run-config '{key}' is {value}: a node applies finite values only"
            )


def _value(config: RunConfig, key: str) -> Any:
    """The run config's value of a registry key ("merf-clip-norm" -> merf_clip_norm)."""
    return getattr(config, key.replace("-", "_"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _coerce(value: Any, default: Any, key: str) -> Any:
    try:
        return coerce(value, default, key, "node-config")
    except ValueError as error:
        raise PolicyViolation(str(error)) from error
