"""Per-client privacy ledger: what every client answered, and what that costs.

A client keeps one to refuse queries past its budget (``would_exceed``). The server keeps one to
report epsilon, conservatively: a query counts as paid when the server *sends* it (at the sigma
it asked for and the batch it sent), whether or not a reply ever comes back, and the outcome of
each query (answered, dropped, no reply) is reconciled afterwards. A query sent to a node whose
client identity the server has not learned yet is *unattributed* until the reply names it; any
left unattributed (a run killed before the reply) is charged to the worst client, so the
reported epsilon never falls below a client's own ledger. Queries are stored as counts per
(noise multiplier, batch size), not as a list, so 30k steps cost nothing, and two clients with
the same counts (the same *signature*) have the same epsilon, which is computed once.
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
    QueryKind,
    gswgan_query_event,
    trusted_sampler_event,
    untrusted_client_event,
)
from fedgs.privacy.threat_models import (
    NEIGHBOURING,
    REPLACE_ONE,
    THREAT_MODELS,
    TRUSTED_SAMPLER,
    UNTRUSTED_SERVER,
)

# (clients sampled per step, population, noise multiplier, batch size)
StepKind = tuple[int, int, float, int]
Signature = tuple[tuple[float, int, int], ...]

_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
OUTCOMES = ("answered", "dropped", "no-reply")  # what became of a sent (paid) query


@functools.lru_cache(maxsize=4096)
def _signature_epsilon(signature: Signature, delta: float, accountant: Accountant) -> float:
    event = untrusted_client_event({(sigma, batch): count for sigma, batch, count in signature})
    return accountant.epsilon(event, delta)


def _signature_strength(signature: Signature) -> float:
    """mu^2 of the single Gaussian equivalent to a signature: sum count * B / sigma^2."""
    return sum(count * batch / sigma**2 for sigma, batch, count in signature)


def _signature(kinds: Counter[QueryKind]) -> Signature:
    return tuple(sorted((sigma, batch, n) for (sigma, batch), n in kinds.items()))


def _kinds(rows: list) -> Counter[QueryKind]:
    return Counter({(float(sigma), int(batch)): int(n) for sigma, batch, n in rows})


LOOSER_THAN_UNTRUSTED = (
    "this amplified bound is looser than the untrusted-server epsilon of the same run: with a "
    "small per-query multiplier (sigma / sqrt(B)) RDP amplification by subsampling gains less "
    "than composing over T steps costs; quote the untrusted-server epsilon, which needs fewer "
    "assumptions"
)


class PrivacyLedger:
    """Counts of paid queries per client, of trusted-sampler steps and of query outcomes."""

    def __init__(self) -> None:
        self._queries: dict[str, Counter[QueryKind]] = {}
        self._unattributed: dict[str, Counter[QueryKind]] = {}  # node label -> queries
        self._steps: Counter[StepKind] = Counter()
        self._outcomes: Counter[str] = Counter()

    def record_query(self, client_id: str, noise_multiplier: float, batch_size: int) -> None:
        """One query paid by ``client_id`` (B sanitized rows at multiplier sigma)."""
        self._add(self._queries, str(client_id), noise_multiplier, batch_size)

    def record_unattributed(self, node: str, noise_multiplier: float, batch_size: int) -> None:
        """One query sent to ``node``, whose client identity the server does not know yet."""
        self._add(self._unattributed, str(node), noise_multiplier, batch_size)

    @staticmethod
    def _add(
        book: dict[str, Counter[QueryKind]], key: str, noise_multiplier: float, batch_size: int
    ) -> None:
        gswgan_query_event(noise_multiplier, batch_size)  # validates the arguments
        book.setdefault(key, Counter())[(float(noise_multiplier), int(batch_size))] += 1

    def attribute(self, node: str, client_id: str) -> None:
        """The reply of ``node`` named its client: its unattributed queries are that client's."""
        kinds = self._unattributed.pop(str(node), None)
        if kinds:
            self._queries.setdefault(str(client_id), Counter()).update(kinds)

    def record_outcomes(self, answered: int, dropped: int, no_reply: int) -> None:
        """What became of one step's sent queries (all of them were already paid)."""
        self._outcomes.update({"answered": answered, "dropped": dropped, "no-reply": no_reply})

    def unattributed_count(self) -> int:
        return sum(sum(kinds.values()) for kinds in self._unattributed.values())

    def record_step(
        self, clients_sampled: int, population: int, noise_multiplier: float, batch_size: int
    ) -> None:
        """One step that secretly sampled ``clients_sampled`` of ``population`` clients."""
        trusted_sampler_event(1, population, clients_sampled, noise_multiplier, batch_size)
        kind = (int(clients_sampled), int(population), float(noise_multiplier), int(batch_size))
        self._steps[kind] += 1

    def query_counts(self) -> dict[str, int]:
        """Total queries paid, per client (attributed ones only)."""
        return {client: sum(kinds.values()) for client, kinds in self._queries.items()}

    def signature(self, client_id: str) -> Signature:
        """The client's sorted (sigma, B, count) triples; equal signatures, equal epsilon."""
        return _signature(self._queries.get(str(client_id), Counter()))

    def _worst_case(self, client_id: str | None) -> Signature:
        """A client's queries plus every unattributed one: a bound on any client's signature
        when ``client_id`` is the strongest attributed one."""
        kinds = Counter(self._queries.get(str(client_id), Counter()))
        for extra in self._unattributed.values():
            kinds.update(extra)
        return _signature(kinds)

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
        strongest signature is evaluated. Ties go to the smallest client id. Unattributed
        queries are all charged to that client (it may have been their recipient).
        """
        if not self._queries and not self._unattributed:
            return 0.0, None
        worst = min(
            self._queries,
            key=lambda c: (-_signature_strength(self.signature(c)), c),
            default=None,
        )
        signature = self._worst_case(worst)
        return _signature_epsilon(signature, delta, get_accountant(accountant)), worst

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
        signature = _signature(kinds)
        return _signature_epsilon(signature, delta, get_accountant(accountant)) > budget_epsilon

    def summary(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> dict[str, Any]:
        """Both epsilons, each with its threat model, accountant and neighbouring relation, and
        the query counts (paid when sent) with their outcomes."""
        acct = get_accountant(accountant)
        epsilon, worst = self.epsilon_untrusted_max(delta, acct)
        counts = sorted(self.query_counts().values())
        trusted: dict[str, Any] = {
            "threat_model": TRUSTED_SAMPLER,
            "assumption": THREAT_MODELS[TRUSTED_SAMPLER],
            "accountant": acct.name,
            "neighbouring": REPLACE_ONE,
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
            "neighbouring": REPLACE_ONE,
            "neighbouring_relation": NEIGHBOURING[REPLACE_ONE],
            "untrusted_server": {
                "threat_model": UNTRUSTED_SERVER,
                "assumption": THREAT_MODELS[UNTRUSTED_SERVER],
                "accountant": acct.name,
                "neighbouring": REPLACE_ONE,
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
                "counted_when": "sent (paid whether or not a reply came back)",
                "unattributed": self.unattributed_count(),
                "outcomes": {outcome: self._outcomes[outcome] for outcome in OUTCOMES},
            },
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-safe; floats round-trip exactly) to resume a run."""
        return {
            "version": _FORMAT_VERSION,
            "queries": {
                client: [list(row) for row in self.signature(client)]
                for client in sorted(self._queries)
            },
            "unattributed": {
                node: [list(row) for row in _signature(kinds)]
                for node, kinds in sorted(self._unattributed.items())
            },
            "steps": [[*kind, n] for kind, n in sorted(self._steps.items())],
            "outcomes": dict(sorted(self._outcomes.items())),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        if data.get("version") not in _READABLE_VERSIONS:
            raise ValueError(f"unsupported ledger format version {data.get('version')!r}")
        ledger = cls()
        for client, rows in data["queries"].items():
            ledger._queries[client] = _kinds(rows)
        for node, rows in data.get("unattributed", {}).items():
            ledger._unattributed[node] = _kinds(rows)
        ledger._outcomes.update({k: int(v) for k, v in data.get("outcomes", {}).items()})
        for sampled, population, sigma, batch, n in data["steps"]:
            ledger._steps[(int(sampled), int(population), float(sigma), int(batch))] = int(n)
        return ledger

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PrivacyLedger:
        return cls.from_dict(json.loads(text))
