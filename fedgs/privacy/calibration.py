"""Noise calibration: the smallest noise multiplier that meets a target epsilon.

Epsilon falls monotonically as the noise multiplier grows (for every model here), so a
bisection brackets the answer sigma* with epsilon(sigma*) <= target < epsilon(sigma* - tol).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from dp_accounting import dp_event

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, check_delta, get_accountant
from fedgs.privacy.events import trusted_sampler_event, untrusted_client_event
from fedgs.privacy.threat_models import TRUSTED_SAMPLER, UNTRUSTED_SERVER

Model = Literal["untrusted-server", "untrusted", "trusted-sampler"]
DEFAULT_TOLERANCE = 1e-3


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    *,
    batch_size: int,
    queries_per_client: float | None = None,
    steps: int | None = None,
    clients: int | None = None,
    clients_per_step: int = 1,
    model: Model = UNTRUSTED_SERVER,
    accountant: Accountant | str = DEFAULT_ACCOUNTANT,
    tolerance: float = DEFAULT_TOLERANCE,
    search_range: tuple[float, float] = (1e-2, 1e3),
) -> float:
    """Smallest noise multiplier sigma (within ``tolerance``) whose epsilon is <= target.

    ``untrusted-server`` (or ``untrusted``): a client answering ``queries_per_client``
    queries (use the most-queried client's count for a run guarantee; a fractional expected
    count is allowed).
    ``trusted-sampler``: ``steps`` steps, each sampling ``clients_per_step`` of ``clients``.
    Returns the lower end of ``search_range`` if that already meets the target; raises
    ValueError if even its upper end does not.
    """
    model = UNTRUSTED_SERVER if model == "untrusted" else model

    if model == UNTRUSTED_SERVER:
        if queries_per_client is None:
            raise ValueError("the untrusted-server model needs queries_per_client")

        def event(sigma: float) -> dp_event.DpEvent:
            return untrusted_client_event({(sigma, batch_size): queries_per_client})

    elif model == TRUSTED_SAMPLER:
        if steps is None or clients is None:
            raise ValueError("the trusted-sampler model needs steps and clients")

        def event(sigma: float) -> dp_event.DpEvent:
            return trusted_sampler_event(steps, clients, clients_per_step, sigma, batch_size)

    else:
        raise ValueError(f"model must be {UNTRUSTED_SERVER!r} or {TRUSTED_SAMPLER!r}")

    return calibrate_event(
        event,
        target_epsilon,
        delta,
        accountant,
        tolerance=tolerance,
        search_range=search_range,
        describe=model,
    )


def calibrate_event(
    event: Callable[[float], dp_event.DpEvent],
    target_epsilon: float,
    delta: float,
    accountant: Accountant | str = DEFAULT_ACCOUNTANT,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    search_range: tuple[float, float] = (1e-2, 1e3),
    describe: str = "",
) -> float:
    """Smallest noise multiplier sigma (within ``tolerance``) whose ``event(sigma)`` has epsilon
    <= target: any mechanism whose privacy loss falls as its one multiplier grows (a GS-WGAN
    client's queries, one DP-MERF release). ``describe`` names it in the unreachable error."""
    check_delta(delta)
    if not target_epsilon > 0:
        raise ValueError(f"target_epsilon must be positive, got {target_epsilon!r}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance!r}")
    low, high = search_range
    if not 0 < low < high:
        raise ValueError(f"search_range must satisfy 0 < low < high, got {search_range!r}")
    acct = get_accountant(accountant)

    def meets(sigma: float) -> bool:
        return acct.epsilon(event(sigma), delta) <= target_epsilon

    if not meets(high):
        raise ValueError(
            f"epsilon {target_epsilon} at delta {delta} is unreachable: even noise multiplier "
            f"{high} gives epsilon {acct.epsilon(event(high), delta):.4g} ({describe}, {acct.name})"
        )
    return bisect_multiplier(meets, low, high, tolerance)


def bisect_multiplier(
    meets: Callable[[float], bool], low: float, high: float, tolerance: float
) -> float:
    """The smallest multiplier in [low, high] (within ``tolerance``) that ``meets`` the target,
    for a ``meets`` monotone in it and true at ``high`` (each caller says why when it is not)."""
    if meets(low):
        return low
    while high - low > tolerance:  # invariant: low misses the target, high meets it
        middle = (low + high) / 2
        if meets(middle):
            high = middle
        else:
            low = middle
    return high
