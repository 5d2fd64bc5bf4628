"""The ``--target-epsilon`` stop: the run's epsilon as its report counts it, after the worst the
next step can charge.

The report (``ClientLedger.epsilon_max``) is the maximum over clients of a client's own charges
plus every unattributed charge: a query sent to a node whose client the server has not learned
stays unattributed when its reply is lost (a timeout, a crash) and then counts for every client.
So the stop counts the same way: a node whose client is known charges that client; a node whose
client is unknown may be asked and never answer, and its query then counts for every client. A
step asks m nodes, so no client gains more than m charges. The worst case reads only the ledger
and which nodes could be asked, never the step's secret draw: the stop tells nobody who was drawn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from dp_accounting import dp_event

from fedgs.privacy.accountants import Accountant, get_accountant
from fedgs.privacy.client_ledger import ClientLedger, Signature, signature, signature_epsilon


def _with_charges(base: Signature, event: dp_event.DpEvent, count: int) -> Signature:
    """``base`` and ``count`` more ``event`` charges."""
    charges = Counter(dict(base))
    charges[event] += count
    return signature(charges)


def epsilon_after_next_step(
    ledger: ClientLedger,
    event: dp_event.DpEvent,
    askable: Iterable[str | None],
    asked: int,
    delta: float,
    accountant: Accountant | str,
) -> float:
    """The largest epsilon the report can show after one more step that charges ``event`` to
    ``asked`` of the nodes whose clients are ``askable`` (None: a node whose client is unknown).

    A client gains a charge for each of its askable nodes and one for each unknown askable node
    (whose reply may be lost), at most ``asked`` in all; clients never charged and the unknown
    nodes' own clients are the unattributed charges alone plus as many."""
    per_client = Counter(askable)
    unknown = per_client.pop(None, 0)
    acct = get_accountant(accountant)
    lost = Counter(dict(ledger.signature(None, worst=True)))  # every unattributed charge
    pending: set[tuple[Signature, int]] = {((), min(asked, unknown))}  # an unknown client
    for client in set(ledger.counts()) | set(per_client):
        extra = min(asked, per_client.get(client, 0) + unknown)
        pending.add((ledger.signature(client), extra))
    worst = 0.0
    for own, extra in pending:  # distinct (own charges, step's charges): few per run
        charges = lost + Counter(dict(own))
        epsilon = signature_epsilon(_with_charges(signature(charges), event, extra), delta, acct)
        worst = max(worst, epsilon)
    return worst


def would_pass(
    ledger: ClientLedger,
    event: dp_event.DpEvent,
    askable: Iterable[str | None],
    asked: int,
    target: float,
    delta: float,
    accountant: Accountant | str,
) -> bool:
    """Whether the next step could take the reported epsilon past ``target``."""
    return epsilon_after_next_step(ledger, event, askable, asked, delta, accountant) > target
