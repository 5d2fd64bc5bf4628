"""Accountants: turn a dp-accounting event into epsilon at a given delta.

Three interchangeable back ends with one interface, ``Accountant.epsilon(event, delta)``:

- ``autodp-rdp``: autodp's analytical moments accountant, what the GS-WGAN paper used
  (RDP of the Gaussian and of the Laplace mechanism; subsampling without replacement by Wang et
  al. 2019; classic RDP to (epsilon, delta) conversion). Accepts fractional composition counts.
- ``dp-accounting-rdp``: Google's RdpAccountant (tighter RDP to DP conversion).
- ``dp-accounting-pld``: Google's PLD accountant (tightest; no sampling without replacement).

What each may evaluate, now that fedgs' noise is discrete (``fedgs.privacy.discrete_noise``): a
``GaussianDpEvent`` is a discrete Gaussian on a grid, whose Renyi divergence between neighbours is
at most the continuous Gaussian's at every order; so the RDP accountants evaluate it unsampled
and sampled without replacement (Wang et al.'s bound is built from that RDP curve). Poisson
sampling: autodp's general bound (Zhu and Wang 2019, no assumption on the mechanism); Google's
RDP accountant assumes the continuous Gaussian there and refuses. The PLD of the continuous
Gaussian is not a proven bound for the multivariate discrete Gaussian, so the PLD accountant
refuses Gaussian events. The discrete Laplace (PATE-GAN) is exact randomized response for
sensitivity 1: autodp and the PLD accountant evaluate it as such.

Each evaluation starts from a fresh library accountant, so the objects here are stateless and
can be shared (the registry hands out one instance per name, which also keys result caches).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
from autodp import rdp_acct, rdp_bank
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

NeighboringRelation = privacy_accountant.NeighboringRelation
DEFAULT_ACCOUNTANT = "autodp-rdp"


class UnsupportedEventError(privacy_accountant.UnsupportedEventError, ValueError):
    """An accountant cannot evaluate an event; the message says which and what to use."""


class Accountant(Protocol):
    """Anything that converts an event to epsilon; ``name`` labels every reported number."""

    name: str

    def epsilon(self, event: dp_event.DpEvent, delta: float) -> float: ...


def check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _walk(event: dp_event.DpEvent) -> Iterator[dp_event.DpEvent]:
    yield event
    if isinstance(event, dp_event.ComposedDpEvent):
        for sub in event.events:
            yield from _walk(sub)
    elif isinstance(
        event,
        dp_event.SelfComposedDpEvent
        | dp_event.PoissonSampledDpEvent
        | dp_event.SampledWithoutReplacementDpEvent,
    ):
        yield from _walk(event.event)


def _sampling_kinds(event: dp_event.DpEvent) -> set[type]:
    kinds = (dp_event.PoissonSampledDpEvent, dp_event.SampledWithoutReplacementDpEvent)
    return {type(e) for e in _walk(event) if isinstance(e, kinds)}


def _neighboring_relation(event: dp_event.DpEvent, accountant: str) -> NeighboringRelation:
    """The relation each sampling scheme is analysed under.

    Sampling without replacement (fixed m of K): replace-one, as in Wang et al. Poisson
    sampling (DP-FedAvg): add-or-remove-one. Unsampled Gaussians do not depend on it, because
    our multipliers are relative to the distance between neighbouring outputs.
    """
    kinds = _sampling_kinds(event)
    if len(kinds) > 1:
        raise UnsupportedEventError(
            f"{accountant}: an event mixing Poisson sampling and sampling without replacement "
            "has no single neighbouring relation; account for the two parts separately"
        )
    if dp_event.PoissonSampledDpEvent in kinds:
        return NeighboringRelation.ADD_OR_REMOVE_ONE
    return NeighboringRelation.REPLACE_ONE


def _gaussian_multiplier(event: dp_event.DpEvent, accountant: str) -> float:
    """Multiplier of the single Gaussian equivalent to a composition of Gaussians."""
    if isinstance(event, dp_event.GaussianDpEvent):
        return event.noise_multiplier
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _gaussian_multiplier(event.event, accountant) / math.sqrt(event.count)
    if isinstance(event, dp_event.ComposedDpEvent) and event.events:
        inverse_squares = [_gaussian_multiplier(e, accountant) ** -2 for e in event.events]
        return sum(inverse_squares) ** -0.5
    raise UnsupportedEventError(f"{accountant}: a sampled event must wrap Gaussians, got {event}")


Rule = Callable[[dp_event.DpEvent], dp_event.DpEvent | None]


def _rewrite(event: dp_event.DpEvent, rule: Rule) -> dp_event.DpEvent:
    """``event`` with ``rule`` applied through its compositions: where ``rule`` returns an
    event, that event replaces the part (and is rewritten in turn); None keeps it."""
    replaced = rule(event)
    if replaced is not None:
        return _rewrite(replaced, rule)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(_rewrite(event.event, rule), event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent([_rewrite(e, rule) for e in event.events])
    return event


def _as_randomized_response(event: dp_event.DpEvent) -> dp_event.DpEvent | None:
    """A discrete Laplace of sensitivity 1 as the binary randomized response it is (truth with
    probability e^a / (1 + e^a)), for Google's RDP accountant."""
    if isinstance(event, dp_event.DiscreteLaplaceDpEvent) and int(event.sensitivity) == 1:
        return dp_event.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(event.noise_parameter)), 2)
    return None


def _unsampled(event: dp_event.DpEvent) -> dp_event.DpEvent | None:
    """Poisson sampling dropped: a sampled mechanism is never less private than the mechanism on
    everyone (RDP is jointly convex), so this bounds it too."""
    return event.event if isinstance(event, dp_event.PoissonSampledDpEvent) else None


class AutodpRdpAccountant:
    """autodp ``anaRDPacct``: the GS-WGAN paper's accountant."""

    name = "autodp-rdp"

    def epsilon(self, event: dp_event.DpEvent, delta: float) -> float:
        check_delta(delta)
        if len(_sampling_kinds(event)) > 1:
            raise UnsupportedEventError(
                f"{self.name}: autodp cannot mix Poisson sampling and sampling without "
                "replacement in one accountant"
            )
        if any(isinstance(e, dp_event.NonPrivateDpEvent) for e in _walk(event)):
            return math.inf
        if dp_event.PoissonSampledDpEvent in _sampling_kinds(event):
            # the general Poisson bound can exceed no amplification at all; both are valid
            unamplified = _rewrite(event, _unsampled)
            return min(self._epsilon(event, delta), self._epsilon(unamplified, delta))
        return self._epsilon(event, delta)

    def _epsilon(self, event: dp_event.DpEvent, delta: float) -> float:
        acct = rdp_acct.anaRDPacct()
        curves: dict[tuple[str, float], Callable[[float], float]] = {}
        self._compose(acct, event, 1.0, curves)
        if acct.n == 0:
            return 0.0
        # autodp evaluates log(0) and exp overflow on its way to finite answers
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(acct.get_eps(delta))

    def _compose(
        self,
        acct: rdp_acct.anaRDPacct,
        event: dp_event.DpEvent,
        coeff: float,
        curves: dict[tuple[str, float], Callable[[float], float]],
    ) -> None:
        def curve(sigma: float) -> Callable[[float], float]:
            # one function object per sigma: autodp merges and caches by identity
            if ("gaussian", sigma) not in curves:
                curves[("gaussian", sigma)] = lambda alpha: rdp_bank.RDP_gaussian(
                    {"sigma": sigma}, alpha
                )
            return curves[("gaussian", sigma)]

        def laplace_curve(scale: float) -> Callable[[float], float]:
            if ("laplace", scale) not in curves:
                curves[("laplace", scale)] = lambda alpha: rdp_bank.RDP_laplace({"b": scale}, alpha)
            return curves[("laplace", scale)]

        def discrete_laplace_curve(event: dp_event.DiscreteLaplaceDpEvent) -> Callable:
            # shift 1: exactly randomized response with epsilon a; larger shifts: pure a * s
            eps = float(event.noise_parameter) * int(event.sensitivity)
            key = ("discrete-laplace", eps, int(event.sensitivity))
            if key not in curves:
                truth = 1.0 / (1.0 + math.exp(-eps))  # e^eps / (1 + e^eps)
                curves[key] = (
                    (lambda alpha: rdp_bank.RDP_randresponse({"p": truth}, alpha))
                    if int(event.sensitivity) == 1
                    else (lambda alpha: rdp_bank.RDP_pureDP({"eps": eps}, alpha))
                )
            return curves[key]

        if isinstance(event, dp_event.NoOpDpEvent):
            return
        if isinstance(event, dp_event.GaussianDpEvent):
            acct.compose_mechanism(curve(event.noise_multiplier), coeff=coeff)
        elif isinstance(event, dp_event.LaplaceDpEvent):
            acct.compose_mechanism(laplace_curve(event.noise_multiplier), coeff=coeff)
        elif isinstance(event, dp_event.DiscreteLaplaceDpEvent):
            acct.compose_mechanism(discrete_laplace_curve(event), coeff=coeff)
        elif isinstance(event, dp_event.SelfComposedDpEvent):
            self._compose(acct, event.event, coeff * event.count, curves)
        elif isinstance(event, dp_event.ComposedDpEvent):
            for sub in event.events:
                self._compose(acct, sub, coeff, curves)
        elif isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
            sigma = _gaussian_multiplier(event.event, self.name)
            prob = event.sample_size / event.source_dataset_size
            acct.compose_subsampled_mechanism(curve(sigma), prob, coeff=coeff)
        elif isinstance(event, dp_event.PoissonSampledDpEvent):
            sigma = _gaussian_multiplier(event.event, self.name)
            # the general bound: the tight one assumes the continuous Gaussian
            acct.compose_poisson_subsampled_mechanisms1(
                curve(sigma), event.sampling_probability, coeff=coeff
            )
        else:
            raise UnsupportedEventError(f"{self.name}: unsupported event {event}")


class DpAccountingRdpAccountant:
    """dp-accounting ``RdpAccountant`` with the neighbouring relation each sampler needs."""

    name = "dp-accounting-rdp"

    def epsilon(self, event: dp_event.DpEvent, delta: float) -> float:
        check_delta(delta)
        if dp_event.PoissonSampledDpEvent in _sampling_kinds(event):
            raise UnsupportedEventError(
                f"{self.name}: its Poisson-sampled Gaussian assumes continuous Gaussian noise, and "
                "fedgs' noise is a discrete Gaussian; use autodp-rdp (a bound for any mechanism)"
            )
        relation = _neighboring_relation(event, self.name)
        acct = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
        try:
            acct.compose(_rewrite(event, _as_randomized_response))
        except privacy_accountant.UnsupportedEventError as err:
            raise UnsupportedEventError(f"{self.name}: {err}") from err
        return float(acct.get_epsilon(delta))


class DpAccountingPldAccountant:
    """dp-accounting ``PLDAccountant``: tight, but no sampling without replacement.

    The discretization interval is ``relative_interval`` times an RDP upper bound of epsilon
    (never below ``min_interval``, dp-accounting's default): PLD's cost grows with the range of
    the privacy loss over the interval, so a fixed 1e-4 takes ~50 s at the paper's epsilon ~600,
    while the relative one takes ~0.1 s. Rounding is pessimistic: it can only raise epsilon.
    When every mechanism is a discrete Laplace of one parameter a (its privacy loss is +-a), the
    interval is shrunk to divide a, so the rounding adds nothing however many steps compose.
    """

    name = "dp-accounting-pld"

    def __init__(self, relative_interval: float = 1e-4, min_interval: float = 1e-4) -> None:
        self.relative_interval = relative_interval
        self.min_interval = min_interval

    def epsilon(self, event: dp_event.DpEvent, delta: float) -> float:
        check_delta(delta)
        if dp_event.SampledWithoutReplacementDpEvent in _sampling_kinds(event):
            raise UnsupportedEventError(
                f"{self.name}: dp-accounting's PLD has no sampling without replacement (the "
                "trusted-sampler and centralized models); use autodp-rdp or dp-accounting-rdp"
            )
        if any(isinstance(e, dp_event.GaussianDpEvent) for e in _walk(event)):
            raise UnsupportedEventError(
                f"{self.name}: fedgs' Gaussian noise is a discrete Gaussian, whose privacy loss "
                "distribution is not the continuous Gaussian's (only its RDP is proven the "
                "same); use autodp-rdp or dp-accounting-rdp"
            )
        # Add-or-remove: dp-accounting's PLD reads REPLACE_ONE as a shift of +-multiplier,
        # i.e. twice the distance our multipliers are relative to.
        relation = NeighboringRelation.ADD_OR_REMOVE_ONE
        if not pld_privacy_accountant.PLDAccountant(relation).supports(event):
            raise UnsupportedEventError(f"{self.name}: unsupported event {event}")
        rdp_bound = AutodpRdpAccountant().epsilon(event, delta)
        interval = self.min_interval
        if math.isfinite(rdp_bound):
            interval = max(interval, self.relative_interval * rdp_bound)
        losses = {
            float(e.noise_parameter) * int(e.sensitivity)
            for e in _walk(event)
            if isinstance(e, dp_event.DiscreteLaplaceDpEvent)
        }
        if len(losses) == 1:
            (loss,) = losses
            interval = loss / math.ceil(loss / interval)
        acct = pld_privacy_accountant.PLDAccountant(relation, interval)
        return float(acct.compose(event).get_epsilon(delta))


_REGISTRY: dict[str, Accountant] = {
    acct.name: acct
    for acct in (AutodpRdpAccountant(), DpAccountingRdpAccountant(), DpAccountingPldAccountant())
}
ACCOUNTANT_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def get_accountant(name: str | Accountant = DEFAULT_ACCOUNTANT) -> Accountant:
    """The shared accountant registered under ``name`` (an Accountant passes through)."""
    if not isinstance(name, str):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown accountant {name!r}; choose one of {', '.join(ACCOUNTANT_NAMES)}"
        ) from None
