"""Privacy ledger of the teacher-ensemble strategies: which client was asked in which step.

The server charges a teacher for a step when it *sends* it the query (conservative: a teacher
whose reply is lost or dropped is charged too, so a killed run never shows fewer steps than a
client's own count); a query sent to a node whose client is not known yet is charged to the
node's name (*unattributed*) and moved to the client when its reply names it (``attribute``);
any left unattributed (a run killed before the reply) is added to every client's epsilon, since
any client may have been asked. Steps are counted
per client and per kind (``teacher_events``), so a run of any length costs a few integers, and
clients with equal counts share one evaluation.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections import Counter
from typing import Any

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, get_accountant
from fedgs.privacy.teacher_events import TeacherKind, step_event, teacher_client_event
from fedgs.privacy.threat_models import (
    NEIGHBOURING,
    REPLACE_ONE,
    THREAT_MODELS,
    TRUSTED_AGGREGATOR,
    UNTRUSTED_SERVER,
)

Signature = tuple[tuple[TeacherKind, int], ...]
_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)


def _kind(kind: TeacherKind) -> TeacherKind:
    step_event(kind)  # validates the kind
    mechanism, multiplier, releases = kind
    return (str(mechanism), float(multiplier), int(releases))


def _counts(rows: list) -> Counter[TeacherKind]:
    return Counter({(str(m), float(mult), int(rel)): int(n) for m, mult, rel, n in rows})


@functools.lru_cache(maxsize=1024)
def _signature_epsilon(signature: Signature, delta: float, accountant: Accountant) -> float:
    return accountant.epsilon(teacher_client_event(dict(signature)), delta)


class TeacherLedger:
    """Charged steps per client and kind; epsilon per client and the run's maximum."""

    def __init__(self) -> None:
        self._steps: dict[str, Counter[TeacherKind]] = {}
        self._unattributed: dict[str, Counter[TeacherKind]] = {}  # node label -> steps

    def record(self, client_id: str, kind: TeacherKind) -> None:
        self._steps.setdefault(str(client_id), Counter())[_kind(kind)] += 1

    def record_unattributed(self, node: str, kind: TeacherKind) -> None:
        """One step asked of ``node``, whose client the server does not know yet."""
        self._unattributed.setdefault(str(node), Counter())[_kind(kind)] += 1

    def attribute(self, node: str, client_id: str) -> None:
        """The steps charged to ``node``'s name are ``client_id``'s (its reply named it)."""
        kinds = self._unattributed.pop(str(node), None)
        if kinds:
            self._steps.setdefault(str(client_id), Counter()).update(kinds)

    def unattributed_count(self) -> int:
        return sum(sum(kinds.values()) for kinds in self._unattributed.values())

    def step_counts(self) -> dict[str, int]:
        """Steps each client was charged for, per client charged at all."""
        return {client: sum(kinds.values()) for client, kinds in self._steps.items()}

    def signature(self, client_id: str | None, extra: TeacherKind | None = None) -> Signature:
        """The client's (kind, count) pairs, unattributed steps included (conservative)."""
        kinds = Counter(self._steps.get(str(client_id), Counter()))
        for unattributed in self._unattributed.values():
            kinds.update(unattributed)
        if extra is not None:
            kinds[extra] += 1
        return tuple(sorted(kinds.items()))

    def epsilon(
        self,
        client_id: str,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
        extra: TeacherKind | None = None,
    ) -> float:
        """One client's epsilon (with one more step of kind ``extra``, if given)."""
        signature = self.signature(client_id, extra)
        return _signature_epsilon(signature, delta, get_accountant(accountant))

    def epsilon_max(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> tuple[float, str | None]:
        """The run's epsilon, the maximum over clients, and that client (smallest id on ties).

        Every distinct signature is evaluated (cached): with one kind per run there are only as
        many as there are distinct step counts.
        """
        if not self._steps and not self._unattributed:
            return 0.0, None
        acct = get_accountant(accountant)
        by_signature: dict[Signature, str | None] = {}
        for client in sorted(self._steps) or [None]:
            by_signature.setdefault(self.signature(client), client)
        worst: tuple[float, str | None] = (-1.0, None)
        for signature, client in by_signature.items():  # in client-id order
            epsilon = _signature_epsilon(signature, delta, acct)
            if epsilon > worst[0]:
                worst = (epsilon, client)
        return worst

    def would_exceed(
        self,
        kind: TeacherKind,
        budget_epsilon: float,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
    ) -> bool:
        """Whether one more step of ``kind`` could take some client past the budget (worst case:
        a client with the most expensive history votes again)."""
        acct = get_accountant(accountant)
        clients = sorted(self._steps) or ["any"]
        signatures = {self.signature(c, kind) for c in clients}
        return max(_signature_epsilon(s, delta, acct) for s in signatures) > budget_epsilon

    def summary(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> dict[str, Any]:
        """The trusted-aggregator epsilon with its threat model and accountant, and the counts."""
        acct = get_accountant(accountant)
        epsilon, worst = self.epsilon_max(delta, acct)
        counts = sorted(self.step_counts().values())
        return {
            "delta": delta,
            "accountant": acct.name,
            "neighbouring": REPLACE_ONE,
            "neighbouring_relation": NEIGHBOURING[REPLACE_ONE],
            TRUSTED_AGGREGATOR.replace("-", "_"): {
                "threat_model": TRUSTED_AGGREGATOR,
                "assumption": THREAT_MODELS[TRUSTED_AGGREGATOR],
                "accountant": acct.name,
                "neighbouring": REPLACE_ONE,
                "epsilon": epsilon,
                "client_id": worst,
            },
            UNTRUSTED_SERVER.replace("-", "_"): {
                "epsilon": None,
                "note": "clients send unnoised votes: no guarantee against the server",
            },
            "votes": {
                "clients_voted": len(counts),
                "total_steps": sum(counts),
                "min": counts[0] if counts else 0,
                "median": statistics.median(counts) if counts else 0,
                "max": counts[-1] if counts else 0,
                "counted_when": "sent (charged whether or not the votes came back)",
                "unattributed": self.unattributed_count(),
            },
        }

    def to_dict(self) -> dict[str, Any]:
        def rows(book: dict[str, Counter[TeacherKind]]) -> dict[str, list]:
            return {
                key: [[*kind, n] for kind, n in sorted(book[key].items())] for key in sorted(book)
            }

        return {
            "version": _FORMAT_VERSION,
            "steps": rows(self._steps),
            "unattributed": rows(self._unattributed),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TeacherLedger:
        if data.get("version") not in _READABLE_VERSIONS:
            raise ValueError(f"unsupported teacher ledger version {data.get('version')!r}")
        ledger = cls()
        for client, rows in data["steps"].items():
            ledger._steps[client] = _counts(rows)
        for node, rows in data.get("unattributed", {}).items():
            ledger._unattributed[node] = _counts(rows)
        return ledger

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TeacherLedger:
        return cls.from_dict(json.loads(text))
