"""The per-client ledger every per-client strategy pays into: charges keyed by their mechanism.

A charge is one dp-accounting event (``events``: a GS-WGAN query, a teacher's step), frozen and
hashable, so the ledger keeps counts per client and per event: a run of any length costs a few
integers, and clients with equal counts (the same *signature*) share one evaluation. The server
charges a query when it *sends* it; a query sent to a node whose client identity the server has
not learned yet is *unattributed* until the reply names it (``attribute``); any left
unattributed (a run killed before the reply) counts for every client, since any of them may have
been asked, so the reported epsilon never falls below a client's own ledger.
"""

from __future__ import annotations

import functools
import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

from dp_accounting import dp_event

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, get_accountant
from fedgs.privacy.events import compose_counts, event_from_json, event_to_json
from fedgs.privacy.json_record import JsonRecord
from fedgs.privacy.threat_models import (
    NEIGHBOURING,
    REPLACE_ONE,
    THREAT_MODELS,
    UNTRUSTED_SERVER,
)

OUTCOMES = ("answered", "dropped", "no-reply")  # what became of a sent (paid) query

Signature = tuple[tuple[dp_event.DpEvent, int], ...]


def signature(charges: Counter[dp_event.DpEvent]) -> Signature:
    """Sorted (event, count) pairs: equal signatures, equal epsilon."""
    return tuple(sorted(((e, n) for e, n in charges.items() if n), key=repr))


@functools.lru_cache(maxsize=4096)
def signature_epsilon(charges: Signature, delta: float, accountant: Accountant) -> float:
    return accountant.epsilon(compose_counts(dict(charges)), delta) if charges else 0.0


def _gaussian_strength(charges: Signature) -> float | None:
    """mu^2 of the one Gaussian a composition of Gaussians is (sum count / multiplier^2), which
    orders epsilon at every delta; None when some charge is not a Gaussian."""
    if not all(isinstance(e, dp_event.GaussianDpEvent) for e, _ in charges):
        return None
    return sum(n / e.noise_multiplier**2 for e, n in charges)


def rows(charges: Counter[dp_event.DpEvent]) -> list[list[Any]]:
    """JSON rows [event, count] of a counter (events as ``events.event_to_json``)."""
    return [[event_to_json(e), n] for e, n in signature(charges)]


def counter(rows: list[list[Any]]) -> Counter[dp_event.DpEvent]:
    return Counter({event_from_json(e): int(n) for e, n in rows})


class ClientLedger(JsonRecord):
    """Charges per client and per event; epsilon per client and the run's maximum."""

    def __init__(self) -> None:
        self._charges: dict[str, Counter[dp_event.DpEvent]] = {}
        self._unattributed: dict[str, Counter[dp_event.DpEvent]] = {}  # node label -> charges
        self.outcomes: Counter[str] = Counter()  # what became of the sent queries (OUTCOMES)

    def record_outcomes(self, answered: int, dropped: int, no_reply: int) -> None:
        """What became of one step's sent (already paid) queries."""
        self.outcomes.update({"answered": answered, "dropped": dropped, "no-reply": no_reply})

    def record(self, client_id: str, event: dp_event.DpEvent) -> None:
        """One charge of ``event`` to ``client_id``."""
        self._charges.setdefault(str(client_id), Counter())[event] += 1

    def record_unattributed(self, node: str, event: dp_event.DpEvent) -> None:
        """One charge to ``node``, whose client identity the server does not know yet."""
        self._unattributed.setdefault(str(node), Counter())[event] += 1

    def attribute(self, node: str, client_id: str) -> None:
        """The reply of ``node`` named its client: its unattributed charges are that client's."""
        charges = self._unattributed.pop(str(node), None)
        if charges:
            self._charges.setdefault(str(client_id), Counter()).update(charges)

    def unattributed_count(self) -> int:
        return sum(sum(charges.values()) for charges in self._unattributed.values())

    def unattributed_nodes(self) -> int:
        """Nodes asked that never answered (dead, refusing or still silent): never bound."""
        return len(self._unattributed)

    def paid(self, client_id: str | None, node: str) -> int:
        """Charges so far of the client behind ``node`` (``client_id`` once the server knows it)
        and of ``node`` itself while unattributed: what a least-queried choice compares."""
        charges = self._unattributed.get(str(node), Counter()).total()
        if client_id is not None:
            charges += self._charges.get(str(client_id), Counter()).total()
        return charges

    def counts(self) -> dict[str, int]:
        """Charges per client (attributed ones only)."""
        return {client: sum(charges.values()) for client, charges in self._charges.items()}

    def signature(
        self, client_id: str | None, extra: dp_event.DpEvent | None = None, worst: bool = False
    ) -> Signature:
        """The client's charges (and one ``extra``); ``worst`` adds every unattributed one."""
        charges = Counter(self._charges.get(str(client_id), Counter()))
        if worst:
            for unattributed in self._unattributed.values():
                charges.update(unattributed)
        if extra is not None:
            charges[extra] += 1
        return signature(charges)

    def client_event(self, client_id: str) -> dp_event.DpEvent:
        """The client's charges as one event (plain composition, no amplification)."""
        return compose_counts(dict(self.signature(client_id)))

    def epsilon(
        self,
        client_id: str,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
        extra: dp_event.DpEvent | None = None,
    ) -> float:
        """One client's epsilon (with one more ``extra`` charge, if given); 0 if never charged."""
        charges = self.signature(client_id, extra)
        return signature_epsilon(charges, delta, get_accountant(accountant))

    def epsilon_max(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> tuple[float, str | None]:
        """The run's epsilon, the maximum over clients (unattributed charges counted for each),
        and that client (smallest id on ties). Only Gaussians: the strongest signature alone is
        evaluated; otherwise every distinct signature (cached)."""
        if not self._charges and not self._unattributed:
            return 0.0, None
        acct = get_accountant(accountant)
        by_signature: dict[Signature, str | None] = {}
        for client in sorted(self._charges) or [None]:
            by_signature.setdefault(self.signature(client, worst=True), client)
        strengths = {s: _gaussian_strength(s) for s in by_signature}
        if None not in strengths.values():
            strongest = next(iter(by_signature))
            for charges in by_signature:  # in client-id order: ties keep the smallest id
                if strengths[charges] > strengths[strongest]:
                    strongest = charges
            return signature_epsilon(strongest, delta, acct), by_signature[strongest]
        worst: tuple[float, str | None] = (-1.0, None)
        for charges, client in by_signature.items():  # in client-id order
            epsilon = signature_epsilon(charges, delta, acct)
            if epsilon > worst[0]:
                worst = (epsilon, client)
        return worst

    def would_exceed(
        self,
        client_id: str,
        event: dp_event.DpEvent,
        budget_epsilon: float,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
    ) -> bool:
        """Whether one more ``event`` charged to the client would take it past the budget."""
        return self.epsilon(client_id, delta, accountant, extra=event) > budget_epsilon

    def queries_block(self) -> dict[str, Any]:
        """The run's queries as every per-query ledger reports them: who was asked and how often,
        counted when sent, and what became of them (counts per ``OUTCOMES``)."""
        outcomes = self.outcomes
        counts = sorted(self.counts().values())
        return {
            "clients_queried": len(counts),
            "total": sum(counts),
            **spread(counts),
            "counted_when": "sent (paid whether or not a reply came back)",
            "unattributed": self.unattributed_count(),
            "unattributed_nodes": self.unattributed_nodes(),
            "outcomes": {outcome: outcomes[outcome] for outcome in OUTCOMES},
        }

    def charges_to_dict(self) -> dict[str, Any]:
        """The charges as plain data (JSON-safe; floats round-trip exactly)."""
        return {
            "charges": {c: rows(self._charges[c]) for c in sorted(self._charges)},
            "unattributed": {n: rows(self._unattributed[n]) for n in sorted(self._unattributed)},
        }

    def load_charges(
        self,
        data: dict[str, Any],
        legacy: tuple[str, Callable[[list], Counter[dp_event.DpEvent]]] | None = None,
    ) -> None:
        """The charges of ``data`` (``charges_to_dict``'s); ``legacy``: where an older format
        (versions 1 and 2) keeps the per-client rows, and how to read its rows as charges."""
        key, read = legacy or ("charges", counter)
        for client, charges in data[key].items():
            self._charges[client] = read(charges)
        for node, charges in data.get("unattributed", {}).items():
            self._unattributed[node] = read(charges)


def checked_version(data: dict[str, Any], readable: tuple[int, ...], what: str) -> int:
    """The format version ``data`` names; ValueError when it is not one this ledger reads."""
    version = data.get("version")
    if version not in readable:
        raise ValueError(f"unsupported {what} version {version!r}")
    return version


def spread(counts: list[int]) -> dict[str, float]:
    """Smallest, median and largest of sorted per-client counts (0 for none): a report's row."""
    if not counts:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": counts[0], "median": statistics.median(counts), "max": counts[-1]}


def untrusted_server_head(
    delta: float, accountant: str, epsilon: float, worst: str | None
) -> dict[str, Any]:
    """The opening of a per-client ledger's report: delta, accountant, the replace-one
    relation and the untrusted-server epsilon (the most-charged client's)."""
    return {
        "delta": delta,
        "accountant": accountant,
        "neighbouring": REPLACE_ONE,
        "neighbouring_relation": NEIGHBOURING[REPLACE_ONE],
        "untrusted_server": {
            "threat_model": UNTRUSTED_SERVER,
            "assumption": THREAT_MODELS[UNTRUSTED_SERVER],
            "accountant": accountant,
            "neighbouring": REPLACE_ONE,
            "epsilon": epsilon,
            "client_id": worst,
        },
    }
