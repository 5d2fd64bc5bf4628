"""Epsilon of the distributed discrete Gaussian (``fedgs.privacy.distributed_noise``).

Why its own accountant: the cohort's noise is a sum of discrete Gaussians, which is not a
discrete Gaussian, so the continuous Gaussian's RDP is not a proven bound for it. Kairouz, Liu
and Steinke (ICML 2021, Theorem 1 and its RDP form, Proposition 14) bound it: for n independent
N_Z(0, sigma^2) per coordinate, d coordinates and tau = 10 * sum_{j=1}^{n-1}
exp(-2 pi^2 sigma^2 j / (j + 1)), a shift of L2 norm D2 and L1 norm D1 has Renyi divergence of
order alpha at most the least of

    alpha/2 * s2^2 + tau d,  alpha/2 * (s2^2 + 2 s1 tau + tau^2 d),  alpha/2 * (s2 + tau sqrt(d))^2

with s2 = D2 / (sqrt(n) sigma), s1 = D1 / (sqrt(n) sigma). Sensitivities are in integer units
after the conditional rounding: D2 = sqrt(max_norm_squared) for one client's rounded vector and
D1 = D2 * min(sqrt(d), D2) (an integer vector has L1 <= sqrt(d) L2 and L1 <= L2^2).

Neighbouring relation (user level, one client = one writer): add-remove is the client's data
present or absent while the client still takes part (its vector zero, its noise share sent:
the server sees who ran the protocol), so the shift is one rounded vector, D2 and D1 as above;
replace-one changes one client's vector, twice both by the triangle inequality. The noise
counted is that of the m_min - colluders honest survivors: more survivors only add independent
noise (post-processing), and colluders' noise is known to the server.

Composition: the server knows each cohort, so there is no amplification by sampling; a client's
RDP is ``steps`` times a step's. RDP to (epsilon, delta): Canonne, Kamath and Steinke 2020
(also Asoodeh et al. 2021), epsilon = min over real alpha > 1 of rdp(alpha) + log(1/delta) /
(alpha - 1) + log(1 - 1/alpha) - log(alpha) / (alpha - 1), minimised numerically.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event
from scipy import optimize

from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.threat_models import ADD_REMOVE, REPLACE_ONE, SECURE_AGGREGATION

ACCOUNTANT = "ddg-rdp"
_ALPHA_GRID = 1.0 + np.logspace(-5, 7, 2401)  # orders searched before a local refinement


def sum_tau(client_sigma: float, clients: int) -> float:
    """The paper's tau: how far a sum of ``clients`` discrete Gaussians is from one."""
    j = np.arange(1, clients)
    return float(10 * np.exp(-2 * math.pi**2 * client_sigma**2 * j / (j + 1)).sum())


def ddg_rdp(
    alphas: np.ndarray, l2: float, l1: float, client_sigma: float, clients: int, dimension: int
) -> np.ndarray:
    """Renyi divergence bound at each order for a shift of norms ``l2``, ``l1`` (integer units)
    of the sum of ``clients`` N_Z(0, client_sigma^2) noises in ``dimension`` coordinates."""
    alphas = np.asarray(alphas, dtype=np.float64)
    tau = sum_tau(client_sigma, clients)
    s2 = l2 / (math.sqrt(clients) * client_sigma)
    s1 = l1 / (math.sqrt(clients) * client_sigma)
    return np.minimum.reduce(
        [
            alphas / 2 * s2**2 + tau * dimension,
            alphas / 2 * (s2**2 + 2 * s1 * tau + tau**2 * dimension),
            alphas / 2 * (s2 + tau * math.sqrt(dimension)) ** 2,
        ]
    )


def sensitivities(params: DistributedNoiseParams, relation: str) -> tuple[float, float]:
    """(L2, L1) distance between neighbouring cohorts' rounded sums, integer units."""
    factors = {ADD_REMOVE: 1, REPLACE_ONE: 2}
    if relation not in factors:
        raise ValueError(f"relation must be {ADD_REMOVE!r} or {REPLACE_ONE!r}, got {relation!r}")
    l2 = math.nextafter(math.sqrt(params.max_norm_squared), math.inf)  # never below the root
    l1 = l2 * min(math.sqrt(params.padded_dimension), l2)
    return factors[relation] * l2, factors[relation] * l1


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def rdp_to_epsilon(rdp: Callable[[np.ndarray], np.ndarray], delta: float) -> tuple[float, float]:
    """(epsilon, order): the CKS 2020 conversion of an RDP curve, minimised over alpha > 1."""
    _check_delta(delta)

    def epsilon(alphas: np.ndarray) -> np.ndarray:
        alphas = np.asarray(alphas, dtype=np.float64)
        return (
            rdp(alphas)
            + (math.log(1 / delta) - np.log(alphas)) / (alphas - 1)
            + np.log1p(-1 / alphas)
        )

    values = epsilon(_ALPHA_GRID)
    best = int(np.argmin(values))
    low, high = _ALPHA_GRID[max(best - 1, 0)], _ALPHA_GRID[min(best + 1, _ALPHA_GRID.size - 1)]
    refined = optimize.minimize_scalar(
        lambda a: float(epsilon(np.array([a]))[0]), bounds=(low, high), method="bounded"
    )
    if refined.fun < values[best]:
        return max(0.0, float(refined.fun)), float(refined.x)
    return max(0.0, float(values[best])), float(_ALPHA_GRID[best])


@dataclass(frozen=True)
class DistributedEpsilon:
    """An epsilon with everything it is stated for."""

    epsilon: float
    delta: float
    order: float | None  # the RDP order that gave it; None for no steps
    steps: int
    relation: str
    m_min: int
    colluders: int
    noise_multiplier: float
    dimension: int
    bits: int
    gamma: float
    threat_model: str = SECURE_AGGREGATION
    accountant: str = ACCOUNTANT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def distributed_epsilon(
    params: DistributedNoiseParams, steps: int, delta: float, relation: str
) -> DistributedEpsilon:
    """A client's epsilon at ``delta`` after taking part in ``steps`` secure sums."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    _check_delta(delta)
    l2, l1 = sensitivities(params, relation)
    if steps == 0:
        epsilon, order = 0.0, None
    else:
        n, d = params.noisy_clients, params.padded_dimension
        epsilon, order = rdp_to_epsilon(
            lambda alphas: steps * ddg_rdp(alphas, l2, l1, params.client_sigma, n, d), delta
        )
    return DistributedEpsilon(
        epsilon,
        delta,
        order,
        steps,
        relation,
        params.m_min,
        params.colluders,
        params.noise_multiplier,
        params.dimension,
        params.bits,
        params.gamma,
    )


def step_event(params: DistributedNoiseParams, relation: str) -> dp_event.GaussianDpEvent:
    """One secure sum as the Gaussian event of the same zero-concentrated bound, for ledgers.

    The third bound above is alpha/2 * (s2 + tau sqrt(d))^2 at every order: exactly the RDP of a
    Gaussian of noise multiplier 1 / (s2 + tau sqrt(d)). So a ledger that composes Gaussian
    events with an RDP accountant composes secure steps too, with the client's other queries,
    never below this module's own figure (which takes the least of the three bounds)."""
    l2, _ = sensitivities(params, relation)
    n, d = params.noisy_clients, params.padded_dimension
    s2 = l2 / (math.sqrt(n) * params.client_sigma)
    return dp_event.GaussianDpEvent(1.0 / (s2 + sum_tau(params.client_sigma, n) * math.sqrt(d)))


def local_share_event(params: DistributedNoiseParams, relation: str) -> dp_event.GaussianDpEvent:
    """What one client's own noise share guarantees if the secure-aggregation assumption fails
    (the server sees its vector alone): a Gaussian of std ``client_sigma`` at its sensitivity."""
    l2, _ = sensitivities(params, relation)
    return dp_event.GaussianDpEvent(params.client_sigma / l2)
