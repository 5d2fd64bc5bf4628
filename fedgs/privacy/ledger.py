"""Per-client privacy ledger: what every client answered, and what that costs.

The server keeps one to report epsilon; a client keeps its own to refuse queries past its
budget (``would_exceed``). Queries are stored as counts per (noise multiplier, batch size), not
as a list, so 30k steps cost nothing, and two clients with the same counts (the same
*signature*) have the same epsilon, which is computed once.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections import Counter
from typing import Any

from dp_accounting import dp_event

from fedgs.privacy.accountants import (
    DEFAULT_ACCOUNTANT,
    Accountant,
    UnsupportedEventError,
    get_accountant,
)
from fedgs.privacy.events import (
    THREAT_MODELS,
    TRUSTED_SAMPLER,
    UNTRUSTED_SERVER,
    QueryKind,
    gswgan_query_event,
    trusted_sampler_event,
    untrusted_client_event,
)

# (clients sampled per step, population, noise multiplier, batch size)
StepKind = tuple[int, int, float, int]
Signature = tuple[tuple[float, int, int], ...]

_FORMAT_VERSION = 1


@functools.lru_cache(maxsize=4096)
def _signature_epsilon(signature: Signature, delta: float, accountant: Accountant) -> float:
    event = untrusted_client_event({(sigma, batch): count for sigma, batch, count in signature})
    return accountant.epsilon(event, delta)


def _signature_strength(signature: Signature) -> float:
    """mu^2 of the single Gaussian equivalent to a signature: sum count * B / sigma^2."""
    return sum(count * batch / sigma**2 for sigma, batch, count in signature)


LOOSER_THAN_UNTRUSTED = (
    "this amplified bound is looser than the untrusted-server epsilon of the same run: with a "
    "small per-query multiplier (sigma / sqrt(B)) RDP amplification by subsampling gains less "
    "than composing over T steps costs; quote the untrusted-server epsilon, which needs fewer "
    "assumptions"
)


class PrivacyLedger:
    """Counts of answered queries per client, and of trusted-sampler steps."""

    def __init__(self) -> None:
        self._queries: dict[str, Counter[QueryKind]] = {}
        self._steps: Counter[StepKind] = Counter()

    def record_query(self, client_id: str, noise_multiplier: float, batch_size: int) -> None:
        """One query answered by ``client_id`` (B sanitized rows at multiplier sigma)."""
        gswgan_query_event(noise_multiplier, batch_size)  # validates the arguments
        kind = (float(noise_multiplier), int(batch_size))
        self._queries.setdefault(str(client_id), Counter())[kind] += 1

    def record_step(
        self, clients_sampled: int, population: int, noise_multiplier: float, batch_size: int
    ) -> None:
        """One step that secretly sampled ``clients_sampled`` of ``population`` clients."""
        trusted_sampler_event(1, population, clients_sampled, noise_multiplier, batch_size)
        kind = (int(clients_sampled), int(population), float(noise_multiplier), int(batch_size))
        self._steps[kind] += 1

    def query_counts(self) -> dict[str, int]:
        """Total queries answered, per client that answered any."""
        return {client: sum(kinds.values()) for client, kinds in self._queries.items()}

    def signature(self, client_id: str) -> Signature:
        """The client's sorted (sigma, B, count) triples; equal signatures, equal epsilon."""
        kinds = self._queries.get(str(client_id), Counter())
        return tuple(sorted((sigma, batch, n) for (sigma, batch), n in kinds.items()))

    def client_event(self, client_id: str) -> dp_event.DpEvent:
        """The client's queries as one event (untrusted server: plain composition)."""
        return untrusted_client_event(dict(self._queries.get(str(client_id), {})))

    def trusted_sampler_event(self) -> dp_event.DpEvent:
        """All recorded steps as one event (trusted sampler: subsampled Gaussians)."""
        parts = [
            trusted_sampler_event(n, population, sampled, sigma, batch)
            for (sampled, population, sigma, batch), n in sorted(self._steps.items())
        ]
        if not parts:
            return dp_event.NoOpDpEvent()
        return parts[0] if len(parts) == 1 else dp_event.ComposedDpEvent(parts)

    def epsilon_untrusted(
        self, client_id: str, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> float:
        """Epsilon of one client under the untrusted server (0 if it answered nothing)."""
        return _signature_epsilon(self.signature(client_id), delta, get_accountant(accountant))

    def epsilon_untrusted_max(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> tuple[float, str | None]:
        """The run's untrusted-server epsilon: the max over clients, and that client.

        Every signature is a composition of Gaussians, i.e. exactly one Gaussian whose
        strength mu^2 = sum count * B / sigma^2 orders epsilon for every delta, so only the
        strongest signature is evaluated. Ties go to the smallest client id.
        """
        if not self._queries:
            return 0.0, None
        worst = min(
            self._queries,
            key=lambda c: (-_signature_strength(self.signature(c)), c),
        )
        return self.epsilon_untrusted(worst, delta, accountant), worst

    def epsilon_trusted_sampler(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> float:
        """Epsilon of every client under the trusted-sampler assumption (amplified)."""
        return get_accountant(accountant).epsilon(self.trusted_sampler_event(), delta)

    def would_exceed(
        self,
        client_id: str,
        noise_multiplier: float,
        batch_size: int,
        budget_epsilon: float,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
    ) -> bool:
        """Whether answering one more such query would take the client past its budget."""
        kinds = Counter(self._queries.get(str(client_id), Counter()))
        kinds[(float(noise_multiplier), int(batch_size))] += 1
        signature = tuple(sorted((sigma, batch, n) for (sigma, batch), n in kinds.items()))
        return _signature_epsilon(signature, delta, get_accountant(accountant)) > budget_epsilon

    def summary(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> dict[str, Any]:
        """Both epsilons, each with its threat model and accountant, and the query counts."""
        acct = get_accountant(accountant)
        epsilon, worst = self.epsilon_untrusted_max(delta, acct)
        counts = sorted(self.query_counts().values())
        trusted: dict[str, Any] = {
            "threat_model": TRUSTED_SAMPLER,
            "assumption": THREAT_MODELS[TRUSTED_SAMPLER],
            "accountant": acct.name,
            "steps": sum(self._steps.values()),
        }
        try:
            trusted["epsilon"] = self.epsilon_trusted_sampler(delta, acct)
        except UnsupportedEventError as err:  # e.g. PLD has no sampling without replacement
            trusted["epsilon"] = None
            trusted["error"] = str(err)
        if trusted["epsilon"] is not None and trusted["epsilon"] > epsilon:
            trusted["note"] = LOOSER_THAN_UNTRUSTED
        return {
            "delta": delta,
            "accountant": acct.name,
            "untrusted_server": {
                "threat_model": UNTRUSTED_SERVER,
                "assumption": THREAT_MODELS[UNTRUSTED_SERVER],
                "accountant": acct.name,
                "epsilon": epsilon,
                "client_id": worst,
            },
            "trusted_sampler": trusted,
            "queries": {
                "clients_queried": len(counts),
                "total": sum(counts),
                "min": counts[0] if counts else 0,
                "median": statistics.median(counts) if counts else 0,
                "max": counts[-1] if counts else 0,
            },
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-safe; floats round-trip exactly) to resume a run."""
        return {
            "version": _FORMAT_VERSION,
            "queries": {
                client: [[sigma, batch, n] for sigma, batch, n in self.signature(client)]
                for client in sorted(self._queries)
            },
            "steps": [[*kind, n] for kind, n in sorted(self._steps.items())],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        if data.get("version") != _FORMAT_VERSION:
            raise ValueError(f"unsupported ledger format version {data.get('version')!r}")
        ledger = cls()
        for client, rows in data["queries"].items():
            ledger._queries[client] = Counter(
                {(float(sigma), int(batch)): int(n) for sigma, batch, n in rows}
            )
        for sampled, population, sigma, batch, n in data["steps"]:
            ledger._steps[(int(sampled), int(population), float(sigma), int(batch))] = int(n)
        return ledger

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        return cls.from_dict(json.loads(text))
