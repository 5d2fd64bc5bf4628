"""Privacy ledger of the teacher-ensemble strategies: which client was asked in which step.

A ``ClientLedger`` keyed by each step's dp-accounting event (``teacher_events``): the server
charges a teacher for a step when it *sends* it the query (conservative: a teacher whose reply
is lost or dropped is charged too, so a killed run never shows fewer steps than a client's own
count); a query sent to a node whose client is not known yet is charged to the node's name
(*unattributed*) until its reply names the client, and any left unattributed counts for every
client. Version 3 files store events; versions 1 and 2 (rows of mechanism, multiplier, releases
and count) still load.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dp_accounting import dp_event

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, get_accountant
from fedgs.privacy.client_ledger import ClientLedger, checked_version, spread
from fedgs.privacy.teacher_events import teacher_step_event
from fedgs.privacy.threat_models import (
    NEIGHBOURING,
    REPLACE_ONE,
    THREAT_MODELS,
    TRUSTED_AGGREGATOR,
    UNTRUSTED_SERVER,
)

_FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)


def _step_rows(rows: list) -> Counter[dp_event.DpEvent]:
    """Version 1 and 2 rows [mechanism, multiplier, releases, count] as charges."""
    return Counter(
        {teacher_step_event(str(m), float(mult), int(rel)): int(n) for m, mult, rel, n in rows}
    )


class TeacherLedger(ClientLedger):
    """Charged steps per client; epsilon per client and the run's maximum."""

    def step_counts(self) -> dict[str, int]:
        """Steps each client was charged for, per client charged at all."""
        return self.counts()

    def summary(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> dict[str, Any]:
        """The trusted-aggregator epsilon with its threat model and accountant, and the counts."""
        acct = get_accountant(accountant)
        epsilon, worst = self.epsilon_max(delta, acct)
        counts = sorted(self.counts().values())
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
                **spread(counts),
                "counted_when": "sent (charged whether or not the votes came back)",
                "unattributed": self.unattributed_count(),
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {"version": _FORMAT_VERSION, **self.charges_to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TeacherLedger:
        version = checked_version(data, _READABLE_VERSIONS, "teacher ledger")
        ledger = cls()
        # versions 1 and 2 kept their rows under "steps"
        ledger.load_charges(data, None if version == _FORMAT_VERSION else ("steps", _step_rows))
        return ledger
