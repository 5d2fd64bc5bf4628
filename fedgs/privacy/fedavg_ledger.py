"""Privacy ledger of a Fed-Avg GAN run: one Poisson-sampled Gaussian release per round.

Every round releases a noised average whether or not the sampled clients answered (a missing
client is a zero delta), so the cost is counted per round, when the round is sent, keyed by the
sampling rate q = m / K of that round (K may change in a deployment). Trusted-server model only
(threat_models.TRUSTED_SERVER), add/remove-one-client neighbouring (DP-FedAvg's fixed denominator).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from dp_accounting import dp_event

from fedgs.privacy.accountants import DEFAULT_ACCOUNTANT, Accountant, get_accountant
from fedgs.privacy.events import fedavg_round_event
from fedgs.privacy.json_record import JsonRecord
from fedgs.privacy.threat_models import ADD_REMOVE, NEIGHBOURING, THREAT_MODELS, TRUSTED_SERVER


class FedAvgLedger(JsonRecord):
    def __init__(self, noise_multiplier: float) -> None:
        self.noise_multiplier = float(noise_multiplier)
        self._rounds: Counter[tuple[int, int]] = Counter()  # (expected m, population K) -> n

    def record_round(self, clients_per_round: int, population: int) -> None:
        self._rounds[(min(clients_per_round, population), population)] += 1

    @property
    def rounds(self) -> int:
        return sum(self._rounds.values())

    def event(self) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent(
            [
                dp_event.SelfComposedDpEvent(fedavg_round_event(m, k, self.noise_multiplier), count)
                for (m, k), count in sorted(self._rounds.items())
            ]
        )

    def epsilon(self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT) -> float:
        if not self._rounds:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        return get_accountant(accountant).epsilon(self.event(), delta)

    def summary(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> dict[str, Any]:
        acct = get_accountant(accountant)
        return {
            "delta": delta,
            "accountant": acct.name,
            "neighbouring": ADD_REMOVE,
            "neighbouring_relation": NEIGHBOURING[ADD_REMOVE],
            "trusted_server": {
                "threat_model": TRUSTED_SERVER,
                "assumption": THREAT_MODELS[TRUSTED_SERVER],
                "accountant": acct.name,
                "neighbouring": ADD_REMOVE,
                "epsilon": self.epsilon(delta, acct),
            },
            "untrusted_server": {
                "epsilon": None,
                "note": "none: clients send unnoised deltas, no guarantee against the server",
            },
            "rounds": self.rounds,
            "sampling": [
                {"expected_clients": m, "population": k, "q": m / k, "rounds": n}
                for (m, k), n in sorted(self._rounds.items())
            ],
            "noise_multiplier": self.noise_multiplier,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "noise_multiplier": self.noise_multiplier,
            "rounds": [[m, k, n] for (m, k), n in sorted(self._rounds.items())],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FedAvgLedger:
        ledger = cls(float(data["noise_multiplier"]))
        for m, k, n in data["rounds"]:
            ledger._rounds[(int(m), int(k))] = int(n)
        return ledger
