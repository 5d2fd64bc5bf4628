"""Step 3 made private: each writer releases one bit by randomized response, and only that bit
forms the groups.

Why one bit: the server needs only "suspected or normal" from each writer, so the writer
thresholds its own accuracy on its device and releases that bit through binary randomized
response with epsilon_g (the truth with probability e^eps / (1 + e^eps), else its flip, the coin
from a fresh ``SecureRandom``). Replacing one writer's data can change only that writer's bit, so
the release is epsilon_g-DP under replace-one writer, against a server that sees everything it
receives (untrusted server). The server puts the writers who reported "low" in the suspected
group and the others in the normal one; flipped bits misplace some writers, which is the price.

Each writer is then in exactly one group's generator, so its end-to-end epsilon composes the bit
(``events.randomized_response_event``) with the charges that generator's ledger holds for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from dp_accounting import dp_event

from fedgs.debugging.scoring import NORMAL, SUSPECTED
from fedgs.privacy.accountants import Accountant, get_accountant
from fedgs.privacy.client_ledger import Signature
from fedgs.privacy.events import compose_counts, randomized_response_event
from fedgs.privacy.randomness import SecureRandom


def truth_probability(epsilon: float) -> float:
    """Probability that randomized response releases the true bit: e^eps / (1 + e^eps)."""
    if not epsilon > 0 or math.isinf(epsilon):
        raise ValueError(f"the grouping epsilon must be positive and finite, got {epsilon!r}")
    return 1.0 / (1.0 + math.exp(-epsilon))


def release_probability(true_low: bool, released_low: bool, epsilon: float) -> float:
    """P(release = ``released_low`` | the writer's bit is ``true_low``): what neighbours compare."""
    truth = truth_probability(epsilon)
    return truth if bool(true_low) == bool(released_low) else 1.0 - truth


def randomized_response(true_low: bool, epsilon: float, rng: SecureRandom) -> bool:
    """One writer's release. The uniform is compared with a probability >= 1/2, above e^-1,
    where ``SecureRandom.uniform`` is exact to 2^-53."""
    keep = bool(rng.uniform(1)[0] < truth_probability(epsilon))
    return bool(true_low) if keep else not bool(true_low)


@dataclass(frozen=True)
class Release:
    """What the writers computed (``true_low``, on their devices) and what they sent
    (``released_low``, all the server sees of them before training)."""

    threshold: float
    epsilon: float
    true_low: np.ndarray
    released_low: np.ndarray

    @property
    def flipped(self) -> np.ndarray:
        """Writers whose coin flipped their bit: known to the scenario's ground truth only."""
        return self.true_low != self.released_low


def release_bits(accuracies: np.ndarray, threshold: float, epsilon: float) -> Release:
    """Each writer's bit (accuracy <= threshold: low) through randomized response, with a
    fresh ChaCha20 key per writer, as each device would draw its own coin."""
    true_low = np.asarray(accuracies, dtype=np.float64) <= threshold
    released = np.array([randomized_response(b, epsilon, SecureRandom()) for b in true_low])
    return Release(float(threshold), float(epsilon), true_low, released.astype(bool))


def groups_from_release(released_low: np.ndarray) -> np.ndarray:
    """The server's grouping: suspected where the release says low, normal elsewhere; its only
    per-writer input is the release. Both groups must be non-empty to train a GAN on each."""
    released_low = np.asarray(released_low, dtype=bool)
    groups = np.where(released_low, SUSPECTED, NORMAL).astype(object)
    for name in (SUSPECTED, NORMAL):
        if not np.any(groups == name):
            raise ValueError(f"no writer released a bit that puts it in the {name} group")
    return groups


def end_to_end_event(signature: Signature, grouping_epsilon: float) -> dp_event.DpEvent:
    """A writer's whole procedure: its grouping bit, then its charges in its group's generator
    (plain composition: the groups are disjoint, so no other generator touches its data)."""
    charges = compose_counts(dict(signature))
    return dp_event.ComposedDpEvent([randomized_response_event(grouping_epsilon), charges])


@lru_cache(maxsize=1024)
def end_to_end_epsilon(
    signature: Signature, grouping_epsilon: float, delta: float, accountant: Accountant
) -> float:
    """The accountant's epsilon of ``end_to_end_event`` (cached: writers share signatures)."""
    return accountant.epsilon(end_to_end_event(signature, grouping_epsilon), delta)


def end_to_end_epsilons(
    signatures: Mapping[str, Signature],
    grouping_epsilon: float,
    delta: float,
    accountant: Accountant | str,
) -> dict[str, float]:
    """Writer -> end-to-end epsilon, from each writer's charges in its own group's ledger."""
    acct = get_accountant(accountant)
    return {
        writer: end_to_end_epsilon(sig, grouping_epsilon, delta, acct)
        for writer, sig in signatures.items()
    }


def generator_target(
    target: float,
    grouping_epsilon: float,
    query: dp_event.DpEvent,
    delta: float,
    accountant: Accountant | str,
) -> tuple[float, int]:
    """The generator's own ``--target-epsilon`` that holds every writer's end-to-end epsilon
    within ``target``, and the queries it allows a writer.

    A writer's charges are n copies of ``query``; n* is the largest n whose composition with the
    grouping bit stays within ``target``. The run's stop counts the generator's ledger alone, so
    its target sits midway between the generator-only epsilon of n* and of n* + 1 queries: no
    rounding of the two evaluations can let n* + 1 through or stop short of n*. The stop holds in
    whichever group a writer lands, so the bound does not depend on the release.
    """
    acct = get_accountant(accountant)

    def total(n: int) -> float:
        return acct.epsilon(end_to_end_event(((query, n),) if n else (), grouping_epsilon), delta)

    if total(1) > target:
        raise ValueError(
            f"end-to-end target {target:g} leaves no query: the grouping (epsilon "
            f"{grouping_epsilon:g}) and one query already pass it"
        )
    low, high = 1, 2
    while total(high) <= target:  # doubling, then bisection: total(low) <= target < total(high)
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if total(middle) <= target else (low, middle)

    def alone(n: int) -> float:
        return acct.epsilon(dp_event.SelfComposedDpEvent(query, n), delta)

    return (alone(low) + alone(low + 1)) / 2.0, low
