"""GS-WGAN's privacy ledger: what every client answered, and what that costs.

A client keeps one to refuse queries past its budget (``would_exceed``). The server keeps one to
report epsilon, conservatively: a query counts as paid when the server *sends* it (at the sigma
it asked for and the batch it sent), whether or not a reply ever comes back, and the outcome of
each query (answered, dropped, no reply) is reconciled afterwards. The per-client charges are a
``ClientLedger`` keyed by each query's dp-accounting event (the teachers' ledger is one too);
this one adds the trusted-sampler steps (each step's subsampled event, counted; reported as the
tightest valid bound, never above the untrusted-server figure) and the outcomes. Version 3
files store events; versions 1 and 2 (rows of sigma, batch size and count) still load.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dp_accounting import dp_event

from fedgs.privacy.accountants import (
    DEFAULT_ACCOUNTANT,
    Accountant,
    UnsupportedEventError,
    get_accountant,
)
from fedgs.privacy.client_ledger import (
    ClientLedger,
    checked_version,
    counter,
    rows,
    untrusted_server_head,
)
from fedgs.privacy.events import compose_counts, gswgan_query_event, trusted_sampler_event
from fedgs.privacy.threat_models import (
    REPLACE_ONE,
    THREAT_MODELS,
    TRUSTED_SAMPLER,
)

_FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)

# The valid trusted-sampler bounds: clients add a discrete Gaussian, whose RDP is the continuous
# Gaussian's but whose PLD is not shown to be bounded by it, and dp-accounting's PLD has no
# sampling without replacement; so RDP only, each accountant's, and the untrusted-server figure.
RDP_ACCOUNTANTS = ("autodp-rdp", "dp-accounting-rdp")
UNTRUSTED_BOUND = "untrusted-server bound"
UNTRUSTED_IS_TIGHTEST = (
    "the untrusted-server epsilon of the same run is the tightest valid bound here: it assumes "
    "less, so it holds under a trusted sampler too, and with a small per-query multiplier "
    "(sigma / sqrt(B)) RDP amplification by subsampling gains less than composing every step costs"
)


def tightest_trusted_sampler(
    event: dp_event.DpEvent, untrusted: float, untrusted_accountant: str, delta: float
) -> dict[str, Any]:
    """The trusted-sampler figure of ``event`` (steps sampling m of N clients uniformly without
    replacement, replace-one): the smallest valid bound, each RDP accountant's amplified one or
    ``untrusted`` (the same run's untrusted-server epsilon); a weaker threat model never needs a
    larger epsilon. ``tightest`` names the winner, ``bounds`` lists every candidate."""
    bounds: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name in RDP_ACCOUNTANTS:
        try:
            bounds[name] = get_accountant(name).epsilon(event, delta)
        except UnsupportedEventError as err:
            errors[name] = str(err)
    bounds[UNTRUSTED_BOUND] = untrusted
    tightest = min(bounds, key=bounds.__getitem__)  # ties: the amplified bound, listed first
    figure: dict[str, Any] = {
        "epsilon": bounds[tightest],
        "tightest": tightest,
        "accountant": untrusted_accountant if tightest == UNTRUSTED_BOUND else tightest,
        "bounds": bounds,
    }
    if errors:
        figure["errors"] = errors
    if tightest == UNTRUSTED_BOUND:
        figure["note"] = UNTRUSTED_IS_TIGHTEST
    return figure


def _query_rows(rows_: list) -> Counter[dp_event.DpEvent]:
    """Version 1 and 2 rows [sigma, batch size, count] as charges."""
    return Counter({gswgan_query_event(float(s), int(b)): int(n) for s, b, n in rows_})


class PrivacyLedger(ClientLedger):
    """Paid queries per client, trusted-sampler steps and query outcomes."""

    def __init__(self) -> None:
        super().__init__()
        self._steps: Counter[dp_event.DpEvent] = Counter()  # one step's subsampled event -> n

    def record_query(self, client_id: str, noise_multiplier: float, batch_size: int) -> None:
        """One query paid by ``client_id`` (B sanitized rows at multiplier sigma)."""
        self.record(client_id, gswgan_query_event(noise_multiplier, batch_size))

    def record_step(
        self, clients_sampled: int, population: int, noise_multiplier: float, batch_size: int
    ) -> None:
        """One step that secretly sampled ``clients_sampled`` of ``population`` clients."""
        step = trusted_sampler_event(1, population, clients_sampled, noise_multiplier, batch_size)
        self._steps[step.event] += 1

    def query_counts(self) -> dict[str, int]:
        """Total queries paid, per client (attributed ones only)."""
        return self.counts()

    def trusted_sampler_event(self) -> dp_event.DpEvent:
        """All recorded steps as one event (trusted sampler: subsampled Gaussians)."""
        return compose_counts(self._steps)

    def epsilon_untrusted(
        self, client_id: str, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> float:
        """Epsilon of one client under the untrusted server (0 if it answered nothing)."""
        return self.epsilon(client_id, delta, accountant)

    def epsilon_untrusted_max(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> tuple[float, str | None]:
        """The run's untrusted-server epsilon: the max over clients, and that client."""
        return self.epsilon_max(delta, accountant)

    def epsilon_trusted_sampler(
        self, delta: float, accountant: Accountant | str = DEFAULT_ACCOUNTANT
    ) -> float:
        """Epsilon of every client under the trusted-sampler assumption: the tightest valid bound
        (``tightest_trusted_sampler``; ``accountant`` computes the untrusted-server one)."""
        return self.trusted_sampler_summary(delta, accountant)["epsilon"]

    def trusted_sampler_summary(
        self,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
        untrusted: float | None = None,
    ) -> dict[str, Any]:
        """The trusted-sampler block of the report (~0.2 s: subsampled RDP, two accountants);
        ``untrusted``: the run's untrusted-server epsilon when the caller has it."""
        acct = get_accountant(accountant)
        if untrusted is None:
            untrusted = self.epsilon_untrusted_max(delta, acct)[0]
        figure = tightest_trusted_sampler(self.trusted_sampler_event(), untrusted, acct.name, delta)
        return {
            "threat_model": TRUSTED_SAMPLER,
            "assumption": THREAT_MODELS[TRUSTED_SAMPLER],
            "neighbouring": REPLACE_ONE,
            "steps": sum(self._steps.values()),
        } | figure

    def summary(
        self,
        delta: float,
        accountant: Accountant | str = DEFAULT_ACCOUNTANT,
        trusted: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Both epsilons, each with its threat model, accountant and neighbouring relation, and
        the query counts (paid when sent) with their outcomes. ``trusted``: a trusted-sampler
        block computed earlier (a run recomputes it at checkpoints only), else computed now."""
        acct = get_accountant(accountant)
        epsilon, worst = self.epsilon_untrusted_max(delta, acct)
        if trusted is None:
            trusted = self.trusted_sampler_summary(delta, acct, epsilon)
        return untrusted_server_head(delta, acct.name, epsilon, worst) | {
            "trusted_sampler": trusted,
            "queries": self.queries_block(),
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-safe; floats round-trip exactly) to resume a run."""
        return {
            "version": _FORMAT_VERSION,
            **self.charges_to_dict(),
            "steps": rows(self._steps),
            "outcomes": dict(sorted(self.outcomes.items())),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PrivacyLedger:
        version = checked_version(data, _READABLE_VERSIONS, "ledger format")
        ledger = cls()
        ledger.outcomes.update({k: int(v) for k, v in data.get("outcomes", {}).items()})
        if version == _FORMAT_VERSION:
            ledger.load_charges(data)
            ledger._steps = counter(data["steps"])
            return ledger
        ledger.load_charges(data, legacy=("queries", _query_rows))  # versions 1 and 2
        for sampled, population, sigma, batch, n in data["steps"]:
            step = trusted_sampler_event(1, int(population), int(sampled), float(sigma), int(batch))
            ledger._steps[step.event] += int(n)
        return ledger
