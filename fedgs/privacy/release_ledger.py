"""DP-MERF's ledger: one release per writer, charged when the server sends the query.

A ``ClientLedger`` keyed by ``events.mean_embedding_event``: the server charges each writer it
asks (unattributed to the node's name until the reply names the writer, and then counted for
every writer if it never does), and each client keeps one of its own to refuse a second query
its budget cannot pay. The report's headline is the untrusted-server epsilon (max over writers,
replace-one): the releases are noised on the clients, so no server has to be trusted. The
summary keeps GS-WGAN's layout (``queries``, a ``trusted_sampler`` block, here with no figure),
so the run's printed summary reads it unchanged.
"""

from __future__ import annotations

from typing import Any

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, get_accountant
from fedgs.privacy.client_ledger import ClientLedger, checked_version, untrusted_server_head
from fedgs.privacy.threat_models import (
    REPLACE_ONE,
    TRUSTED_SAMPLER,
)

_FORMAT_VERSION = 1


class ReleaseLedger(ClientLedger):
    """Releases per writer, their outcomes, and the untrusted-server epsilon."""

    def summary(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> dict[str, Any]:
        """The untrusted-server epsilon with its accountant and relation, and the counts."""
        acct = get_accountant(accountant)
        epsilon, worst = self.epsilon_max(delta, acct)
        return untrusted_server_head(delta, acct.name, epsilon, worst) | {
            "trusted_sampler": {
                "threat_model": TRUSTED_SAMPLER,
                "accountant": acct.name,
                "neighbouring": REPLACE_ONE,
                "epsilon": None,
                "note": "no amplification claimed: every writer is asked once, in the open",
            },
            "queries": self.queries_block(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": _FORMAT_VERSION,
            **self.charges_to_dict(),
            "outcomes": dict(sorted(self.outcomes.items())),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseLedger:
        checked_version(data, (_FORMAT_VERSION,), "release ledger")
        ledger = cls()
        ledger.load_charges(data)
        ledger.outcomes.update({k: int(v) for k, v in data.get("outcomes", {}).items()})
        return ledger
