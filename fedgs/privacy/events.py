"""The mechanisms of fedgs as dp-accounting events.

Mechanisms are described with ``dp_accounting.dp_event`` classes and only turned into (epsilon,
delta) by an accountant at the end, so one description serves every accountant.

Noise multipliers here are always noise std / L2 distance between the outputs on two
neighbouring datasets. For GS-WGAN that distance is 2C under replace-one (one client replaced),
and the noise std is 2C * sigma, so a per-sample multiplier is sigma.

Every Gaussian here is a discrete Gaussian on a grid (``fedgs.privacy.discrete_noise``), whose
Renyi divergences are at most the continuous Gaussian's: a ``GaussianDpEvent`` is evaluated only
through its RDP curve (``fedgs.privacy.accountants`` says which accountant may evaluate what).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attr
from dp_accounting import dp_event


def _check_positive(name: str, value: float) -> None:
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def gswgan_query_event(noise_multiplier: float, batch_size: int) -> dp_event.GaussianDpEvent:
    """One answered GS-WGAN query: B rows, each a Gaussian of multiplier sigma.

    B Gaussians with the same sensitivity compose exactly to one Gaussian of multiplier
    sigma / sqrt(B) on the concatenated reply (RDP alpha * B / (2 sigma^2)).
    """
    _check_positive("noise_multiplier", noise_multiplier)
    _check_batch_size(batch_size)
    return dp_event.GaussianDpEvent(float(noise_multiplier) / math.sqrt(batch_size))


def mean_embedding_event(noise_multiplier: float) -> dp_event.GaussianDpEvent:
    """One DP-MERF release (``fedgs.privacy.mean_embedding``): a writer's mean embedding clipped
    to C with noise std 2C * sigma, whose replace-one sensitivity is 2C: multiplier sigma."""
    _check_positive("noise_multiplier", noise_multiplier)
    return dp_event.GaussianDpEvent(float(noise_multiplier))


def untrusted_client_event(queries: Mapping[tuple[float, int], float]) -> dp_event.DpEvent:
    """A client's queries under the untrusted server: plain composition, no amplification.

    ``queries`` maps (noise multiplier, batch size) to the number of such queries answered.
    An integral count becomes a ``SelfComposedDpEvent``. A fractional count (the paper's
    *expected* count T/K) becomes one Gaussian of multiplier s / sqrt(count): the n-fold
    composition of a Gaussian of multiplier s is exactly that Gaussian for integral n, and its
    RDP is linear in n in between, which is what "composing RDP fractionally" means.
    """
    parts: list[dp_event.DpEvent] = []
    for (noise_multiplier, batch_size), count in sorted(queries.items()):
        if not count >= 0 or math.isinf(count):
            raise ValueError(f"query count must be a finite number >= 0, got {count!r}")
        query = gswgan_query_event(noise_multiplier, batch_size)
        if count == 0:
            continue
        if float(count).is_integer():
            parts.append(dp_event.SelfComposedDpEvent(query, int(count)))
        else:
            parts.append(dp_event.GaussianDpEvent(query.noise_multiplier / math.sqrt(count)))
    if not parts:
        return dp_event.NoOpDpEvent()
    return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)


def trusted_sampler_event(
    steps: int, clients: int, clients_per_step: int, noise_multiplier: float, batch_size: int
) -> dp_event.DpEvent:
    """``steps`` steps that each query ``clients_per_step`` of ``clients``, chosen in secret.

    Uniform sampling without replacement under replace-one neighbours (Wang, Balle and
    Kasiviswanathan 2019), q = clients_per_step / clients per step.
    """
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if int(clients) != clients or int(clients_per_step) != clients_per_step:
        raise ValueError("clients and clients_per_step must be integers")
    if not 1 <= clients_per_step <= clients:
        raise ValueError(
            f"need 1 <= clients_per_step <= clients, got {clients_per_step} of {clients}"
        )
    sampled = dp_event.SampledWithoutReplacementDpEvent(
        int(clients), int(clients_per_step), gswgan_query_event(noise_multiplier, batch_size)
    )
    return dp_event.SelfComposedDpEvent(sampled, int(steps))


def centralized_paper_event(
    subsets: int, steps: int, batch_size: int, noise_multiplier: float
) -> dp_event.DpEvent:
    """The centralized GS-WGAN paper's model (its official privacy_analysis.py).

    Every *sample* of every step is treated as its own subsampled Gaussian (q = 1/subsets,
    multiplier sigma), composed B * T times. The B rows of a step share one subsampling event,
    so this undercounts; ``centralized_shared_step_event`` is the defensible figure.
    """
    _check_batch_size(batch_size)
    per_sample = dp_event.SampledWithoutReplacementDpEvent(
        int(subsets), 1, gswgan_query_event(noise_multiplier, 1)
    )
    return dp_event.SelfComposedDpEvent(per_sample, int(batch_size) * int(steps))


def centralized_shared_step_event(
    subsets: int, steps: int, batch_size: int, noise_multiplier: float
) -> dp_event.DpEvent:
    """Centralized GS-WGAN with one subsampling event per step (q = 1/subsets, B rows)."""
    return trusted_sampler_event(steps, subsets, 1, noise_multiplier, batch_size)


def fedavg_round_event(
    clients_per_round: int, clients: int, noise_multiplier: float
) -> dp_event.PoissonSampledDpEvent:
    """One DP-FedAvg round (trusted server): Poisson-sampled Gaussian, q = m/K, multiplier z.

    Compose rounds with ``SelfComposedDpEvent(fedavg_round_event(...), rounds)``.
    """
    _check_positive("noise_multiplier", noise_multiplier)
    if not 0 < clients_per_round <= clients:
        raise ValueError(
            f"need 0 < clients_per_round <= clients, got {clients_per_round} of {clients}"
        )
    return dp_event.PoissonSampledDpEvent(
        clients_per_round / clients, dp_event.GaussianDpEvent(float(noise_multiplier))
    )


def randomized_response_event(epsilon: float) -> dp_event.DiscreteLaplaceDpEvent:
    """One bit released by binary randomized response: the truth with probability
    e^epsilon / (1 + e^epsilon), else its flip.

    Written as a discrete Laplace of parameter epsilon and sensitivity 1 because that is the form
    every fedgs accountant evaluates (autodp as its randomized-response RDP, Google's RDP as
    ``RandomizedResponseDpEvent``, the PLD natively), and its privacy loss is exactly the bit's:
    +-epsilon, +epsilon with probability e^epsilon / (1 + e^epsilon).
    """
    _check_positive("epsilon", epsilon)
    return dp_event.DiscreteLaplaceDpEvent(float(epsilon), 1)


def compose_counts(charges: Mapping[dp_event.DpEvent, int]) -> dp_event.DpEvent:
    """``count`` times each event, composed (no amplification): a ledger's charges as one."""
    parts = [
        dp_event.SelfComposedDpEvent(event, count)
        for event, count in sorted(charges.items(), key=lambda item: repr(item[0]))
        if count > 0
    ]
    if not parts:
        return dp_event.NoOpDpEvent()
    return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)


def event_to_json(event: dp_event.DpEvent) -> dict[str, Any]:
    """An event as plain data: its ``dp_event`` class name and fields (nested events likewise)."""
    fields = {
        f.name: event_to_json(v) if isinstance(v, dp_event.DpEvent) else v
        for f in attr.fields(type(event))
        for v in [getattr(event, f.name)]
    }
    return {"dp_event": type(event).__name__} | fields


def event_from_json(data: dict[str, Any]) -> dp_event.DpEvent:
    """The event ``event_to_json`` wrote; only dp_accounting's own event classes are built."""
    name = str(data["dp_event"])
    cls = getattr(dp_event, name, None)
    if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
        raise ValueError(f"unknown dp-accounting event {name!r}")
    fields = {
        k: event_from_json(v) if isinstance(v, dict) else v
        for k, v in data.items()
        if k != "dp_event"
    }
    return cls(**fields)
